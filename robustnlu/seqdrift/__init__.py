"""SeqDrift (core paper, section 3): covariate-drift train/valid/test splits of an SLU corpus.

Clusters of utterances with similar slot values (``slot_value``) or slot contexts
(``slot_context``) are moved as a whole into the test split (and, for o.o.d. validation, into
the validation split) while the label distribution is kept close to the training one.

- `robustnlu.seqdrift.config`: `SplitConfig`, every ``drift``/``validation`` setting declared
  once (its spec in `robustnlu.config_spec`'s language, default, doc), read by the config
  schema too;
- `robustnlu.seqdrift.filtering`: rare intents and slot types, the labels of an utterance;
- `robustnlu.seqdrift.split`: the split itself (pure; takes cluster ids), `DriftSplit`;
- `robustnlu.seqdrift.features` / `robustnlu.seqdrift.cluster`: n-gram features, spectral
  clustering; `robustnlu.seqdrift.kmeans`: its k-means, tie-aware so that the machine's BLAS
  kernel does not decide it;
- `robustnlu.seqdrift.shipped`: the canonical clusterings shipped in ``data/seqdrift/`` (the
  default: the same split on every machine; ``drift.clusters``);
- `robustnlu.seqdrift.stats`: Table-4-like statistics;
- `robustnlu.seqdrift.artifact`: the content-addressed cache (computed once under concurrency);
  `robustnlu.seqdrift.entries`: its entries, checked against their ``SHA256SUMS`` before use;
- `robustnlu.seqdrift.pipeline`: `make_drift_split`, everything chained and cached;
- ``python -m robustnlu.seqdrift``: the command line (conf/seqdrift.yaml; ``--verify``);
  ``python -m robustnlu.seqdrift.canonical``: check, verify or write the shipped clusterings.
"""

from robustnlu.seqdrift.pipeline import make_drift_split
from robustnlu.seqdrift.config import SplitConfig
from robustnlu.seqdrift.filtering import filter_utterances
from robustnlu.seqdrift.split import Assignment, DriftSplit, split_by_clusters

__all__ = ["Assignment", "DriftSplit", "SplitConfig", "filter_utterances", "make_drift_split", "split_by_clusters"]
