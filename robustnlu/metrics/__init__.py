"""SLU evaluation metrics (core paper section 5.1 and Appendix D).

- `registry`: each metric's formula from counts, title, direction and unit, once; the robustness
  measures of a run (the valid → test drop, the worst cluster);
- `counts`: the per-utterance counts every metric derives from (plain Python);
- `slu`: `SLUMetrics` (the torchmetrics metric a run evaluates with);
- `robustness`: scores on a noisy suite and the noise effects (paper 002, Table 4).

Nothing is imported here: reading results (the registry) and counting stored predictions
(counts) do not load torch or torchmetrics.
"""
