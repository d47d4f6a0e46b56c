"""The reports' figures, each a matplotlib `Figure` (no pyplot state): the study's Figure 1a
(`plot_drop`) and Figures 1b, 1c and 2 (`plot_counts`), and the reproduction report's Figure 1a
beside the paper's (`plot_table10`), Figure 2 beside the paper's (`plot_significance`) and ERM's
valid curves (`plot_valid_curves`); `atomic_save_figure` writes one as PNG, the same bytes each
time."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from robustnlu.analysis import paper_results as paper
from robustnlu.analysis.reproduction_tables import valid_curve
from robustnlu.analysis.runs import BASELINE, Run, method_order
from robustnlu.analysis.statistics import MethodStats
from robustnlu.io import atomic_write_with
from robustnlu.metrics.registry import drop_key


def atomic_save_figure(fig, path: Path) -> Path:
    """``fig`` as PNG at ``path``, written atomically (Agg canvas); no metadata (no matplotlib
    version), so the same figure gives the same bytes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    return atomic_write_with(path, lambda f: fig.savefig(f, format="png", dpi=100, metadata={"Software": None}))


def plot_drop(stats: Sequence[MethodStats]):
    """Figure 1a: valid → test drop of COMBINED (points), one panel per dataset, a group of bars
    (one per method) per drift scenario. Returns the Figure."""
    from matplotlib.figure import Figure

    datasets = sorted({s.scenario.dataset for s in stats})
    methods = sorted({s.method for s in stats}, key=method_order)
    fig = Figure(figsize=(max(6.0, 1.6 * len({s.scenario.label for s in stats}) + 2), 3.6 * len(datasets)))
    axes = fig.subplots(len(datasets), 1, squeeze=False)[:, 0]
    colors = {m: f"C{i}" for i, m in enumerate(methods)}
    width = 0.8 / max(1, len(methods))
    for ax, dataset in zip(axes, datasets):
        rows = [s for s in stats if s.scenario.dataset == dataset]
        scenarios = sorted({s.scenario for s in rows})
        index = {(s.scenario, s.method): s for s in rows}
        for j, method in enumerate(methods):
            xs, heights, errs = [], [], []
            for i, scenario in enumerate(scenarios):
                s = index.get((scenario, method))
                if s is None:
                    continue
                xs.append(i + (j - (len(methods) - 1) / 2) * width)
                mean, std = s.stats[drop_key("combined")]
                heights.append(mean)
                errs.append(0.0 if math.isnan(std) else std)
            if xs:
                ax.bar(xs, heights, width, yerr=errs if any(errs) else None, label=method, color=colors[method],
                       capsize=2)
        ax.axhline(0.0, color="black", linewidth=0.6)
        ax.set_xticks(range(len(scenarios)), [s.label.replace(" ", "\n") for s in scenarios], fontsize=8)
        ax.set_ylabel("drop valid → test\nCOMBINED (points)")
        ax.set_title(f"{dataset}: drop in performance from validation to test")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_counts(counts: Sequence[dict[str, Any]]):
    """Figures 1b, 1c and 2: scenarios where each method is significantly worse / better than ERM
    on COMBINED; panels: all scenarios, full vs partial drift, i.i.d. vs o.o.d. validation. Every
    (method, group value) gets a "worse" and a "better" bar (height 0 included). Returns the Figure."""
    from matplotlib.figure import Figure

    panels = [("all", "all scenarios (Fig. 2)"), ("amount", "full vs partial drift (Fig. 1b)"),
              ("validation", "i.i.d. vs o.o.d. validation (Fig. 1c)")]
    methods = sorted({r["method"] for r in counts})
    fig = Figure(figsize=(max(6.0, 1.2 * len(methods) + 2) * len(panels) / 2, 4.0))
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (group, title) in zip(axes, panels):
        rows = [r for r in counts if r["group"] == group]
        values = sorted({r["value"] for r in rows})
        cell = {(r["method"], r["value"]): r for r in rows}
        n_bars = 2 * max(1, len(values))
        width = 0.8 / n_bars
        top = max([r[k] for r in rows for k in ("better", "worse")], default=0)
        for v_i, value in enumerate(values):
            for d_i, (kind, hatch) in enumerate((("worse", "//"), ("better", ""))):
                offset = (2 * v_i + d_i - (n_bars - 1) / 2) * width
                heights = [cell[(m, value)][kind] if (m, value) in cell else 0 for m in methods]
                label = f"sign. {kind}" + ("" if group == "all" else f" ({value})")
                ax.bar([i + offset for i in range(len(methods))], heights, width, label=label,
                       color="C3" if kind == "worse" else "C2", alpha=1.0 - 0.45 * v_i, hatch=hatch,
                       edgecolor="black", linewidth=0.4)
        ax.set_xticks(range(len(methods)), methods, rotation=30, fontsize=8)
        ax.set_ylabel("scenarios (COMBINED vs ERM)")
        ax.set_title(title, fontsize=9)
        ax.set_ylim(0, max(1, top) + 0.5)
        ax.yaxis.get_major_locator().set_params(integer=True)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


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
