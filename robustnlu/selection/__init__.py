"""Adversarial model-selection criteria (``selection.criterion``): fed per-example validation
errors, losses and adversary log-weights at every validation during fit (`SLUModule`)."""
