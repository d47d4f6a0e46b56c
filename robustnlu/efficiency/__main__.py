"""``python -m robustnlu.efficiency target=<domain> [options] [<Hydra overrides>]``: the four-stage
data-efficiency protocol (Desai et al. 2021; README "How much data do I need?").

1. subsets of the target domain's training split at the paper's percentages (nested, seeded);
2. one training run per percentage and seed as a multirun of ``python -m robustnlu``:
   ``--mode joint`` (the paper): every other TOPv2 domain + the subset; ``--mode adapt``: first
   the source models (the 0% joint runs, trained with the default optimizer), then each adapted
   on every non-zero subset alone (``optimizer=...`` overrides apply to this stage:
   ``optimizer=conatural`` preconditions with the source Fisher); results.json records the
   source-domain forgetting;
3. h(x) = a / x^b + c fitted to (percent, exact match) (`robustnlu.efficiency.curve`);
4. the queries answered both ways, written with the plot to ``<sweep dir>/efficiency/``
   (`robustnlu.efficiency.study`) and printed.

Example (tiny smoke run)::

    python -m robustnlu.efficiency --percents 0,7,21,100 --seeds 0,1 target=weather \\
        encoder=tiny trainer.max_epochs=2 efficiency.source_limit=200

Each training run's folder is named by its job, ``<mode>-<percent>pct-seed<seed>-<job hash>``
(`SUBDIR`; robustnlu/sweep_jobs.py), so ``python -m robustnlu.sweep status`` reads a protocol's
sweeps — ``<sweep dir>``, or with ``--mode adapt`` ``<sweep dir>/source`` and
``<sweep dir>/adapt/seed<N>`` — and the protocol's own command finds its runs again. The protocol
records its settings in ``<sweep dir>/protocol.json`` (`PROTOCOL_FILE`, written atomically before
its first run): ``--mode``, the percentages it trains, ``--seeds`` (in any order) and the
overrides (`robustnlu.sweep_jobs.job_identity`: normalized, less those that change no result:
``resume``, ``paths.*``, ``logger``, ``hydra.*``, ...). A protocol stopped part-way, in either
stage, is continued by its command run again with ``resume=true`` into the same sweep directory
(``hydra.sweep.dir=<it>``; the default one is named by the time it started): its finished runs
return their stored results (they are not trained again), its interrupted ones continue from
their ``last.ckpt``, the runs and stages not started run; then stages 3-4 as ever.
``--reach``, ``--at`` and ``--label`` are not settings of the runs: they may differ.

Like ``robustnlu.hpo``, a driver (argparse + Hydra's compose API) rather than a Hydra app: the
overrides are forwarded verbatim to the multiruns. Refused before anything trains (one
``error:`` line, exit status 2, nothing written): a query outside the curve's domain (``--at`` ≤ 0,
a ``--reach`` that is not finite), a subset percentage outside [0, 100] or given twice, a seed
outside [0, 2^32 − 1], ``--mode adapt`` without a percentage above 0; without ``resume=true``, a
sweep directory that already holds runs (stage 4 would pool them with this protocol's) or a
protocol's record; with it, a sweep directory whose ``protocol.json`` records other settings
(named in the error), or that holds runs but no ``protocol.json``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from robustnlu.cli import compose_run_config, run_multirun
from robustnlu.config_spec import SEED, integer
from robustnlu.efficiency.curve import subset_percentages
from robustnlu.errors import CommandLineParser, ConfigError, entry_point
from robustnlu.io import atomic_write_json
from robustnlu.rundir import RunDir, read_json_object, walk
from robustnlu.sweep_jobs import job_identity

#: the protocol's multiruns name a job's folder by the job (see above); quoted, as Hydra's override
#: grammar reads a nested interpolation only in a quoted value
SUBDIR = "hydra.sweep.subdir='${efficiency.mode}-${efficiency.percent}pct-seed${seed}-${job_hash:${hydra.overrides.task}}'"
#: the protocol's settings (`protocol_settings`) in its sweep directory: what ``resume=true`` compares
PROTOCOL_FILE = "protocol.json"
#: the settings `protocol_settings` records and the command-line option of each
SETTINGS = {"mode": "--mode", "percents": "--percents", "seeds": "--seeds", "overrides": "overrides"}


def numbers(kind):
    """An argparse type: comma-separated numbers (``0,7,21``; options never swallow overrides)."""
    what = "integers" if kind is int else "numbers"

    def parse(text: str) -> list:
        try:
            return [kind(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated {what}, got {text!r}") from None

    return parse


def training_overrides(overrides: list[str]) -> list[str]:
    """``target=<domain>`` → ``dataset=topv2_<domain>``, plus ``efficiency=topv2``."""
    out = [f"dataset=topv2_{o.split('=', 1)[1]}" if o.startswith("target=") else o for o in overrides]
    if not any(o.startswith("dataset=") for o in out):
        raise ConfigError("name the target domain: target=<alarm|event|messaging|music|navigation|reminder|timer|weather>")
    return ["efficiency=topv2", *out]


def source_checkpoints(source_dir: Path) -> dict[int, Path]:
    """seed → best checkpoint of the source models (0% joint runs) under ``source_dir``."""
    found = {}
    for run in map(RunDir, sorted(source_dir.iterdir())):
        if run.finished():
            found[int(run.results()["seed"])] = run.best_checkpoint()
    return found


def check_protocol(mode: str, percents: list[float], seeds: list[int]) -> None:
    """`ConfigError` for subset percentages outside [0, 100] or given twice, no seed or one outside
    the seed's range, or (``--mode adapt``, which adapts to the non-zero subsets only) no percentage
    above 0."""
    if not percents or not seeds:
        raise ConfigError("--percents and --seeds need at least one value each")
    if mode == "adapt" and not any(p > 0 for p in percents):
        raise ConfigError("--mode adapt adapts the source models to the subsets above 0%: give --percents at "
                          "least one of them")
    for seed in seeds:  # the training config's range, checked here rather than by every job of the multirun
        integer(SEED).check("--seeds", seed, {})
    if bad := [p for p in percents if not 0 <= p <= 100]:
        raise ConfigError(f"--percents {','.join(f'{p:g}' for p in bad)}: a subset percentage lies in [0, 100]")
    if len(set(percents)) != len(percents) or len(set(seeds)) != len(seeds):
        raise ConfigError("--percents and --seeds must not repeat a value")


def protocol_settings(mode: str, percents: list[float], seeds: list[int],
                      overrides: list[str]) -> dict[str, Any]:
    """What the protocol's runs are: its mode, the percentages it trains (``--mode adapt``: the
    non-zero ones) and seeds, sorted, and its training overrides as `job_identity` reads them
    (``resume``, ``paths.*``, ``hydra.*`` and the other settings that change no result left out)."""
    return {"mode": mode, "percents": sorted(percents), "seeds": sorted(seeds), "overrides": job_identity(overrides)}


def shown(key: str, value: Any) -> str:
    """A recorded setting as the error shows it: numbers as ``--percents`` takes them, overrides
    as `job_identity` writes them."""
    if key in ("percents", "seeds") and isinstance(value, list):
        return ",".join(f"{v:g}" if isinstance(v, (int, float)) else str(v) for v in value) or "(none)"
    if key == "overrides" and isinstance(value, list):
        return " ".join(map(str, value)) or "(none)"
    return str(value)


def changed_settings(stored: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """The settings in which ``now`` differs from the ``stored`` record, as ``<option> <there>
    there, <now> now`` (of the overrides, only those not in both)."""
    changes = []
    for key, option in SETTINGS.items():
        there, here = stored.get(key), now[key]
        if key == "overrides" and isinstance(there, list):
            there, here = sorted(set(map(str, there)) - set(here)), sorted(set(here) - set(map(str, there)))
            if not there and not here:
                continue
        elif there == here:
            continue
        changes.append(f"{option} {shown(key, there)} there, {shown(key, here)} now")
    return changes


def check_sweep_dir(sweep_dir: Path, settings: dict[str, Any], resume: bool) -> bool:
    """Whether the protocol continues one started in ``sweep_dir`` (``resume``, and its
    `PROTOCOL_FILE` records ``settings``); False for a new or empty one. `ConfigError` (see the
    module docstring) for one it must neither start in nor continue."""
    record = sweep_dir / PROTOCOL_FILE
    earlier = [run.path for run in walk(sweep_dir)] if sweep_dir.is_dir() else []
    if not resume:
        if record.is_file():
            raise ConfigError(f"hydra.sweep.dir {sweep_dir} holds a protocol started earlier ({record}, "
                              f"{len(earlier)} run(s)): continue it with resume=true, or choose a new sweep directory")
        if earlier:
            raise ConfigError(f"hydra.sweep.dir {sweep_dir} already holds {len(earlier)} run(s) (e.g. {earlier[0]}): "
                              "the study would pool them with this protocol's; choose a new sweep directory")
        return False
    if not record.is_file():
        if earlier:
            raise ConfigError(f"hydra.sweep.dir {sweep_dir} holds {len(earlier)} run(s) (e.g. {earlier[0]}) but no "
                              f"{PROTOCOL_FILE}, so they are not known to be this protocol's: resume=true continues a "
                              "protocol in the sweep directory it started; choose a new sweep directory")
        return False
    if changes := changed_settings(read_json_object(record), settings):
        raise ConfigError(f"hydra.sweep.dir {sweep_dir} holds a protocol with other settings ({'; '.join(changes)}; "
                          f"{record}): resume=true continues it only with the settings it started with; choose a "
                          "new sweep directory for these")
    return True


@entry_point
def main(argv: list[str] | None = None) -> int:
    parser = CommandLineParser(prog="python -m robustnlu.efficiency", description=__doc__.split("\n\n")[0],
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--percents", type=numbers(float), default=subset_percentages(),
                        help="comma-separated subset percentages (default: the paper's 0,1,2,4,7,12,21,36,60,100)")
    parser.add_argument("--seeds", type=numbers(int), default=[0], help="comma-separated seeds (default 0, the paper's; its variance study 0,1,2)")
    parser.add_argument("--mode", choices=("joint", "adapt"), default="joint",
                        help="joint (default, the paper's): the source domains plus each subset; adapt: a source "
                             "model per seed, then fine-tuned on each subset alone")
    parser.add_argument("--reach", type=numbers(float), default=[80, 90], help="'what %% reaches y%% exact match?' (default 80,90)")
    parser.add_argument("--at", type=numbers(float), default=[10, 50], help="'what exact match at x%%?' (default 10,50)")
    parser.add_argument("--label", default=None, help="the curve's name in the plot (default: target and mode)")
    parser.add_argument("overrides", nargs="*", help="target=<domain> and Hydra overrides, as for python -m robustnlu")
    args = parser.parse_args(argv)

    from robustnlu.efficiency.report import write_efficiency
    from robustnlu.efficiency.study import build_efficiency, check_queries

    check_queries(args.reach, args.at)  # before the protocol trains, not after
    check_protocol(args.mode, args.percents, args.seeds)
    train = training_overrides(args.overrides)
    cfg = compose_run_config(train)
    # resolved once, absolute: every stage writes below it, and the adapt runs' efficiency.init_from
    # (part of their job identity) and the report's curve folders do not depend on its spelling, so
    # a protocol continued with resume=true from another working directory finds its runs again
    sweep_dir = Path(cfg.hydra.sweep.dir).resolve()
    percents = [p for p in args.percents if args.mode == "joint" or p > 0]
    settings = protocol_settings(args.mode, percents, args.seeds, train)
    if not check_sweep_dir(sweep_dir, settings, bool(cfg.resume)):
        try:
            sweep_dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ConfigError(f"hydra.sweep.dir: cannot create {sweep_dir}: {err.strerror or err}") from None
        atomic_write_json(sweep_dir / PROTOCOL_FILE, settings)
    train = [o for o in train if not o.startswith("hydra.sweep.dir=")]
    seeds = ",".join(map(str, args.seeds))
    pct = ",".join(f"{p:g}" for p in percents)
    if args.mode == "joint":
        run_multirun([*train, f"efficiency.percent={pct}", f"seed={seeds}", f"hydra.sweep.dir={sweep_dir}", SUBDIR])
        curve_dirs = [sweep_dir]
    else:
        source = [o for o in train if not o.lstrip("+~").startswith("optimizer")]  # the source models: default optimizer
        run_multirun([*source, "efficiency.percent=0", f"seed={seeds}", f"hydra.sweep.dir={sweep_dir / 'source'}", SUBDIR])
        for seed, ckpt in source_checkpoints(sweep_dir / "source").items():
            run_multirun([*train, "efficiency.mode=adapt", f"efficiency.init_from={ckpt}", f"efficiency.percent={pct}",
                          f"seed={seed}", f"hydra.sweep.dir={sweep_dir / 'adapt' / f'seed{seed}'}", SUBDIR])
        curve_dirs = [sweep_dir / "adapt"]
    label = args.label or f"{cfg.dataset.name} ({args.mode})"
    study = build_efficiency([(label, curve_dirs)], reach=args.reach, at=args.at)
    written = write_efficiency(study, sweep_dir / "efficiency")
    print((sweep_dir / "efficiency" / "efficiency.md").read_text())
    print(f"wrote {', '.join(str(p) for p in written)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
