"""``python -m robustnlu.seqdrift [overrides] [--inspect[=N]] [--verify]``: make a SeqDrift split.

A Hydra app over ``conf/seqdrift.yaml`` (the ``dataset``, ``drift`` and ``validation`` groups of
a training run). It computes the split, or reuses it from ``<cache_dir>/seqdrift/<key>/`` (if
that entry passes its checks, `robustnlu.seqdrift.artifact`), writes ``split.json``,
``stats.json`` (with their ``SHA256SUMS``) and ``stats.txt`` to the run directory and prints the
statistics table. ``--inspect`` (``--inspect=N``) also prints the 5 (N) largest test drift
clusters, a few utterances each, like the paper's Table 5; it is rewritten to the override
``inspect=5`` (``inspect=N``) before Hydra reads the command line, so ``inspect=N`` works too.

``--verify`` (``verify=true``) writes no split (its run directory holds Hydra's record and log
only): it computes the clustering of the selected dataset
and drift config on this machine and compares it with the shipped canonical one
(`robustnlu.seqdrift.shipped`): exit 0 if identical, 1 if not (with the adjusted Rand index).

The run directory is claimed as a training run's is (conf/seqdrift.yaml's ``hydra.callbacks.run_dir``,
`robustnlu.rundir_claim.claim`): a folder with files that is not a run of this app (another
Hydra app's output, a folder of the user's) is refused with one line, exit 2, and left as it
was; a folder of an earlier launch (its ``outputs``, the files above) is written again. While it
runs, the run directory (a sweep's job folder) holds ``run.lock``, the pid and host of
its process; it is removed when the app ends, so a finished folder holds the files
above and Hydra's, not the lock. ``python -m robustnlu.sweep status`` reads it to tell a running
job from one whose process is gone; a second process into the same folder is refused with one line
naming the holder, and the lock of a process of this host that is gone is taken over
(`robustnlu.runlock`).

Bad input or options print one line ``error: ...`` and exit with code 2 (no traceback, no run
directory left behind).
"""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from pathlib import Path

from omegaconf import DictConfig

from robustnlu.cli import hydra_app, run_or_exit
from robustnlu.paths import data_dir
from robustnlu.data.bio import slot_spans

DEFAULT_INSPECT = 5


def rewrite_flags(argv: list[str]) -> list[str]:
    """``--inspect`` -> ``inspect=5``, ``--inspect=N`` -> ``inspect=N``, ``--verify`` ->
    ``verify=true``; the rest unchanged."""
    out = []
    for arg in argv:
        if arg == "--inspect":
            out.append(f"inspect={DEFAULT_INSPECT}")
        elif arg == "--verify":
            out.append("verify=true")
        elif arg.startswith("--inspect="):
            out.append(f"inspect={arg.split('=', 1)[1]}")
        else:
            out.append(arg)
    return out


def render(u) -> str:
    """``intent | tokens`` with every slot span as ``[type: value]``."""
    parts: list[str] = []
    last = 0
    for typ, start, end in slot_spans(u.tags):
        parts += [*u.tokens[last:start], f"[{typ}: {' '.join(u.tokens[start:end])}]"]
        last = end
    parts += u.tokens[last:]
    return f"{u.intent:<24} {' '.join(parts)}"


def inspect_clusters(split, corpus, n_clusters: int, n_examples: int) -> str:
    """The ``n_clusters`` test drift clusters with most test examples, ``n_examples`` each."""
    new = split.apply(corpus)
    by_cluster = defaultdict(list)
    for u in new.test:
        a = split.assignments[u.uid]
        if a.in_drift:
            by_cluster[a.cluster].append(u)
    sizes = Counter(a.cluster for a in split.assignments.values() if a.split != "removed")
    largest = sorted(by_cluster, key=lambda c: (-len(by_cluster[c]), c))[:n_clusters]
    if not largest:
        return "no drift cluster in test"
    lines = []
    for c in largest:
        utts = by_cluster[c]
        intents = Counter(u.intent for u in utts).most_common(3)
        lines.append(
            f"cluster {c}: {len(utts)} test examples of {sizes[c]} "
            f"({', '.join(f'{i} {k}' for i, k in intents)})"
        )
        lines += [f"  {render(u)}" for u in utts[:n_examples]]
    return "\n".join(lines)


def verify_clustering(cfg: DictConfig) -> None:
    """``--verify``: this machine's clustering against the shipped one; exit 1 if they differ."""
    from robustnlu.seqdrift.canonical import preset_of, verify
    from robustnlu.seqdrift.shipped import SHIPPED_DIR

    preset = preset_of(cfg, f"{cfg.dataset.name}-{cfg.drift.kind}")
    if not verify(preset, data_dir(cfg) / SHIPPED_DIR):
        raise SystemExit(1)


def run(cfg: DictConfig) -> None:
    from robustnlu.data.readers import load_corpus
    from robustnlu.io import atomic_write_text
    from robustnlu.seqdrift.artifact import STATS_TABLE_FILE, write_split_files
    from robustnlu.seqdrift.pipeline import make_drift_split
    from robustnlu.seqdrift.shipped import SHIPPED_DIR
    from robustnlu.seqdrift.stats import format_table

    if cfg.verify:
        verify_clustering(cfg)
        return
    corpus = load_corpus(cfg.dataset)
    split = make_drift_split(corpus, cfg.drift, cfg.validation, cfg.paths.cache_dir, data_dir(cfg) / SHIPPED_DIR)
    out_dir = Path(cfg.paths.output_dir)
    table = format_table(split.stats)
    write_split_files(out_dir, split)
    atomic_write_text(out_dir / STATS_TABLE_FILE, table + "\n")
    print(table)
    if cfg.inspect > 0:
        print()
        print(inspect_clusters(split, corpus, cfg.inspect, cfg.inspect_examples))


@hydra_app("seqdrift")
def main(cfg: DictConfig) -> None:
    run_or_exit(run, cfg)


if __name__ == "__main__":
    sys.argv = rewrite_flags(sys.argv)
    main()
