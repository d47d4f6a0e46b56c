"""The reproduction report's figures, each a matplotlib `Figure` (no pyplot state): Figure 1a
beside the paper's (`plot_table10`), Figure 2 beside the paper's (`plot_significance`) and ERM's
valid curves (`plot_valid_curves`); `robustnlu.plotting.png` renders them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from robustnlu.analysis.runs import BASELINE, Run
from robustnlu.studies.seqdrift_dro import paper_results as paper
from robustnlu.studies.seqdrift_dro.tables import valid_curve


def plot_table10(rows: Sequence[dict[str, Any]]):
    """Figure 1a: test − valid of accuracy and F1 per cell, ours (solid) beside the paper's
    (hatched), one panel per dataset."""
    from matplotlib.figure import Figure

    datasets = sorted({r["dataset"] for r in rows})
    fig = Figure(figsize=(8.0, 3.2 * max(1, len(datasets))))
    axes = fig.subplots(max(1, len(datasets)), 1, squeeze=False)[:, 0]
    bars = (("intent_acc", "paper_acc", "acc", "C0"), ("slot_f1", "paper_f1", "F1", "C1"))
    for ax, dataset in zip(axes, datasets):
        cells = [r for r in rows if r["dataset"] == dataset]
        for j, (ours, theirs, label, color) in enumerate(bars):
            for k, (source, hatch, alpha) in enumerate(((ours, "", 1.0), (theirs, "//", 0.45))):
                xs = [i + (2 * j + k - 1.5) * 0.2 for i in range(len(cells))]
                heights = [0.0 if c[source] is None or math.isnan(c[source]) else c[source] for c in cells]
                ax.bar(xs, heights, 0.2, color=color, alpha=alpha, hatch=hatch, edgecolor="black", linewidth=0.4,
                       label=f"{label} ({'ours' if k == 0 else 'paper'})")
        ax.axhline(0.0, color="black", linewidth=0.6)
        ax.set_xticks(range(len(cells)), [f"{c['drift']}\n{c['amount']}" for c in cells], fontsize=8)
        ax.set_ylabel("test − valid (points)")
        ax.set_title(f"{dataset}: ERM from validation to test (Figure 1a / Table 10)", fontsize=9)
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def plot_significance(rows: Sequence[dict[str, Any]]):
    """Figure 2: scenarios significantly worse / better than ERM on COMBINED, ours (of the
    scenarios compared) beside the paper's SNIPS full-drift counts (Table 14, of 4)."""
    from matplotlib.figure import Figure

    methods = [r for r in rows if r["method"] != BASELINE]
    fig = Figure(figsize=(max(6.0, 1.6 * len(methods) + 2), 3.8))
    ax = fig.subplots()
    series = (("worse", "ours", "C3", ""), ("worse", "paper", "C3", "//"),
              ("better", "ours", "C2", ""), ("better", "paper", "C2", "//"))
    for j, (kind, source, color, hatch) in enumerate(series):
        heights = []
        for r in methods:
            if source == "ours":
                heights.append(r[kind] or 0)
            else:
                heights.append(paper.TABLE14_SNIPS_FULL.get(r["paper"], {}).get(kind, 0))
        ax.bar([i + (j - 1.5) * 0.2 for i in range(len(methods))], heights, 0.2, color=color, hatch=hatch,
               alpha=1.0 if source == "ours" else 0.45, edgecolor="black", linewidth=0.4,
               label=f"sign. {kind} ({'ours' if source == 'ours' else 'paper, SNIPS full drift, Table 14'})")
    ax.set_xticks(range(len(methods)), [f"{r['label']}\n(ours of {r['tested']}, paper of 4)" for r in methods],
                  fontsize=8)
    ax.set_ylabel("scenarios (COMBINED vs ERM)")
    ax.set_ylim(0, max([4] + [r["tested"] for r in methods]) + 0.5)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_title("SNIPS: scenarios significantly worse / better than ERM (Figure 2)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_valid_curves(runs: Sequence[Run]):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.0, 4.0))
    ax = fig.subplots()
    for i, run in enumerate(runs):
        curve = [math.nan if v is None else v for v in valid_curve(run)]  # a gap where the log lacks an epoch
        ax.plot(range(1, len(curve) + 1), curve, marker="o", color=f"C{i % 10}", label=run.path.name, linewidth=1)
    ax.set_xlabel("epoch")
    ax.set_ylabel("valid COMBINED (%)")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_title("ERM on SNIPS: valid COMBINED per epoch (is the budget plateaued?)", fontsize=9)
    if runs:
        ax.legend(fontsize=6)
    fig.tight_layout()
    return fig
