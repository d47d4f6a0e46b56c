"""The reports' figures, each a matplotlib `Figure` (no pyplot state): the study's Figure 1a
(`plot_drop`) and Figures 1b, 1c and 2 (`plot_counts`); `robustnlu.plotting.png` renders one."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from robustnlu.analysis.runs import method_order
from robustnlu.analysis.statistics import MethodStats
from robustnlu.metrics.registry import drop_key


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
        if rows:
            ax.legend(fontsize=7)
        else:  # e.g. a report of one run, or of ERM alone
            ax.text(0.5, 0.5, "no method tested against ERM", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    return fig
