"""Studies: an ordered list of named training jobs, run resumably through the sweep machinery and
kept as compact records (`robustnlu.studies.runner`), and the studies this project runs on it (the
core paper's: `robustnlu.studies.seqdrift_dro`)."""
