"""A model's robustness to noise in the layout of Krone et al. (paper 002), Table 4: a
`NoiseScore` per control / treatment pair (a dataset and a noise type) and its table
(`score_table`), as `robustnlu.evaluate` writes them to ``robustness.json`` / ``robustness.md``;
`robustnlu.analysis.robustness` compares a baseline with an augmented model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from robustnlu.errors import DataError
from robustnlu.metrics.registry import METRICS, NOISE
from robustnlu.rundir import read_json_object
from robustnlu.tables import markdown_lines


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


def read_suites(path: Path) -> dict[str, dict[str, Any]]:
    """The suites of a ``robustness.json``: suite name → its entry (``scores``: `NoiseScore`
    dicts with the `NOISE` metrics of both sides; ``checkpoint``: the one scored; and what
    `robustnlu.evaluate` stored beside them). `DataError` naming the file if it is not such a
    file whole (cut short: invalid JSON)."""
    data = read_json_object(path)
    try:
        suites = data["suites"]
        if not isinstance(suites, dict):
            raise TypeError(f"suites must be an object, got {type(suites).__name__}")
        for entry in suites.values():
            if "checkpoint" not in entry:
                raise KeyError("checkpoint")
            for score in map(NoiseScore.from_dict, entry["scores"]):
                if not all(isinstance(side[m], int | float) for side in (score.control, score.treatment) for m in NOISE):
                    raise TypeError(f"{score.dataset} {score.noise}: {', '.join(NOISE)} must be numbers")
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise DataError(path, None, f"not a robustness.json ({type(err).__name__}: {err})") from None
    return suites


def pct(x: float) -> str:
    """A fraction in % with one decimal."""
    return f"{100 * x:.1f}"


def signed(x: float) -> str:
    """A difference of fractions in signed points with one decimal."""
    return f"{100 * x:+.1f}"


def score_table(scores: Sequence[NoiseScore]) -> str:
    """Markdown: per cell, Orig. / Noisy / Δ for IC, SL and EM, the pair size and the notes;
    last row, the unweighted mean of Δ over the cells."""
    head = ["dataset", "noise", "n"] + [f"{METRICS[m].abbrev} {c}" for m in NOISE for c in ("orig", "noisy", "Δ")]
    rows = []
    for s in scores:
        cols = [s.dataset, s.noise, str(s.n)]
        for m in NOISE:
            cols += [pct(s.control[m]), pct(s.treatment[m]), signed(s.delta(m))]
        rows.append(cols + ["; ".join(s.notes)])
    if scores:
        mean = ["mean", f"{len(scores)} cells", ""]
        for m in NOISE:
            mean += ["", "", signed(sum(s.delta(m) for s in scores) / len(scores))]
        rows.append(mean + [""])
    return "\n".join(markdown_lines(head + ["notes"], rows))
