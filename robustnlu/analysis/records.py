"""The reproduction's records (`robustnlu.reproduce`) as the report reads them: a record is
``<records>/<run name>/`` with ``results.json``, ``metrics.csv``, ``meta.json`` and
``predictions/{valid,test}.jsonl.gz`` (a `robustnlu.rundir.RunDir`); the run name says the
scenario, method (with k) and seed. `Design` is what the driver planned."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from robustnlu.analysis.runs import Run, StudyError, check_results, discover
from robustnlu.rundir import RunDir


@dataclass(frozen=True)
class Design:
    """What the driver planned (`robustnlu.reproduce`): run names per part ("A", "k", "B", "C", "D"), the
    k-search runs (method → k → name) and the k chosen per method (None: search unfinished)."""

    parts: dict[str, list[str]]
    k_search: dict[str, dict[int, str]]
    chosen_k: dict[str, int | None]
    budget: tuple[str, ...]
    k_scenario: str
    #: Part D: each run trained to its own plateau → the run of its method, scenario and seed at
    #: the fixed budget
    plateau_reference: dict[str, str] = field(default_factory=dict)
    #: Part D's overrides in place of ``budget``'s epochs
    plateau_budget: tuple[str, ...] = ()


@dataclass
class Records:
    """The finished runs under the records folder, by run name, with their ``meta.json``."""

    root: Path
    runs: dict[str, Run]
    meta: dict[str, dict[str, Any]]

    def select(self, names: Sequence[str]) -> list[Run]:
        return [self.runs[n] for n in sorted(set(names)) if n in self.runs]


def read_records(root: Path) -> Records:
    """Every record under ``root`` (a folder holding ``results.json``); `StudyError` if none."""
    root = Path(root)
    if not root.is_dir():
        raise StudyError(f"{root}: no records folder")
    found = [p for p in sorted(root.iterdir()) if RunDir(p).finished()]
    if not found:
        raise StudyError(f"{root}: no records (no <run>/results.json)")
    runs, _ = discover(found)
    check_results(runs)
    by_name = {r.path.name: r for r in runs}
    meta = {name: r.dir.meta() for name, r in by_name.items()}
    return Records(root, dict(sorted(by_name.items())), meta)
