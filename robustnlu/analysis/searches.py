"""The record of an HPO protocol's search and the models it names (core paper section 5
"Hyperparameters", App. C: a method's models in a scenario are its 2 best settings of an 8-trial
search × 2 seeds).

``python -m robustnlu.hpo`` writes ``best_params.json`` (`BEST_PARAMS`, `write_best_params`) into the
search's sweep dir: the settings it chose (``chosen``: each with its ``trial``, ``params``, the trial's
run, ``run_dir``, the first seed, and its retraining's, ``retrain_dir``, the second seed). A report
input that holds such a record (`searches_in`) takes as that method's models exactly the runs it
names (`select_chosen`): the runs below the sweep dir that it does not name (the trials not chosen,
failed or not) are left out and counted, and a run it names that is missing or unfinished is listed
as incomplete, as a sweep's job that never ran is (its cell then has fewer models; the report of a
search whose retraining still runs is still of use). The chosen runs may differ in the searched
keys (`Search.searched`, via `robustnlu.analysis.runs.other_settings`). An input inside a search's
sweep dir (its retrain folder, or one trial's run) is refused: it would hold half of the chosen
runs, or trials not chosen, and the record that tells them apart is above it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from robustnlu.analysis.runs import Incomplete, Run, StudyError
from robustnlu.errors import DataError
from robustnlu.io import atomic_write_json
from robustnlu.rundir import RunDir, read_json_object

BEST_PARAMS = "best_params.json"
#: the run dirs a chosen setting names: its trial's run (first seed), its retraining (second seed)
RUN_KEYS = ("run_dir", "retrain_dir")


def write_best_params(sweep_dir: Path, record: dict[str, Any]) -> Path:
    """``record`` as ``<sweep_dir>/best_params.json``, written atomically; the run dirs of its
    chosen settings (`RUN_KEYS`) that lie below ``sweep_dir`` relative to it, so that a sweep dir
    moved or copied whole names its own runs."""
    base = Path(sweep_dir).absolute()

    def shown(path: str | None) -> str | None:
        if path is None:
            return None
        path = Path(path).absolute()
        return str(path.relative_to(base)) if path.is_relative_to(base) else str(path)

    chosen = [{**s, **{k: shown(s.get(k)) for k in RUN_KEYS}} for s in record["chosen"]]
    return atomic_write_json(base / BEST_PARAMS, {**record, "chosen": chosen})


@dataclass(frozen=True)
class Search:
    """An HPO protocol's search as its ``best_params.json`` records it."""

    path: Path  #: its sweep dir, the folder of best_params.json
    study: str
    #: the keys the chosen settings set (their ``params``): where the chosen runs may differ
    searched: frozenset[str]
    #: (run dir, what it is: ``trial N`` / ``trial N retrained``) of each chosen setting, trial first;
    #: None for a trial's run the record does not name (a trial the sweeper did not launch)
    chosen: tuple[tuple[Path | None, str], ...]

    def holds(self, path: Path) -> bool:
        path = Path(path).absolute()
        return path == self.path or self.path in path.parents


def read_search(sweep_dir: Path) -> Search:
    """The search recorded in ``<sweep_dir>/best_params.json``; `DataError` naming the file where it
    is no JSON object or lacks a chosen setting's trial, params or run dirs."""
    file = Path(sweep_dir) / BEST_PARAMS
    record = read_json_object(file)
    chosen = record.get("chosen")
    if not isinstance(chosen, list) or not chosen:
        raise DataError(file, None, "no chosen settings ('chosen': a non-empty list)")
    base = Path(sweep_dir).absolute()
    searched: set[str] = set()
    runs = []
    for i, setting in enumerate(chosen):
        if not (isinstance(setting, dict) and isinstance(setting.get("params"), dict) and "trial" in setting
                and isinstance(setting.get("retrain_dir"), str) and isinstance(setting.get("run_dir"), (str, type(None)))):
            raise DataError(file, None, f"chosen[{i}] needs trial, params and the run dirs {', '.join(RUN_KEYS)}")
        searched.update(setting["params"])
        runs += [(base / setting["run_dir"] if setting["run_dir"] else None, f"trial {setting['trial']}"),
                 (base / setting["retrain_dir"], f"trial {setting['trial']} retrained")]
    return Search(base, str(record.get("study_name", "?")), frozenset(searched), tuple(runs))


