"""robustnlu's Hydra plugins: the Optuna sweeper for Optuna >= 4 (``hydra/sweeper=optuna``,
optuna_sweeper.py), the default sweeper of a multirun that searches nothing (``hydra/sweeper=product``,
product_sweeper.py: Hydra's basic sweeper, every batch launched whatever failed before, batches.py),
the sweeper that launches a given job list (``hydra/sweeper=joblist``,
job_list_sweeper.py, used by ``python -m robustnlu.sweep relaunch``) and the launchers of
``hydra/launcher=local|slurm``: hydra-submitit-launcher's, with ``runs_per_gpu`` sweep jobs to a GPU
(launchers.py; stand-ins for their configs when the slurm extra is missing). A Hydra plugin must
live in the ``hydra_plugins`` namespace package."""
