"""SLU evaluation metrics (core paper section 5.1 and Appendix D).

- `registry`: each metric's formula from counts, title, direction and unit, once; the robustness
  measures of a run (the valid → test drop, the worst cluster);
- `slu`: `SLUMetrics` (the torchmetrics metric a run evaluates with) and the per-utterance counts;
- `robustness`: scores on a noisy suite and the noise effects (paper 002, Table 4).

Nothing is imported here: reading results (the registry) does not load torchmetrics.
"""
