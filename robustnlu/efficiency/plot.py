"""The data-efficiency plot (Desai et al. 2021, Figure 1 bottom and Figure 3): subset % of the
target training data vs the metric, one colour per curve (model / method):

- the discrete points of every seed (small markers, one marker shape per seed), the 0% (zero-shot)
  point included as a marker only: h(x) = a/x^b + c is undefined at 0 and is never fitted there;
- the fit on all points pooled, drawn over (0, 100] (it falls off the bottom of the axes near 0);
- with >= 2 seeds that could be fitted, a band from the lowest to the highest per-seed curve;
- the query answers as red dotted guide lines (section 2.5: h⁻¹(80) and h⁻¹(90) in Figure 1).

Every artist carries a gid ``<label>/points/seed<s>``, ``<label>/fit``, ``<label>/band`` or
``<label>/query/<kind>/<asked>`` (tests and callers can find them with ``Figure.findobj``).
Figures are built on a `matplotlib.figure.Figure` with the Agg canvas (no pyplot state).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from robustnlu.efficiency.curve import PERCENT_FOR_METRIC, UNREACHABLE, CurveData
from robustnlu.plotting import png

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
QUERY_COLOR = "red"


def _grid(x_max: float = 100.0) -> np.ndarray:
    """x in (0, x_max]: dense near 0, where h changes fastest."""
    return np.unique(np.concatenate([np.geomspace(1e-2, x_max, 400), np.linspace(0.5, x_max, 200)]))


def _fmt(v: float) -> str:
    return f"{v:.2f}".rstrip("0").rstrip(".")


def efficiency_figure(curves: Sequence[CurveData], metric_label: str = "exact match (%)",
                      title: str | None = None):
    """The overlay of ``curves`` as a `matplotlib.figure.Figure` (see the module docstring)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 5.0))
    ax = fig.add_subplot(1, 1, 1)
    xs = _grid()
    ys_seen: list[float] = []
    drew_query = drew_band = False
    for i, curve in enumerate(curves):
        color = f"C{i % 10}"
        seeds = curve.seeds
        for j, seed in enumerate(seeds):
            pts = [p for p in curve.points if p.seed == seed]
            art = ax.scatter([p.percent for p in pts], [p.metric for p in pts], s=18, color=color,
                             marker=MARKERS[j % len(MARKERS)], alpha=0.8, zorder=3,
                             label=f"{curve.label} points" if j == 0 and curve.fit is None else None)
            art.set_gid(f"{curve.label}/points/seed{seed}")
            ys_seen += [p.metric for p in pts]
        if curve.fit is not None:
            (line,) = ax.plot(xs, curve.fit(xs), color=color, linewidth=1.8, zorder=2,
                              label=f"{curve.label}: {curve.fit}")
            line.set_gid(f"{curve.label}/fit")
        seed_fits = [curve.seed_fits[s] for s in sorted(curve.seed_fits)]
        if len(seed_fits) >= 2:
            stack = np.vstack([f(xs) for f in seed_fits])
            band = ax.fill_between(xs, stack.min(axis=0), stack.max(axis=0), color=color, alpha=0.18,
                                   linewidth=0, zorder=1,
                                   label=None if drew_band else "range of the per-seed fits")
            band.set_gid(f"{curve.label}/band")
            drew_band = True
        for ans in curve.answers:
            if UNREACHABLE in ans.flags or not (math.isfinite(ans.answer) and math.isfinite(ans.percent)):
                continue
            x, y = ans.percent, ans.metric
            ys_seen.append(y)
            (guide,) = ax.plot([0.0, x, x], [y, y, -1e9], color=QUERY_COLOR, linestyle=":", linewidth=1.2,
                               zorder=2, label=None if drew_query else "queries")
            guide.set_gid(f"{curve.label}/query/{ans.kind}/{_fmt(ans.asked)}")
            text = (f"{_fmt(y)}% → {_fmt(x)}%" if ans.kind == PERCENT_FOR_METRIC else f"{_fmt(x)}% → {_fmt(y)}%")
            if x <= 100:
                ax.annotate(text, (x, y), textcoords="offset points", xytext=(4, -10), fontsize=7,
                            color=QUERY_COLOR)
            drew_query = True
    lo = min(ys_seen, default=0.0)
    hi = max(ys_seen, default=100.0)
    ax.set_ylim(max(0.0, lo - 5.0), min(hi + 5.0, 102.0) if hi < 100 else hi + 2.0)
    ax.set_xlim(-2.0, 102.0)
    ax.set_xlabel("target subset (% of the target domain's training data)")
    ax.set_ylabel(metric_label)
    if title:
        ax.set_title(title)
    ax.grid(True, linewidth=0.3, alpha=0.5)
    if curves:
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def efficiency_png(curves: Sequence[CurveData], metric_label: str = "exact match (%)",
                   title: str | None = None) -> bytes:
    """``curves`` drawn into one overlay (`efficiency_figure`), as PNG (`robustnlu.plotting.png`)."""
    return png(efficiency_figure(curves, metric_label, title), dpi=110)
