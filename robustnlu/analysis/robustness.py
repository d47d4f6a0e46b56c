"""Robustness to noise in the layout of Krone et al. (paper 002), Table 4.

A `NoiseScore` is one model on one control / treatment pair (a dataset and a noise type): intent
accuracy, slot F1 (seqeval semantics) and frame accuracy on the original utterances ("Orig.")
and on their noisy versions ("Noisy"). Comparing a baseline with an augmented model gives, per
cell and metric (digest A.7, in points):

- drop = base noisy − base orig;      gain = aug noisy − base noisy;
- residual = aug noisy − aug orig;    clean cost = aug orig − base orig;

and the paper's headline numbers are the unweighted means of drop and gain over the cells
(−13.5 IC / −18.9 SL and +11.5 / +17.3 over its 12 cells).

    python -m robustnlu.analysis.robustness BASE_RUN [AUG_RUN]

prints a run's tables from ``<run>/robustness.json``; with two runs, the effects of the second
(augmented) relative to the first (baseline) for the cells both have.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from robustnlu.analysis.study import read_json_object
from robustnlu.errors import DataError, entry_point

METRICS = {"intent_acc": "IC", "slot_f1": "SL", "frame_acc": "EM"}
EFFECTS = ("drop", "gain", "residual", "clean_cost")


@dataclass(frozen=True)
class NoiseScore:
    """One model on one control / treatment pair; metric values are fractions in [0, 1]."""

    dataset: str
    noise: str
    n: int
    control: dict[str, float]
    treatment: dict[str, float]
    notes: list[str] = field(default_factory=list)

    @property
    def cell(self) -> tuple[str, str]:
        return self.dataset, self.noise

    def delta(self, metric: str) -> float:
        return self.treatment[metric] - self.control[metric]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> NoiseScore:
        return cls(d["dataset"], d["noise"], d["n"], dict(d["control"]), dict(d["treatment"]), list(d.get("notes", [])))


def effects(base: NoiseScore, aug: NoiseScore, metric: str) -> dict[str, float]:
    """Drop, gain, residual and clean cost of one cell (fractions; ×100 for points)."""
    if base.cell != aug.cell:
        raise ValueError(f"cells differ: {base.cell} vs {aug.cell}")
    return {
        "drop": base.treatment[metric] - base.control[metric],
        "gain": aug.treatment[metric] - base.treatment[metric],
        "residual": aug.treatment[metric] - aug.control[metric],
        "clean_cost": aug.control[metric] - base.control[metric],
    }


def mean_effects(pairs: Sequence[tuple[NoiseScore, NoiseScore]], metric: str) -> dict[str, float]:
    """The unweighted mean of each effect over the cells (the paper's averages)."""
    cells = [effects(b, a, metric) for b, a in pairs]
    return {e: sum(c[e] for c in cells) / len(cells) for e in EFFECTS}


def match_cells(base: Sequence[NoiseScore], aug: Sequence[NoiseScore]) -> list[tuple[NoiseScore, NoiseScore]]:
    """(base, aug) for every cell both have, in the base's order."""
    by_cell = {s.cell: s for s in aug}
    return [(b, by_cell[b.cell]) for b in base if b.cell in by_cell]


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _signed(x: float) -> str:
    return f"{100 * x:+.1f}"


def score_table(scores: Sequence[NoiseScore]) -> str:
    """Markdown: per cell, Orig. / Noisy / Δ for IC, SL and EM, the pair size and the notes;
    last row, the unweighted mean of Δ over the cells."""
    head = ["dataset", "noise", "n"] + [f"{m} {c}" for m in METRICS.values() for c in ("orig", "noisy", "Δ")] + ["notes"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in scores:
        cols = [s.dataset, s.noise, str(s.n)]
        for m in METRICS:
            cols += [_pct(s.control[m]), _pct(s.treatment[m]), _signed(s.delta(m))]
        lines.append("| " + " | ".join(cols + ["; ".join(s.notes)]) + " |")
    if scores:
        mean = ["mean", f"{len(scores)} cells", ""]
        for m in METRICS:
            mean += ["", "", _signed(sum(s.delta(m) for s in scores) / len(scores))]
        lines.append("| " + " | ".join(mean + [""]) + " |")
    return "\n".join(lines)


def effects_table(pairs: Sequence[tuple[NoiseScore, NoiseScore]]) -> str:
    """Markdown: per cell, base and augmented Orig. / Noisy and the four effects for IC and SL,
    then the unweighted means of the effects (the paper's headline numbers)."""
    metrics = {m: METRICS[m] for m in ("intent_acc", "slot_f1")}
    head = ["dataset", "noise"]
    for label in metrics.values():
        head += [f"{label} base orig", f"{label} base noisy", f"{label} aug orig", f"{label} aug noisy"]
        head += [f"{label} {e.replace('_', ' ')}" for e in EFFECTS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for b, a in pairs:
        cols = [b.dataset, b.noise]
        for m in metrics:
            cols += [_pct(b.control[m]), _pct(b.treatment[m]), _pct(a.control[m]), _pct(a.treatment[m])]
            cols += [_signed(v) for v in effects(b, a, m).values()]
        lines.append("| " + " | ".join(cols) + " |")
    if pairs:
        cols = ["mean", f"{len(pairs)} cells"]
        for m in metrics:
            cols += ["", "", "", ""] + [_signed(v) for v in mean_effects(pairs, m).values()]
        lines.append("| " + " | ".join(cols) + " |")
    return "\n".join(lines)


def load_scores(run_dir: Path) -> dict[str, list[NoiseScore]]:
    """``<run_dir>/robustness.json``: suite name → its scores."""
    path = run_dir / "robustness.json"
    if not path.is_file():
        raise DataError(path, None, "no robustness results (train with suite=[...] or run python -m robustnlu.evaluate)")
    data = read_json_object(path)
    try:
        return {suite: [NoiseScore.from_dict(d) for d in entry["scores"]] for suite, entry in data["suites"].items()}
    except (KeyError, TypeError, AttributeError) as err:
        raise DataError(path, None, f"not a robustness.json ({type(err).__name__}: {err})") from None


@entry_point
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m robustnlu.analysis.robustness", description=__doc__.split("\n\n")[0])
    parser.add_argument("base", type=Path, help="a run directory with robustness.json")
    parser.add_argument("aug", type=Path, nargs="?", help="a second (augmented) run to compare with the first")
    args = parser.parse_args(argv)
    base = load_scores(args.base)
    aug = load_scores(args.aug) if args.aug else None
    for suite, scores in base.items():
        print(f"\n## {suite}: {args.base}\n\n{score_table(scores)}")
        if aug is not None and suite in aug:
            print(f"\n## {suite}: {args.aug} vs {args.base} (points)\n\n{effects_table(match_cells(scores, aug[suite]))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
