"""Training augmentation with a noise transform (Krone et al., paper 002, section 5 and App. A.2).

``augment=<noise type>`` (conf/augment/) noises a ``fraction`` of the training utterances with
the transform of conf/noise/<type>.yaml, whose ``rate`` defaults to the paper's chosen
augmentation rate (casing 50% of tokens, misspelling 20%, abbreviations 15%, morphology 10%,
synonyms 10%, paraphrase 15% of utterances). The paper does not say whether noised copies
replace the originals or are added to them (digest A.4):

- ``mode: inplace`` (default; the paper's wording "inject noise into 50% of training tokens"
  reads this way): a selected utterance is replaced by its noised version, same uid;
- ``mode: append``: the noised version of a selected utterance is added next to the original,
  with uid ``<uid>+<noise>`` and the original's group; unchanged copies are not added.

Which utterances are selected depends only on (seed, uid), like the noise itself
(`robustnlu.noise.base.utterance_rng`). The transform is fitted on the clean training split
(paraphrase templates, the fluency model). Valid and test are never augmented. The record of
what was done (transform parameters, mode, counts) goes to results.json under ``augment``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate

from robustnlu.data.utterance import Corpus
from robustnlu.errors import ConfigError
from robustnlu.extras import raise_missing_extra
from robustnlu.noise.base import NoiseStats, NoiseTransform, utterance_rng

MODES = ("inplace", "append")


def build_transform(noise_cfg: Any, seed: int) -> NoiseTransform:
    """Instantiate a conf/noise/ config with the run's seed."""
    try:
        transform = instantiate(noise_cfg, seed=seed)
    except InstantiationException as err:  # its module may need an extra (robustnlu/noise/synonym.py)
        raise_missing_extra(err)
        raise
    if not isinstance(transform, NoiseTransform):
        raise ConfigError(f"noise._target_ must build a NoiseTransform, got {type(transform).__name__}")
    return transform


def augment_corpus(
    corpus: Corpus, groups: Mapping[str, int], cfg: Mapping[str, Any], seed: int
) -> tuple[Corpus, dict[str, int], dict[str, Any] | None]:
    """The corpus with its training split augmented as ``cfg`` (``noise``, ``mode``,
    ``fraction``) says, the groups extended to appended copies, and the record for results.json
    (None when ``cfg.noise`` is null: no augmentation)."""
    groups = dict(groups)
    if cfg.get("noise") is None:
        return corpus, groups, None
    mode, fraction = cfg.get("mode"), cfg.get("fraction")
    if mode not in MODES:
        raise ConfigError(f"augment.mode must be one of {MODES}, got {mode!r}")
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 < fraction <= 1:
        raise ConfigError(f"augment.fraction must be a number in (0, 1], got {fraction!r}")
    transform = build_transform(cfg["noise"], seed).fit(corpus.train)
    stats = NoiseStats()
    train, appended = [], []
    for u in corpus.train:
        if utterance_rng(seed, "augment", u.uid).random() >= fraction:
            train.append(u)
            continue
        noised = transform(u)
        stats.add(u, noised)
        if mode == "inplace":
            train.append(noised)
            continue
        train.append(u)
        if noised.tokens != u.tokens:
            copy = replace(noised, uid=f"{u.uid}+{transform.name}")
            appended.append(copy)
            groups[copy.uid] = groups.get(u.uid, -1)
    record = {"noise": transform.config(), "mode": mode, "fraction": fraction,
              "selected": stats.utterances, "appended": len(appended), "stats": stats.to_dict()}
    return Corpus(corpus.name, train + appended, corpus.valid, corpus.test), groups, record
