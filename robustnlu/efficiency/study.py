"""Stages 3-4 of the data-efficiency protocol over finished runs (Desai et al. 2021, sections 2.4,
2.5 and 5.1; digest 002/003 Part B.2):
``python -m robustnlu.efficiency.study DIR... --out DIR [--label NAME ...] [--reach 80 90] [--at 10 50]``.

Each DIR is a run directory or a sweep directory, searched recursively for ``results.json``
files; those with an ``"efficiency"`` key (written by training with ``efficiency=...``) are the
points, the others are skipped. Each DIR is one curve (one model / method) labelled with its
name, or with the matching ``--label``; DIRs given the same label are pooled into one curve, so
several sweeps give a multi-model / multi-method overlay (the paper's Figures 2 and 3).

Per curve: the discrete points (subset %, test exact match % = ``metrics.test.frame_acc`` ·
100, seed), h(x) = a/x^b + c fitted on all seeds' points with x > 0 pooled (stage 3), one fit
per seed (Figure 3's variance study; the plot's band), the queries (stage 4) "what % reaches y%?"
(``--reach``) and "what at x%?" (``--at``), and under ``mode=adapt`` the mean forgetting on the
source domains per percentage. Written under ``--out`` (`robustnlu.efficiency.report`):
efficiency.json, efficiency.md and efficiency.png (each atomically). A user error (no
efficiency runs under a DIR, a curve mixing target domains or modes, two runs with the same
percentage and seed, unreadable results.json, an ``--out`` inside a run directory): one line
``error: ...`` on stderr, exit status 2, nothing written.
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from robustnlu.analysis.runs import run_dirs_under
from robustnlu.efficiency.curve import (
    CurveData,
    Point,
    PowerLaw,
    QueryAnswer,
    answer_queries,
    fit_power_law,
)
from robustnlu.efficiency.report import FILES, sentence, write_efficiency
from robustnlu.errors import CommandLineParser, DataError, RobustNLUError, entry_point
from robustnlu.io import check_outputs, writing
from robustnlu.rundir import RunDir, finished_runs


class EfficiencyError(RobustNLUError):
    """Input the efficiency study cannot be built from (names the directory or runs)."""


@dataclass(frozen=True)
class EfficiencyRun:
    """One finished efficiency run: its results.json's ``efficiency`` record, seed and metric (in %)."""

    path: Path  # the run directory
    target: str
    percent: float
    mode: str
    seed: int
    metric: float  # results["metrics"]["test"][metric] · 100
    subset_size: int | None
    target_train_size: int | None
    forgetting: dict[str, Any] | None

    @property
    def point(self) -> Point:
        return Point(self.percent, self.metric, self.seed)


def _number(value: Any, path: Path, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise DataError(path, None, f"{key} must be a finite number, got {value!r}")
    return float(value)


def _parse(run: RunDir, metric: str) -> EfficiencyRun | None:
    path, data = run.results_file, run.results()
    eff = data.get("efficiency")
    if eff is None:
        return None
    if not isinstance(eff, dict):
        raise DataError(path, None, "'efficiency' must be an object")
    for key in ("target", "percent"):
        if key not in eff:
            raise DataError(path, None, f"missing key 'efficiency.{key}'")
    if "seed" not in data:
        raise DataError(path, None, "missing key 'seed'")
    try:
        value = data["metrics"]["test"][metric]
    except (KeyError, TypeError):
        raise DataError(path, None, f"missing key 'metrics.test.{metric}'") from None
    percent = _number(eff["percent"], path, "efficiency.percent")
    if not 0 <= percent <= 100:
        raise DataError(path, None, f"efficiency.percent must lie in [0, 100], got {percent:g}")
    seed = data["seed"]
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise DataError(path, None, f"seed must be an integer, got {seed!r}")
    sizes = {}
    for key in ("subset_size", "target_train_size"):
        v = eff.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise DataError(path, None, f"efficiency.{key} must be a non-negative integer, got {v!r}")
        sizes[key] = v
    forgetting = eff.get("forgetting")
    if forgetting is not None and not isinstance(forgetting, dict):
        raise DataError(path, None, "efficiency.forgetting must be an object or null")
    return EfficiencyRun(run.path, str(eff["target"]), percent, str(eff.get("mode", "joint")), seed,
                         100.0 * _number(value, path, f"metrics.test.{metric}"), sizes["subset_size"],
                         sizes["target_train_size"], forgetting)


def load_points(dirs: Sequence[Path], metric: str = "frame_acc") -> list[EfficiencyRun]:
    """The efficiency runs found recursively under ``dirs`` (run or sweep directories), each run
    directory once, sorted by (percent, seed, path). results.json files without an
    ``"efficiency"`` key are skipped. Raises `EfficiencyError` for a path that is not a directory,
    `DataError` naming the file for unreadable JSON or a missing / malformed key."""
    for d in map(Path, dirs):
        if not d.is_dir():
            raise EfficiencyError(f"{d}: not a directory")
    runs = [r for r in (_parse(run, metric) for run in finished_runs(dirs)) if r is not None]
    runs.sort(key=lambda r: (r.percent, r.seed, str(r.path)))
    return runs


def _flatten(obj: Any, prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}{k}/" if isinstance(v, dict) else f"{prefix}{k}"))
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool) and math.isfinite(obj):
        out[prefix] = float(obj)
    return out


