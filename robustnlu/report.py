"""``python -m robustnlu.report RUN_OR_SWEEP_DIR... --out report/``: the study report of a sweep
(core paper section 5, Appendix D Tables 10-14, Figures 1 and 2).

Finds the runs recursively under the given directories (a run directory holds ``results.json``;
one with only ``status.json`` is listed as failed or unfinished) and writes under ``--out``:
table10_metrics.{md,csv} (metrics per scenario and method, mean ± std over the models, and the
valid → test drop), relative_change.{md,csv} (relative change to ERM and the paired approximate
randomization tests), significance_counts.{md,csv} (scenarios significantly better / worse than
ERM per method), fig1a_drop.png, fig1bc_counts.png and report.md tying them together.

Each of a method's models is tested against the ERM model of the same seed (utterances paired by
uid); the decision rule and the family-wise error are described in
`robustnlu.analysis.study` and in report.md. Deterministic given --seed. A directory without any
run: a one-line error, exit status 2, nothing written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from robustnlu.errors import RobustNLUError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m robustnlu.report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dirs", nargs="+", type=Path,
                        help="run directories or sweep directories (searched recursively)")
    parser.add_argument("--out", type=Path, required=True, help="folder for the tables, figures and report.md")
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level (default 0.05)")
    parser.add_argument("--rounds", type=int, default=10_000, help="approximate randomization shuffles (default 10000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of every randomization test (default 0)")
    parser.add_argument("--rule", choices=("any", "majority", "all"), default="any",
                        help="how many of a scenario's k paired tests must be significant (default any; "
                             "see robustnlu.analysis.study)")
    args = parser.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    from robustnlu.analysis.study import build_study, write_report

    try:
        study = build_study(args.dirs, alpha=args.alpha, rounds=args.rounds, seed=args.seed, rule=args.rule)
    except RobustNLUError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    written = write_report(study, args.out)
    print(f"{len(study.runs)} runs in {len({r.scenario for r in study.runs})} scenarios, "
          f"{len(study.incomplete)} failed or unfinished; wrote {len(written)} files to {args.out} "
          f"(see {args.out / 'report.md'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
