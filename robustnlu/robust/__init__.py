"""Training objectives: each is a reduction of per-example `TaskLosses` to one scalar.

One class per method (one file each) behind `RobustObjective`, declaring its hyper-parameters
(`robustnlu.hparams`); the method's YAML in conf/method/ names the class with ``_target_``, so
adding a method touches one file + one YAML, here or in a package and config folder of the
user's own (docs/architecture.md, "Recipes").
"""

from robustnlu.robust.base import RobustObjective

__all__ = ["RobustObjective"]
