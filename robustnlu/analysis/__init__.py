"""The reports over finished runs (the top layer: nothing below imports it): the study, the
reproduction report, comparisons, robustness effects and approximate randomization. Run
directories are read through `robustnlu.rundir`, metrics described by `robustnlu.metrics.registry`,
tables written by `robustnlu.tables`."""
