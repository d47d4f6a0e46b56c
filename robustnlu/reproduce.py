"""``python -m robustnlu.reproduce [--commit] [--only NAME ...] [--list] [--batch N] [OVERRIDE ...]``:
the core paper's study on this machine (its plan: `robustnlu.studies.seqdrift_dro.plan`), run by
`robustnlu.studies.runner`: resumable, each finished run kept as a compact record under
``docs/reproduction/records/``; ``python -m robustnlu.reproduce report``:
``docs/reproduction/report.md`` and its figures from the records alone
(`robustnlu.studies.seqdrift_dro.report`)."""

from __future__ import annotations

import sys
from pathlib import Path

from robustnlu.errors import CommandLineParser, entry_point
from robustnlu.studies import runner
from robustnlu.studies.seqdrift_dro.plan import STUDY, report_design
from robustnlu.studies.seqdrift_dro.report import write


def report_main(argv: list[str]) -> int:
    """``python -m robustnlu.reproduce report``: docs/reproduction/report.md from the records."""
    parser = CommandLineParser(prog="python -m robustnlu.reproduce report",
                               description="docs/reproduction/report.md and its figures, from the records alone")
    parser.add_argument("--records", type=Path, default=STUDY.records, help=f"default: {STUDY.records}")
    parser.add_argument("--out", type=Path, default=STUDY.records.parent, help=f"default: {STUDY.records.parent}")
    args = parser.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    written = write(args.records, report_design(args.records), args.out)
    print(f"wrote {', '.join(p.name for p in written)} to {args.out}")
    return 0


@entry_point
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["report"]:
        return report_main(argv[1:])
    return runner.main(STUDY, argv, prog="python -m robustnlu.reproduce", description=__doc__.split("\n\n")[0],
                       epilog="python -m robustnlu.reproduce report [--records DIR] [--out DIR]: "
                              "docs/reproduction/report.md from the records alone")


if __name__ == "__main__":
    sys.exit(main())
