"""Stages 1-2 of the data-efficiency protocol (Desai et al. 2021, section 2; digest 002/003 B.2):
the training corpus of one run for target domain d and subset percentage k.

- Stage 1: the target's training split is sampled uniformly without replacement; subsets are
  nested (one seeded permutation, the first ⌊k/100 · |D_d| + ½⌋ utterances), so the 12% subset
  contains the 7% one and the curve is not blurred by which utterances were drawn.
- Stage 2, ``mode=joint`` (the paper): train on every source domain d' ≠ d plus the subset;
  ``mode=adapt``: train on the subset alone, starting from a source model (``init_from``).
  Validation: the sources' validation splits plus the target's, subsampled like train
  (``valid: same``, the paper's "a mix of source and (subsetted) target data") or whole
  (``valid: full``). Test: the target's whole test split (exact match on it is the curve's y).
- The label vocabulary is every domain's full training split, so the heads are the same at
  every percentage and an adapted source model keeps its shape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf
from robustnlu.data.readers import load_corpus
from robustnlu.data.utterance import SPLITS, Corpus, LabelVocab, Utterance
from robustnlu.errors import ConfigError

TOPV2_DOMAINS = ("alarm", "event", "messaging", "music", "navigation", "reminder", "timer", "weather")


@dataclass(frozen=True)
class EfficiencySplit:
    """The corpus of one efficiency run and what results.json records about it."""

    corpus: Corpus  # train/valid as above, test = the target's test split
    vocab: LabelVocab  # every domain's whole training split
    source_train: list[Utterance]  # the sources' training splits (the Fisher of optimizer=conatural)
    source_test: list[Utterance]  # the sources' test splits (forgetting under mode=adapt)
    info: dict[str, Any]


def seeded_sample(utterances: Sequence[Utterance], n: int, seed: int, stream: str) -> list[Utterance]:
    """The first ``n`` utterances of a permutation seeded by (seed, stream), in their original
    order: samples of one seed and stream are nested (a smaller one is inside a larger one)."""
    order = np.random.default_rng([seed, *stream.encode()]).permutation(len(utterances))
    return [utterances[i] for i in np.sort(order[:n])]


def nested_subset(utterances: Sequence[Utterance], percent: float, seed: int, stream: str) -> list[Utterance]:
    """Stage 1: round(percent% · n) utterances drawn uniformly without replacement, nested."""
    if not 0 <= percent <= 100:
        raise ConfigError(f"efficiency.percent={percent}: a percentage in [0, 100]")
    return seeded_sample(utterances, int(round(percent / 100 * len(utterances))), seed, stream)


def source_domains(target: str, sources: Sequence[str] | None) -> list[str]:
    chosen = [d for d in TOPV2_DOMAINS if d != target] if sources is None else list(sources)
    unknown = sorted(set(chosen) - set(TOPV2_DOMAINS))
    if unknown or target in chosen:
        raise ConfigError(f"efficiency.sources={chosen}: TOPv2 domains other than the target {target!r} "
                          f"({', '.join(TOPV2_DOMAINS)})")
    return chosen


def sibling_domain(dataset_cfg: Mapping[str, Any], domain: str) -> dict[str, Any]:
    """The dataset config of another TOPv2 domain in the same folder as the target's
    (``weather_train.tsv`` → ``alarm_train.tsv``; name ``topv2_weather`` → ``topv2_alarm``)."""
    target = dataset_cfg["domain"]
    return {**dataset_cfg, "domain": domain, "name": str(dataset_cfg["name"]).replace(target, domain),
            "files": {split: str(f).replace(target, domain, 1) for split, f in dataset_cfg["files"].items()}}


def efficiency_split(dataset_cfg: Mapping[str, Any], eff: Mapping[str, Any], root: Path) -> EfficiencySplit:
    """Assemble the run's corpus; the target is ``dataset`` (a ``topv2_<domain>`` config)."""
    target_domain = dataset_cfg.get("domain")
    if target_domain not in TOPV2_DOMAINS:
        raise ConfigError(f"efficiency: the dataset must be a TOPv2 domain (dataset=topv2_<domain>), "
                          f"not {dataset_cfg.get('name')!r}")
    if eff["mode"] not in ("joint", "adapt") or eff["valid"] not in ("same", "full"):
        raise ConfigError(f"efficiency.mode={eff['mode']!r} (joint|adapt), efficiency.valid={eff['valid']!r} (same|full)")
    if eff["mode"] == "adapt" and not eff.get("init_from"):
        raise ConfigError("efficiency.mode=adapt needs efficiency.init_from=<the source model's checkpoint>")
    if isinstance(dataset_cfg, DictConfig):
        dataset_cfg = OmegaConf.to_container(dataset_cfg, resolve=True)
    target = load_corpus(dataset_cfg, root)
    seed, percent = int(eff["subset_seed"]), float(eff["percent"])
    sources = []
    for domain in source_domains(target_domain, eff.get("sources")):
        corpus = load_corpus(sibling_domain(dataset_cfg, domain), root)
        if eff.get("source_limit"):  # smoke runs: a seeded sample of each split
            corpus = Corpus(corpus.name, *(seeded_sample(corpus.split(s), min(int(eff["source_limit"]), len(corpus.split(s))),
                                                         seed, f"{domain}-{s}") for s in SPLITS))
        sources.append(corpus)
    subset = nested_subset(target.train, percent, seed, "train")
    valid = nested_subset(target.valid, percent, seed, "valid") if eff["valid"] == "same" else target.valid
    source_train = [u for c in sources for u in c.train]
    if eff["mode"] == "joint":
        train, valid = source_train + subset, [u for c in sources for u in c.valid] + valid
    elif not subset or not valid:
        raise ConfigError(f"efficiency.mode=adapt at {percent}%: {len(subset)} target training and {len(valid)} "
                          "validation utterances; adapting needs both (valid=full keeps the whole validation split)")
    else:
        train = subset
    info = {"target": target_domain, "percent": percent, "mode": eff["mode"], "subset_size": len(subset),
            "target_train_size": len(target.train), "sources": {c.name: len(c.train) for c in sources},
            "valid": eff["valid"], "subset_seed": seed, "init_from": eff.get("init_from")}
    return EfficiencySplit(
        corpus=Corpus(target.name, train, valid, list(target.test)),
        vocab=LabelVocab.from_utterances([*source_train, *target.train]),
        source_train=source_train,
        source_test=[u for c in sources for u in c.test],
        info=info,
    )
