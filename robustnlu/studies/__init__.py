"""Studies: planned lists of training jobs, and the studies this project runs (the core paper's:
`robustnlu.studies.seqdrift_dro`)."""
