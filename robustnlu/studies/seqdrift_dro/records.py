"""The reproduction's records (written by `robustnlu.studies.runner`) as the report reads them: a
record is ``<records>/<run name>/`` with ``results.json``, ``metrics.csv``, ``meta.json`` and
``predictions/{valid,test}.jsonl.xz`` (a `robustnlu.rundir.RunDir`); the run name says the
scenario, method (with k) and seed. `Design` is what the plan holds."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from robustnlu.analysis.runs import RESULTS_KEYS, Run, StudyError, check_results, discover
from robustnlu.errors import DataError
from robustnlu.rundir import RunDir

#: what the report reads from a record's results.json: what every report reads, and the epochs
RECORD_KEYS = (*RESULTS_KEYS, ("epochs_trained", int))


@dataclass(frozen=True)
class Design:
    """What the plan holds (`robustnlu.studies.seqdrift_dro.plan`): run names per part ("A", "k",
    "B", "C", "D", "E", "F"), the k-search runs (method → k → name) and the k chosen per method (None:
    search unfinished)."""

    parts: dict[str, list[str]]
    k_search: dict[str, dict[int, str]]
    chosen_k: dict[str, int | None]
    budget: tuple[str, ...]
    k_scenario: str
    #: Parts D and E: each run trained to its own plateau → the run of its method, scenario and seed
    #: at the fixed budget
    plateau_reference: dict[str, str] = field(default_factory=dict)
    #: Part D's overrides in place of ``budget``'s epochs
    plateau_budget: tuple[str, ...] = ()
    #: the plateau budget's epochs, and the last-epoch change of valid COMBINED (points) below which
    #: a run that used them all is at its plateau (`robustnlu.studies.seqdrift_dro.tables.at_plateau`)
    plateau_epochs: int = 0
    plateau_tolerance: float = 0.0


@dataclass
class Records:
    """The finished runs under the records folder, by run name, with their ``meta.json``."""

    root: Path
    runs: dict[str, Run]
    meta: dict[str, dict[str, Any]]

    def select(self, names: Sequence[str]) -> list[Run]:
        return [self.runs[n] for n in sorted(set(names)) if n in self.runs]


def valid_combined_by_epoch(run: Run) -> dict[int, float]:
    """Epoch → valid COMBINED (a fraction) from the run's ``metrics.csv``: the last row of each
    epoch with a value; {} without the file. `DataError` naming the file (and line) of a log cut
    short: a last line without its line break, a row with another number of fields than the
    header, an epoch or value that is not a number."""
    path = run.dir.metrics_csv
    if not path.is_file():
        return {}
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(path, None, f"cannot read: {err}") from None
    if text and not text.endswith("\n"):
        raise DataError(path, text.count("\n") + 1, "no line break at the end of the last line: the file is cut short")
    reader = csv.DictReader(io.StringIO(text))
    by_epoch: dict[int, float] = {}
    for row in reader:
        if None in row or None in row.values():
            raise DataError(path, reader.line_num, f"the header has {len(reader.fieldnames or ())} fields, "
                                                   "this row another number")
        if row.get("valid/combined"):
            try:
                by_epoch[int(row["epoch"])] = float(row["valid/combined"])
            except (KeyError, ValueError):
                raise DataError(path, reader.line_num, f"epoch {row.get('epoch')!r} and valid/combined "
                                                       f"{row['valid/combined']!r} must be numbers") from None
    return by_epoch


def check_record(run: Run) -> None:
    """`DataError` naming the first file of a record that the report cannot read whole: its
    results.json (`RECORD_KEYS`), its valid and test predictions, its ``metrics.csv``."""
    check_results([run], RECORD_KEYS)
    for split in ("valid", "test"):
        run.dir.predictions(split)
    valid_combined_by_epoch(run)


def read_records(root: Path) -> Records:
    """Every record under ``root`` (a folder holding ``results.json``), each checked whole
    (`check_record`, ``meta.json``); `StudyError` if there is none."""
    root = Path(root)
    if not root.is_dir():
        raise StudyError(f"{root}: no records folder")
    found = [p for p in sorted(root.iterdir()) if RunDir(p).finished()]
    if not found:
        raise StudyError(f"{root}: no records (no <run>/results.json)")
    runs, _ = discover(found)
    for run in runs:
        check_record(run)
    by_name = {r.path.name: r for r in runs}
    meta = {name: r.dir.meta() for name, r in by_name.items()}
    return Records(root, dict(sorted(by_name.items())), meta)
