"""Learned adversaries (``adversary@method.adversary=<name>``, conf/adversary/): the networks
that model the uncertainty set of a parametric DRO method and are trained against the model:
R-PDRO's ratio network (`robustnlu.adversary.ratio`) and P-DRO's generative language model
(`robustnlu.adversary.generative_lm`). Where a group method's groups come from: robustnlu/groups/."""
