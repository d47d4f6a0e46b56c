"""Statistics of a SeqDrift split, as in the core paper's Table 4 (and Appendix A).

`split_statistics` returns a JSON-ready dict (saved as ``stats.json``); `format_table` prints
it as plain text. What is measured:

- per split: size, share of the kept corpus, examples in drift and "% drift";
- label distributions, train vs test (and train vs valid): Pearson correlation of the intent
  distribution, of the intent-slot label distribution (``<intent>-<slot type>``, counted
  once per utterance, as in the splitter) and of all projected labels together (intents and
  intent-slot labels: what Appendix A's "correlations >= 98%" may refer to), and the total
  variation distance of the intent distributions (``0.5 * sum |p - q|``). The intent Pearson
  says little on intent-balanced corpora (SNIPS: every intent ~1/7, so the correlation is
  that of noise: -0.77 for SNIPS's own train/test split); read the TVD there;
- clusters: how many, how many isolated utterances, drift clusters used by test and valid,
  a histogram of cluster sizes (kept utterances only);
- unmet projected label counts (label -> examples missing), from the splitter;
- the proxy A-distance ``d = 2 (1 - 2 eps)`` between train and test (Ben-David et al. 2007):
  ``eps`` is the held-out error of a linear domain classifier (scikit-learn
  `LogisticRegression`, default L2, C=1) on *binary bag-of-words features* (lower-cased token
  unigrams and bigrams, the vocabulary of the classifier's training half). Bag of words rather
  than the clustering n-grams, so the number measures the shift in the words a model sees and
  is comparable between slot value and slot context drift and for ``drift: none``. The two
  sides are balanced (``min(|train|, |test|, 5000)`` random examples each, seeded), half of
  each side trains the classifier and the other half measures ``eps``; ``eps`` is capped at
  0.5 (a worse-than-chance classifier flipped), so ``d`` lies in [0, 2].
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from robustnlu.data.utterance import SPLITS, Corpus, Utterance
from robustnlu.seqdrift.filtering import utterance_labels
from robustnlu.seqdrift.split import DriftSplit

HISTOGRAM_BINS = ((1, 1), (2, 4), (5, 9), (10, 19), (20, 49), (50, 99), (100, 199), (200, 499), (500, None))


def distribution(labels: Sequence[str] | Counter) -> dict[str, float]:
    counts = labels if isinstance(labels, Counter) else Counter(labels)
    total = sum(counts.values())
    return {k: v / total for k, v in sorted(counts.items())} if total else {}


def pearson(p: Mapping[str, float], q: Mapping[str, float]) -> float | None:
    """Pearson correlation of two distributions over the union of their labels (missing = 0);
    None when undefined (fewer than two labels or a constant vector)."""
    keys = sorted(set(p) | set(q))
    if len(keys) < 2:
        return None
    x = np.array([p.get(k, 0.0) for k in keys])
    y = np.array([q.get(k, 0.0) for k in keys])
    if np.ptp(x) < 1e-12 or np.ptp(y) < 1e-12:  # constant (up to float noise): undefined
        return None
    dx, dy = x - x.mean(), y - y.mean()
    return float((dx * dy).sum() / np.sqrt((dx * dx).sum() * (dy * dy).sum()))


def total_variation(p: Mapping[str, float], q: Mapping[str, float]) -> float:
    return 0.5 * float(sum(abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in set(p) | set(q)))


def _bag_of_words(tokens: Sequence[str]) -> list[str]:
    words = [t.lower() for t in tokens]
    return words + [f"{a} {b}" for a, b in zip(words, words[1:])]


def proxy_a_distance(
    a: Sequence[Sequence[str]], b: Sequence[Sequence[str]], seed: int = 0, max_per_side: int = 5000
) -> float | None:
    """Proxy A-distance between two samples of token sequences (see the module docstring);
    None when a side has fewer than 4 examples."""
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegression

    m = min(len(a), len(b), max_per_side)
    if m < 4:
        return None
    rng = np.random.default_rng(seed)
    sides = [rng.choice(len(side), size=m, replace=False) for side in (a, b)]
    half = m // 2
    train_docs, train_y, test_docs, test_y = [], [], [], []
    for label, (side, idx) in enumerate(zip((a, b), sides)):
        train_docs += [side[i] for i in idx[:half]]
        test_docs += [side[i] for i in idx[half:]]
        train_y += [label] * half
        test_y += [label] * (m - half)
    vectorizer = CountVectorizer(analyzer=_bag_of_words, binary=True)
    x_train = vectorizer.fit_transform(train_docs)
    classifier = LogisticRegression(max_iter=1000, random_state=seed)
    classifier.fit(x_train, train_y)
    error = 1.0 - float(classifier.score(vectorizer.transform(test_docs), test_y))
    return 2.0 * (1.0 - 2.0 * min(error, 0.5))


def cluster_histogram(sizes: Sequence[int]) -> dict[str, int]:
    hist = {}
    for lo, hi in HISTOGRAM_BINS:
        name = f"{lo}+" if hi is None else str(lo) if lo == hi else f"{lo}-{hi}"
        hist[name] = sum(1 for s in sizes if s >= lo and (hi is None or s <= hi))
    return hist


def _label_stats(train: list[Utterance], other: list[Utterance]) -> dict[str, float | None]:
    intents = [distribution([u.intent for u in us]) for us in (train, other)]
    labelled = [[utterance_labels(u) for u in us] for us in (train, other)]
    pairs = [distribution([l for labels in side for l in labels[1:]]) for side in labelled]
    labels = [distribution([l for labels in side for l in labels]) for side in labelled]
    return {
        "intent_pearson": pearson(*intents),
        "intent_slot_pearson": pearson(*pairs),
        "label_pearson": pearson(*labels),
        "intent_tvd": total_variation(*intents) if all(intents) else None,
    }


def split_statistics(split: DriftSplit, corpus: Corpus, seed: int = 0, a_distance: bool = True) -> dict[str, Any]:
    """Table-4-like statistics of ``split`` applied to ``corpus`` (see the module docstring)."""
    new = split.apply(corpus)
    a = split.assignments
    kept = sum(len(new.split(s)) for s in SPLITS)
    sizes = {}
    for s in SPLITS:
        utts = new.split(s)
        drift = sum(1 for u in utts if a[u.uid].in_drift)
        sizes[s] = {
            "size": len(utts),
            "percent_of_corpus": round(100 * len(utts) / kept, 2) if kept else 0.0,
            "drift": drift,
            "percent_drift": round(100 * drift / len(utts), 2) if utts else 0.0,
        }
    removed = sum(1 for x in a.values() if x.split == "removed")
    cluster_sizes = Counter(x.cluster for x in a.values() if x.split != "removed")
    isolated = cluster_sizes.pop(-1, 0)
    info = split.info
    stats: dict[str, Any] = {
        "dataset": corpus.name,
        "config": split.config,
        "description": split.split_config.describe(),
        "corpus_size": len(corpus.all()),
        "kept": kept,
        "removed": removed,
        "removed_by_reason": info.get("removed", {}),
        "relabelled_slots": list(split.relabelled_slots),
        "splits": sizes,
        "targets": info.get("targets"),
        "fill": info.get("fill"),
        "train_vs_test": _label_stats(new.train, new.test),
        "train_vs_valid": _label_stats(new.train, new.valid),
        "clusters": {
            "count": len(cluster_sizes),
            "isolated": isolated,
            "test": len(info.get("test_clusters", [])),
            "valid": len(info.get("valid_clusters", [])),
            "size_histogram": cluster_histogram(list(cluster_sizes.values())),
            "largest": max(cluster_sizes.values(), default=0),
        },
        "unmet_projected": info.get("unmet_projected", {}),
    }
    if a_distance:
        stats["proxy_a_distance"] = {
            "features": "binary bag of words (token unigrams + bigrams), LogisticRegression",
            "train_vs_test": _round(proxy_a_distance([u.tokens for u in new.train], [u.tokens for u in new.test], seed)),
            "train_vs_valid": _round(proxy_a_distance([u.tokens for u in new.train], [u.tokens for u in new.valid], seed)),
        }
    for key in ("train_vs_test", "train_vs_valid"):
        stats[key] = {k: _round(v) for k, v in stats[key].items()}
    return stats


def _round(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits)


def _fmt(x: float | None, spec: str = ".4f") -> str:
    return "n/a" if x is None else format(x, spec)


def format_table(stats: Mapping[str, Any]) -> str:
    """Plain-text rendering of `split_statistics` (Table 4's columns plus the checks)."""
    lines = [f"SeqDrift split of {stats['dataset']}: {stats['description']}"]
    lines.append(
        f"corpus {stats['corpus_size']:,} utterances, kept {stats['kept']:,}, removed {stats['removed']:,}"
        + (f" ({', '.join(f'{k} {v:,}' for k, v in stats['removed_by_reason'].items())})" if stats["removed_by_reason"] else "")
    )
    if stats["relabelled_slots"]:
        lines.append(f"rare slot types relabelled O: {', '.join(stats['relabelled_slots'])}")
    lines.append("")
    lines.append(f"{'split':<8}{'size':>9}{'% corpus':>10}{'drift':>8}{'% drift':>9}")
    for s in SPLITS:
        row = stats["splits"][s]
        lines.append(f"{s:<8}{row['size']:>9,}{row['percent_of_corpus']:>10.1f}{row['drift']:>8,}{row['percent_drift']:>9.1f}")
    lines.append("")
    for key, title in (("train_vs_test", "train vs test "), ("train_vs_valid", "train vs valid")):
        r = stats[key]
        lines.append(
            f"{title}: intent Pearson {_fmt(r['intent_pearson'])}, intent-slot Pearson "
            f"{_fmt(r['intent_slot_pearson'])}, all labels {_fmt(r['label_pearson'])}, intent TVD {_fmt(r['intent_tvd'])}"
        )
    if "proxy_a_distance" in stats:
        pad = stats["proxy_a_distance"]
        lines.append(
            f"proxy A-distance (bag of words): train/test {_fmt(pad['train_vs_test'], '.3f')}, "
            f"train/valid {_fmt(pad['train_vs_valid'], '.3f')}"
        )
    c = stats["clusters"]
    if c["count"]:
        bins = sorted(c["size_histogram"].items(), key=lambda kv: int(kv[0].split("-")[0].rstrip("+")))
        hist = ", ".join(f"{k}: {v}" for k, v in bins if v)  # by size (stats.json sorts its keys)
        lines.append(
            f"clusters: {c['count']} (+{c['isolated']:,} isolated utterances), drift clusters in test "
            f"{c['test']}, in valid {c['valid']}; largest {c['largest']:,}"
        )
        lines.append(f"cluster sizes: {hist}")
    for split in ("test", "valid"):
        unmet = stats.get("unmet_projected", {}).get(split) or {}
        if unmet:
            worst = sorted(unmet.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
            lines.append(
                f"unmet projected counts in {split}: {len(unmet)} labels, {sum(unmet.values()):,} examples "
                f"(e.g. {', '.join(f'{k} -{v}' for k, v in worst)})"
            )
    return "\n".join(lines)


__all__ = ["distribution", "format_table", "pearson", "proxy_a_distance", "split_statistics", "total_variation"]
