"""The reports over finished runs: the study report, comparisons, robustness effects and
approximate randomization (the core paper's reproduction report, `robustnlu.studies.seqdrift_dro`,
builds on them). Run directories are read through `robustnlu.rundir`, metrics described by
`robustnlu.metrics.registry`, tables written by `robustnlu.tables`."""
