"""Training objectives: each is a reduction of per-example `TaskLosses` to one scalar.

One class per method (one file each) behind `RobustObjective`; the method's YAML in
conf/method/ names the class with ``_target_``, so adding a method touches one file + one YAML.
"""

from robustnlu.robust.base import RobustObjective

__all__ = ["RobustObjective"]