@dataclass
class EfficiencyCurve:
    """One curve of the study: the plotted `CurveData` plus what the report says about it."""

    data: CurveData
    dirs: list[Path]
    runs: list[EfficiencyRun]
    target: str
    mode: str
    target_train_size: int | None
    #: percent → {forgetting "drop" key → mean over the seeds} (mode=adapt runs that record it)
    forgetting: dict[float, dict[str, float]] = field(default_factory=dict)
    #: fit problems: too few points, a >= 0, a seed that could not be fitted
    notes: list[str] = field(default_factory=list)
    rmse: float | None = None  # of the pooled fit on the points with x > 0

    @property
    def label(self) -> str:
        return self.data.label


@dataclass
class EfficiencyStudy:
    curves: list[EfficiencyCurve]
    reach: tuple[float, ...]
    at: tuple[float, ...]
    metric: str


def _fit(xs: list[float], ys: list[float], what: str, notes: list[str]) -> PowerLaw | None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            curve = fit_power_law(xs, ys)
        except ValueError as err:
            notes.append(f"{what}: not fitted: {err}")
            return None
    for w in caught:
        notes.append(f"{what}: {w.message}")
    return curve


def _build_curve(label: str, dirs: Sequence[Path], runs: list[EfficiencyRun], reach: Sequence[float],
                 at: Sequence[float]) -> EfficiencyCurve:
    for attr, what in (("target", "target domains"), ("mode", "modes")):
        values = sorted({getattr(r, attr) for r in runs})
        if len(values) > 1:
            raise EfficiencyError(f"curve {label!r} mixes {what} {', '.join(values)}: give each its own "
                                  f"directory / --label")
    by_point: dict[tuple[float, int], list[EfficiencyRun]] = defaultdict(list)
    for r in runs:
        by_point[(r.percent, r.seed)].append(r)
    for (percent, seed), same in sorted(by_point.items()):
        if len(same) > 1:
            raise EfficiencyError(f"curve {label!r}: {len(same)} runs at {percent:g}% with seed {seed} "
                                  f"({', '.join(str(r.path) for r in same)}); keep one")
    sizes = sorted({r.target_train_size for r in runs if r.target_train_size is not None})
    if len(sizes) > 1:
        raise EfficiencyError(f"curve {label!r}: the runs disagree on efficiency.target_train_size "
                              f"({', '.join(map(str, sizes))}); were they trained on the same data?")
    train_size = sizes[0] if sizes else None
    notes: list[str] = []
    points = tuple(r.point for r in runs)
    pooled = _fit([p.percent for p in points], [p.metric for p in points], "pooled fit", notes)
    seed_fits = {}
    for seed in sorted({p.seed for p in points}):
        own = [p for p in points if p.seed == seed]
        fit = _fit([p.percent for p in own], [p.metric for p in own], f"seed {seed}", notes)
        if fit is not None:
            seed_fits[seed] = fit
    positive = [p for p in points if p.percent > 0]
    answers: tuple[QueryAnswer, ...] = ()
    rmse = None
    if pooled is not None:
        xs = np.array([p.percent for p in positive])
        rmse = float(np.sqrt(np.mean((pooled(xs) - np.array([p.metric for p in positive])) ** 2)))
        lo, hi = min(xs), max(xs)
        answers = tuple(answer_queries(pooled, reach, at, (float(lo), float(hi)), train_size))
    forgetting: dict[float, dict[str, float]] = {}
    drops: dict[float, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        if r.forgetting and isinstance(r.forgetting.get("drop"), dict):
            for key, value in _flatten(r.forgetting["drop"]).items():
                drops[r.percent][key].append(value)
    for percent in sorted(drops):
        forgetting[percent] = {k: float(np.mean(v)) for k, v in sorted(drops[percent].items())}
    data = CurveData(label, points, pooled, seed_fits, answers)
    return EfficiencyCurve(data, [Path(d) for d in dirs], runs, runs[0].target, runs[0].mode, train_size,
                           forgetting, notes, rmse)


def check_queries(reach: Sequence[float], at: Sequence[float]) -> None:
    """`EfficiencyError` for a query outside the curve's domain: an ``at`` percentage that is
    not a finite number > 0 (h(x) = a/x^b + c is undefined at and below 0), a ``reach`` target
    that is not a finite number."""
    for x in at:
        if not (math.isfinite(x) and x > 0):
            raise EfficiencyError(f"--at {x:g}: h(x) = a/x^b + c is defined for x > 0 only")
    for y in reach:
        if not math.isfinite(y):
            raise EfficiencyError(f"--reach {y}: not a finite number")


def build_efficiency(groups: Sequence[tuple[str, Sequence[Path]]], reach: Sequence[float] = (80, 90),
                     at: Sequence[float] = (10, 50), metric: str = "frame_acc") -> EfficiencyStudy:
    """One curve per group (label, its run / sweep directories); reads, fits and answers the
    queries, writes nothing. Raises `EfficiencyError` (a directory without efficiency runs, a
    label given twice, a curve mixing targets or modes, duplicate (percent, seed) runs, a
    non-positive ``at`` percentage) or `DataError` (a malformed results.json)."""
    if not groups:
        raise EfficiencyError("no directories given")
    labels = [label for label, _ in groups]
    if len(set(labels)) != len(labels):
        raise EfficiencyError(f"curve labels must be distinct, got {', '.join(labels)}")
    check_queries(reach, at)
    curves = []
    for label, dirs in groups:
        runs = []
        for d in dirs:
            found = load_points([d], metric)
            if not found:
                raise EfficiencyError(f"{d}: no efficiency runs (no results.json with an \"efficiency\" key "
                                      f"below it)")
            runs += found
        unique = {r.path.resolve(): r for r in runs}  # a directory inside another given one
        runs = sorted(unique.values(), key=lambda r: (r.percent, r.seed, str(r.path)))
        curves.append(_build_curve(label, dirs, runs, tuple(reach), tuple(at)))
    return EfficiencyStudy(curves, tuple(float(y) for y in reach), tuple(float(x) for x in at), metric)


def _groups(dirs: Sequence[Path], labels: Sequence[str] | None) -> list[tuple[str, list[Path]]]:
    if labels:
        if len(labels) != len(dirs):
            raise EfficiencyError(f"{len(labels)} --label for {len(dirs)} directories: give one per directory "
                                  f"(repeat a label to pool directories into one curve)")
        names = list(labels)
    else:
        names = [Path(d).resolve().name or str(d) for d in dirs]
        if len(set(names)) != len(names):
            names = [str(d) for d in dirs]
    grouped: dict[str, list[Path]] = {}
    for name, d in zip(names, dirs):
        grouped.setdefault(name, []).append(Path(d))
    return list(grouped.items())


@entry_point
def main(argv: list[str] | None = None) -> int:
    parser = CommandLineParser(prog="python -m robustnlu.efficiency.study", description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dirs", nargs="+", type=Path, help="run or sweep directories (searched recursively)")
    parser.add_argument("--out", type=Path, required=True, help="folder for efficiency.{json,md,png}")
    parser.add_argument("--label", nargs="+", action="extend", default=None, metavar="NAME",
                        help="one curve label per DIR, in order (default: the directory names); DIRs with "
                             "the same label form one curve")
    parser.add_argument("--reach", nargs="*", type=float, default=[80.0, 90.0], metavar="Y",
                        help="metric targets (%%): which subset %% reaches them (default 80 90)")
    parser.add_argument("--at", nargs="*", type=float, default=[10.0, 50.0], metavar="X",
                        help="subset percentages (> 0): the metric there (default 10 50)")
    parser.add_argument("--metric", default="frame_acc",
                        help="key of results.json's metrics.test (default frame_acc = exact match)")
    args = parser.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    check_outputs([args.out / name for name in FILES], (), "--out", within=run_dirs_under(args.dirs))
    study = build_efficiency(_groups(args.dirs, args.label), args.reach, args.at, args.metric)
    with writing("--out"):  # what check_outputs cannot foresee (a folder the system refuses, a full disk)
        written = write_efficiency(study, args.out)
    for c in study.curves:
        for note in c.notes:
            print(f"warning: {c.label}: {note}", file=sys.stderr)
        for a in c.data.answers:
            print(sentence(c, a, study.metric))
    print(f"{len(study.curves)} curve(s) from {sum(len(c.runs) for c in study.curves)} runs; wrote "
          f"{len(written)} files to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
