"""robustnlu: robustness of spoken-language understanding (intent classification + slot
filling) under distribution shift: drifted benchmark splits (SeqDrift), JointBERT with ERM
and distributionally robust objectives, and the study tooling around them."""

from robustnlu.scenario import register_resolver

__version__ = "0.1.0"

register_resolver()  # ${scenario_name:...} in conf/config.yaml, before any config is composed
