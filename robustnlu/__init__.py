"""robustnlu: robustness of spoken-language understanding (intent classification + slot
filling) under distribution shift: drifted benchmark splits (SeqDrift), JointBERT with ERM
and distributionally robust objectives, and the study tooling around them."""

from robustnlu import hparams, paths, scenario, sweep_jobs

__version__ = "0.1.0"

# before any config is composed: ${scenario_name:...} (conf/config.yaml), ${job_hash:...}
# (conf/hydra/default.yaml: a sweep job's folder), ${shipped_data_dir:} (conf/paths/),
# ${declared_search_space:...} (conf/hparams_search/optuna.yaml: the method's search space)
scenario.register_resolver()
sweep_jobs.register_resolver()
paths.register_resolver()
hparams.register_resolver()
