"""`robustnlu.tables`: the one Markdown / CSV writer of the reports."""

from __future__ import annotations

import csv
import io
import math

from robustnlu.tables import csv_text, fmt, markdown, markdown_lines


def test_markdown_lines_header_rule_and_rows():
    lines = markdown_lines(["a", "b"], [[1, "x"], [2.5, ""]])
    assert lines == ["| a | b |", "|---|---|", "| 1 | x |", "| 2.5 |  |"]
    assert markdown_lines(["p", "q", "r"], [], align=":")[1] == "|---:|---:|---:|"
    assert markdown(["a"], [[1]]) == "| a |\n|---|\n| 1 |\n"


def test_csv_text_round_trips_cells_with_commas_and_quotes():
    rows = [["x, y", 'say "hi"', 3], ["", "plain", 4.25]]
    text = csv_text(["h1", "h2", "h3"], rows)
    assert text.endswith("\n") and "\r" not in text
    assert list(csv.reader(io.StringIO(text))) == [["h1", "h2", "h3"], ["x, y", 'say "hi"', "3"], ["", "plain", "4.25"]]


def test_fmt_rounds_signs_and_blanks_missing_values():
    assert fmt(1.005, 1) == "1.0" and fmt(12.3456) == "12.35" and fmt(2.0, sign=True) == "+2.00"
    assert fmt(-0.5, 3, sign=True) == "-0.500"
    assert fmt(None) == "" and fmt(math.nan) == ""


def test_fmt_writes_a_value_that_rounds_to_zero_without_a_minus_sign():
    assert fmt(-0.004) == "0.00" and fmt(-0.004, sign=True) == "+0.00" and fmt(-0.0) == "0.00"
    assert fmt(-0.006) == "-0.01" and fmt(-0.04, 1, sign=True) == "+0.0" and fmt(-0.06, 1) == "-0.1"
