"""robustnlu's Hydra plugins: the Optuna sweeper for Optuna >= 4 (``hydra/sweeper=optuna``,
optuna_sweeper.py) and stand-ins for the submitit launcher's configs when its extra is missing
(launcher_stubs.py). A Hydra plugin must live in the ``hydra_plugins`` namespace package."""
