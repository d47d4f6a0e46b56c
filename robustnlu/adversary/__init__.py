"""What models the uncertainty set of a robust objective (``adversary=``, conf/adversary/):
group sources (SeqDrift clusters, LDA topics) for the group methods, the online autoencoder of
TopK-AE, and the parametric adversaries of R-PDRO and P-DRO."""
