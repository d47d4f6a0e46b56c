"""Where a method's groups come from (``groups@method.groups=<name>``, conf/groups/): the
SeqDrift clusters of the drift split and LDA topics for the group methods (TopK-Group,
Group-DRO, Topic-CVaR: a `GroupSource`, robustnlu/groups/base.py), and the online autoencoder
whose codes are TopK-AE's groups. Learned adversaries are in robustnlu/adversary/."""
