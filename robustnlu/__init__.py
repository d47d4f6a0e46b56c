"""robustnlu: robustness of spoken-language understanding (intent classification + slot
filling) under distribution shift: drifted benchmark splits (SeqDrift), JointBERT with ERM
and distributionally robust objectives, and the study tooling around them."""

__version__ = "0.1.0"
