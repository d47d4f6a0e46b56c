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
(`SUBDIR`; robustnlu/sweep_jobs.py), so ``python -m robustnlu.sweep status|relaunch`` reads and
continues a protocol whose training stopped part-way, each of its sweeps that started:
``<sweep dir>``, or with ``--mode adapt`` ``<sweep dir>/source`` and ``<sweep dir>/adapt/seed<N>``;
``python -m robustnlu.efficiency.study`` then fits and answers over the finished runs (stages 3-4).

Like ``robustnlu.hpo``, a driver (argparse + Hydra's compose API) rather than a Hydra app: the
overrides are forwarded verbatim to the multiruns. Refused before anything trains (one
``error:`` line, exit status 2): a query outside the curve's domain (``--at`` ≤ 0, a ``--reach``
that is not finite), a subset percentage outside [0, 100] or given twice, and a sweep directory
that already holds runs (stage 4 would pool them with this protocol's).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from robustnlu.cli import compose_run_config, run_multirun
from robustnlu.efficiency.curve import subset_percentages
from robustnlu.errors import CommandLineParser, ConfigError, entry_point
from robustnlu.rundir import RunDir, walk

#: the protocol's multiruns name a job's folder by the job (see above); quoted, as Hydra's override
#: grammar reads a nested interpolation only in a quoted value
SUBDIR = "hydra.sweep.subdir='${efficiency.mode}-${efficiency.percent}pct-seed${seed}-${job_hash:${hydra.overrides.task}}'"


def numbers(kind):
    """An argparse type: comma-separated numbers (``0,7,21``; options never swallow overrides)."""
    return lambda text: [kind(x) for x in text.split(",") if x.strip()]


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


def check_protocol(percents: list[float], seeds: list[int]) -> None:
    """`ConfigError` for subset percentages outside [0, 100] or given twice, or no seed."""
    if not percents or not seeds:
        raise ConfigError("--percents and --seeds need at least one value each")
    if bad := [p for p in percents if not 0 <= p <= 100]:
        raise ConfigError(f"--percents {','.join(f'{p:g}' for p in bad)}: a subset percentage lies in [0, 100]")
    if len(set(percents)) != len(percents) or len(set(seeds)) != len(seeds):
        raise ConfigError("--percents and --seeds must not repeat a value")


@entry_point
def main(argv: list[str] | None = None) -> int:
    parser = CommandLineParser(prog="python -m robustnlu.efficiency", description=__doc__.split("\n\n")[0],
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--percents", type=numbers(float), default=subset_percentages(),
                        help="comma-separated subset percentages (default: the paper's 0,1,2,4,7,12,21,36,60,100)")
    parser.add_argument("--seeds", type=numbers(int), default=[0], help="comma-separated seeds (paper: 0; its variance study 0,1,2)")
    parser.add_argument("--mode", choices=("joint", "adapt"), default="joint")
    parser.add_argument("--reach", type=numbers(float), default=[80, 90], help="'what %% reaches y%% exact match?' (default 80,90)")
    parser.add_argument("--at", type=numbers(float), default=[10, 50], help="'what exact match at x%%?' (default 10,50)")
    parser.add_argument("--label", default=None, help="the curve's name in the plot (default: target and mode)")
    parser.add_argument("overrides", nargs="*", help="target=<domain> and Hydra overrides, as for python -m robustnlu")
    args = parser.parse_args(argv)

    from robustnlu.efficiency.report import write_efficiency
    from robustnlu.efficiency.study import build_efficiency, check_queries

    check_queries(args.reach, args.at)  # before the protocol trains, not after
    check_protocol(args.percents, args.seeds)
    train = training_overrides(args.overrides)
    cfg = compose_run_config(train)
    sweep_dir = Path(cfg.hydra.sweep.dir)  # resolved once: every stage writes below it
    earlier = [run.path for run in walk(sweep_dir)] if sweep_dir.is_dir() else []
    if earlier:
        raise ConfigError(f"hydra.sweep.dir {sweep_dir} already holds {len(earlier)} run(s) (e.g. {earlier[0]}): the "
                          "study would pool them with this protocol's; choose a new sweep directory")
    train = [o for o in train if not o.startswith("hydra.sweep.dir=")]
    seeds = ",".join(map(str, args.seeds))
    percents = [p for p in args.percents if args.mode == "joint" or p > 0]
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
