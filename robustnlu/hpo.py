"""``python -m robustnlu.hpo [--top 2] [--retrain-seed S] <Hydra overrides>``: the core paper's
hyper-parameter protocol for one scenario and method (section 5 "Hyperparameters", App. C):

1. an Optuna study of ``hydra.sweeper.n_trials`` trials (8 in the paper) through our Optuna
   sweeper (hydra_plugins/robustnlu_plugins/, the hpo extra):
   ``python -m robustnlu -m hparams_search=optuna <overrides>`` (conf/hparams_search/optuna.yaml:
   λ, γ and the space the method's class declares, so any method, a user's own included, needs
   no search config of its own);
2. the study is read back from its sqlite storage and the two best completed trials are taken
   (failed / pruned / running trials are ignored; a setting proposed twice counts once);
3. both settings are retrained with a second seed, each as a plain multirun
   ``python -m robustnlu -m seed=<S> <overrides> <setting>`` (the paper's 2 settings × 2 seeds =
   4 models: the trials themselves are the first seed);
4. ``best_params.json`` (the study's best trial, the chosen settings and their runs: each trial's
   run dir, as the sweeper recorded it, and its retraining's) is written atomically into the
   search's sweep dir (`robustnlu.analysis.searches.write_best_params`); ``python -m
   robustnlu.report`` on that folder takes exactly those runs as the method's models.

Example::

    python -m robustnlu.hpo +experiment=snips_slot_value drift.partial=true validation=iid method=topk

Why argparse plus Hydra's compose API rather than ``@hydra.main``: the driver is not a training
job; a Hydra app would make a run dir of its own and parse the user's overrides instead of
forwarding them verbatim to the two multiruns. ``compose`` (with the same overrides) resolves the
study name, storage URL and sweep dir exactly as the sweeper will, so nothing is duplicated here.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from robustnlu.cli import compose_run_config, run_multirun
from robustnlu.errors import CommandLineParser, ConfigError, RobustNLUError, entry_point, first_line
from robustnlu.extras import require


# ---------------------------------------------------------------------------- the study
def top_settings(study: Any, n: int = 2) -> list[dict[str, Any]]:
    """The ``n`` best completed trials of ``study`` with distinct params, best first (ties: the
    earlier trial), each with its run dir (``run_dir``: where the sweeper launched it; None for a
    trial it did not launch). A rerun study with the same sampler seed proposes the same points
    again: the duplicate of a setting already taken is skipped."""
    import optuna
    from hydra_plugins.robustnlu_plugins.optuna_sweeper import JOB_ATTR

    sign = -1.0 if study.direction == optuna.study.StudyDirection.MAXIMIZE else 1.0
    done = [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
            if t.value is not None]
    chosen: list[dict[str, Any]] = []
    for t in sorted(done, key=lambda t: (sign * t.value, t.number)):
        if any(c["params"] == t.params for c in chosen):
            continue
        chosen.append({"trial": t.number, "value": t.value, "params": dict(t.params),
                       "run_dir": (t.user_attrs.get(JOB_ATTR) or {}).get("run_dir")})
        if len(chosen) == n:
            break
    return chosen


def load_study(name: str, storage: str) -> Any | None:
    """The study ``name`` in ``storage``; None where there is none (yet). A SQLite file that does
    not exist stays so: opening it would create it before the search has checked its settings."""
    import optuna
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import SQLAlchemyError

    try:
        url = make_url(storage)
        if url.get_backend_name() == "sqlite" and url.database and not Path(url.database).is_file():
            return None
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:  # no study of that name (yet)
        return None
    except (ImportError, SQLAlchemyError) as err:
        raise unopenable_storage(storage, err) from None


def unopenable_storage(storage: str | None, err: Exception) -> ConfigError:
    """A study storage that cannot be opened (not a URL, no driver for it, a database not there),
    as the driver and the Optuna sweeper report it."""
    return ConfigError(f"hydra.sweeper.storage: cannot open {storage!r}: {first_line(err)}")


# ---------------------------------------------------------------------------- overrides
def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def search_overrides(overrides: list[str]) -> list[str]:
    """The Optuna multirun's overrides: ``method=<m>`` searches with ``hparams_search=optuna``
    unless the overrides name a search config (a user's own, which may also pick the method)."""
    if any(_key(o) == "hparams_search" for o in overrides):
        return list(overrides)
    methods = [o.split("=", 1)[1] for o in overrides if _key(o) == "method"]
    if len(methods) != 1 or "," in methods[0]:
        raise ConfigError("give exactly one method=<name> (or hparams_search=<name>)")
    return ["hparams_search=optuna", *overrides]


def retrain_overrides(overrides: list[str]) -> list[str]:
    """The plain multirun's overrides: the scenario without anything of the Optuna search."""
    drop = ("hparams_search", "paths.hpo_dir", "seed", "hydra.sweep.dir", "hydra.sweep.subdir")
    return [o for o in overrides
            if _key(o) not in drop and not _key(o).startswith(("hydra.sweeper.", "hydra/sweeper"))]


# ---------------------------------------------------------------------------- the protocol
@entry_point
def main(argv: list[str] | None = None) -> int:
    parser = CommandLineParser(
        prog="python -m robustnlu.hpo", description=__doc__.split("\n\nWhy argparse")[0],  # the protocol and its example
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--top", type=int, default=2, help="settings to retrain (paper: 2)")
    parser.add_argument("--retrain-seed", type=int, default=None,
                        help="seed of the retraining (default: the study's seed + 1)")
    parser.add_argument("--no-search", action="store_true",
                        help="skip the Optuna run: retrain from the study as it is in the storage")
    parser.add_argument("--no-retrain", action="store_true", help="stop after writing best_params.json")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, as for python -m robustnlu")
    args = parser.parse_args(argv)
    if args.top < 1:  # top_settings would take every trial
        parser.error(f"--top: the number of settings to retrain must be >= 1, got {args.top}")
    require("optuna", "hpo", "python -m robustnlu.hpo")  # MissingExtra: one error line (entry_point)

    search = search_overrides(args.overrides)
    cfg = compose_run_config(search)
    name, storage = cfg.hydra.sweeper.study_name, cfg.hydra.sweeper.storage
    sweep_dir = Path(cfg.hydra.sweep.dir)  # resolved once: the search and this file agree
    search = [o for o in search if _key(o) != "hydra.sweep.dir"] + [f"hydra.sweep.dir={sweep_dir}"]

    if not args.no_search:
        run_multirun(search)

    study = load_study(name, storage)
    chosen = top_settings(study, args.top) if study is not None else []
    if not chosen:
        raise RobustNLUError(f"study {name!r} in {storage} has no completed trial")

    from robustnlu.analysis.searches import write_best_params

    retrain_seed = args.retrain_seed if args.retrain_seed is not None else int(cfg.seed) + 1
    plain = retrain_overrides(args.overrides)
    if not any(_key(o) == "method" for o in plain):  # the method the search ran: its config's or the default
        plain.append(f"method={cfg.hydra.runtime.choices.method}")
    for rank, setting in enumerate(chosen, 1):
        setting["retrain_dir"] = str(sweep_dir / "retrain" / f"top{rank}_seed{retrain_seed}")
    report = {
        "study_name": name,
        "storage": storage,
        "optimized_metric": cfg.optimized_metric,
        "direction": study.direction.name.lower(),
        "n_trials": len(study.trials),
        "n_complete": sum(t.state.name == "COMPLETE" for t in study.trials),
        "best_trial": study.best_trial.number,
        "best_value": study.best_value,
        "best_params": study.best_params,
        "seed": int(cfg.seed),
        "retrain_seed": retrain_seed,
        "overrides": plain,
        "chosen": chosen,
    }
    out = write_best_params(sweep_dir, report)
    print(f"best_params.json: {out}", flush=True)

    if not args.no_retrain:
        for setting in chosen:
            run_multirun([*plain, f"seed={retrain_seed}",
                           *(f"{k}={v}" for k, v in setting["params"].items()),
                           f"hydra.sweep.dir={Path(setting['retrain_dir']).parent}",
                           f"hydra.sweep.subdir={Path(setting['retrain_dir']).name}"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