def searches_in(paths: Iterable[Path]) -> list[Search]:
    """The searches recorded at and below ``paths`` (``best_params.json``), sorted by folder.
    `StudyError` naming the first input inside a search's sweep dir (module docstring)."""
    found: dict[Path, Search] = {}
    for path in map(Path, paths):
        above = next((p for p in path.absolute().parents if (p / BEST_PARAMS).is_file()), None)
        if above is not None:
            raise StudyError(f"{path}: inside HPO search {above} (its {BEST_PARAMS} names the runs that are the "
                             f"models: the chosen trials and their retraining); give the report {above}")
        for file in sorted(path.rglob(BEST_PARAMS)) if path.is_dir() else ():
            if file.parent.absolute() not in found:
                found[file.parent.absolute()] = read_search(file.parent)
    return [found[p] for p in sorted(found)]


def select_chosen(searches: Sequence[Search], runs: list[Run],
                  incomplete: list[Incomplete]) -> tuple[list[Run], list[Incomplete], list[str], int]:
    """The runs and incomplete runs found (`robustnlu.analysis.runs.discover`) with each search's
    selection applied: below its sweep dir only the runs it chose, each tagged with its search
    (``Run.search``); a chosen run found nowhere under the inputs read from where the record
    names it, or listed as incomplete where it is missing or unfinished. Returns them (sorted by
    path), one line per search saying which trials it chose and how many runs it left out, and how
    many runs the searches left out in all."""
    found = {Path(r.path).absolute(): r for r in runs}
    unfinished = {Path(r.path).absolute() for r in incomplete}
    lines, left_out = [], 0
    for search in searches:
        below = [Path(r.path).absolute() for r in [*runs, *incomplete] if search.holds(r.path)]
        left = set(below) - {path for path, _ in search.chosen}
        runs = [r for r in runs if Path(r.path).absolute() not in left]
        incomplete = [r for r in incomplete if Path(r.path).absolute() not in left]
        for path, what in search.chosen:
            if path is None:
                incomplete.append(Incomplete(search.path, "missing", f"{what} chosen by {search.path / BEST_PARAMS}: "
                                             "it names no run dir (a trial the sweeper did not launch)", folder=False))
            elif path in found:
                runs = [replace(r, search=search) if r is found[path] else r for r in runs]
            elif path in unfinished:
                continue
            elif RunDir(path).finished():
                runs.append(Run(path, RunDir(path).results(), search))
            elif RunDir(path).is_run():
                status = RunDir(path).status() or {}
                incomplete.append(Incomplete(path, str(status.get("state", "unknown")), status.get("error")))
            else:
                why = "no such folder" if not path.exists() else "no results.json nor status.json there"
                incomplete.append(Incomplete(path, "missing", f"{what} chosen by {search.path / BEST_PARAMS}: {why}",
                                             folder=path.is_dir()))
        trials = ", ".join(what for _, what in search.chosen[::2])
        n_left = sum(p in left for p in below)
        left_out += n_left
        lines.append(f"`{search.path}` (study `{search.study}`): chose {trials} (each also retrained); "
                     f"{n_left} other runs below it (trials not chosen) left out")
    if not runs:
        raise StudyError(f"{', '.join(str(s.path) for s in searches)}: no finished run that its {BEST_PARAMS} chose")
    return sorted(runs, key=lambda r: str(r.path)), sorted(incomplete, key=lambda r: str(r.path)), lines, left_out
