"""robustnlu's Hydra sweeper for Optuna >= 4 (``hydra/sweeper=optuna``): see optuna_sweeper.py.
A Hydra plugin must live in the ``hydra_plugins`` namespace package to be found and allowed."""
