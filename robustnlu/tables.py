"""The one writer of Markdown and CSV tables, shared by every report (the study, the reproduction,
the robustness and the data-efficiency reports, ``robustness.md``)."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from typing import Any


def fmt(value: float | None, digits: int = 2, sign: bool = False) -> str:
    """A number with ``digits`` decimals (``sign``: always signed); "" for None or NaN. A value that
    rounds to zero has no minus sign (``-0.004`` is ``0.00``, signed ``+0.00``)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"{value:+z.{digits}f}" if sign else f"{value:z.{digits}f}"


def markdown_lines(header: Sequence[str], rows: Sequence[Sequence[Any]], align: str = "") -> list[str]:
    """A Markdown table as lines: the header, the rule (``align=":"``: right-aligned columns) and
    one line per row, each cell as ``str``."""
    lines = ["| " + " | ".join(str(c) for c in header) + " |", "|" + f"---{align}|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def markdown(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table, ending with a newline."""
    return "\n".join(markdown_lines(header, rows)) + "\n"


def csv_text(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A CSV table (``\\n`` line ends)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()
