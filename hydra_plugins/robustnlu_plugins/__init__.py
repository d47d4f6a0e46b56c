"""robustnlu's Hydra plugins: the Optuna sweeper for Optuna >= 4 (``hydra/sweeper=optuna``,
optuna_sweeper.py), the default sweeper of a multirun that searches nothing (``hydra/sweeper=product``,
product_sweeper.py: Hydra's basic sweeper, every batch launched whatever failed before, batches.py),
the sweeper that launches a given job list (``hydra/sweeper=joblist``,
job_list_sweeper.py, used by ``python -m robustnlu.sweep relaunch``) and stand-ins for the
submitit launcher's configs when its extra is missing (launcher_stubs.py). A Hydra plugin must
live in the ``hydra_plugins`` namespace package."""
