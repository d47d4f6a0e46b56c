"""Stages 1, 3 and 4 of the data-efficiency protocol (Desai et al. 2021, "Assessing Data Efficiency
in Task-Oriented Semantic Parsing", section 2; digest 002/003 Part B.2), as pure functions:

- Stage 1 (section 2.2, eq. 1, Table 1): the subset percentages k_i = ⌈g(i)⌉ with
  g(i) = 101^((i−1)/9) − 1 → [0, 1, 2, 4, 7, 12, 21, 36, 60, 100] (`subset_percentages`).
- Stage 3 (section 2.4): the continuous approximation h(x) = a / x^b + c fitted with
  ``scipy.optimize.curve_fit`` to the (subset %, exact match %) points (`fit_power_law`).
  h is undefined at x = 0, so the 0% (zero-shot) point is plotted but never fitted.
- Stage 4 (section 2.5): queries both ways, h⁻¹(y) = ((y − c) / a)^(−1/b) ("what % of the
  target domain reaches y% exact match?") and h(x) ("what exact match at x%?"), with the number of
  target samples x/100 · |D_d| (the paper's "1/x · |D|" is a typo, digest B.8) (`answer_queries`).

The curve data a plot needs (`CurveData`) is defined here too, so `robustnlu.efficiency.plot`
does not depend on how the points were read.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: the flags a `QueryAnswer` can carry
UNREACHABLE = "unreachable"  # y at or beyond the asymptote c: no x reaches it (answer inf)
EXTRAPOLATION = "extrapolation"  # the answer (or the asked x) lies outside the fitted x range / above 100%
NOT_INCREASING = "not_increasing"  # the fitted a >= 0: the curve does not rise with more data

PERCENT_FOR_METRIC = "percent_for_metric"
METRIC_AT_PERCENT = "metric_at_percent"


class NotIncreasingWarning(UserWarning):
    """The fitted curve has a >= 0: exact match does not increase with the subset size."""


def subset_percentages(n: int = 10) -> list[int]:
    """Stage 1 (section 2.2, eq. 1 and Table 1): k_i = ⌈g(i)⌉ for i = 1..n with
    g(i) = (101^(1/(n−1)))^(i−1) − 1, so g(1) = 0 and g(n) = 100; n = 10 gives the paper's
    [0, 1, 2, 4, 7, 12, 21, 36, 60, 100]. g is rounded to 6 decimals before the ceiling so that
    floating-point error cannot turn 100 into 101 (digest B.2). From n = 14 on, neighbouring
    ⌈g(i)⌉ coincide; duplicates are dropped, so the list is then shorter than n."""
    if n < 2:
        raise ValueError(f"subset_percentages needs n >= 2 (0% and 100%), got {n}")
    base = 101.0 ** (1.0 / (n - 1))
    out: list[int] = []
    for i in range(1, n + 1):
        k = math.ceil(round(base ** (i - 1) - 1.0, 6))
        if k not in out:
            out.append(k)
    return out


@dataclass(frozen=True)
class PowerLaw:
    """h(x) = a / x^b + c (section 2.4), θ = [a, b, c]. Increasing and saturating at the
    asymptote c when a < 0 and b > 0 (the paper's Figure 1: a = −27.26, b = 0.35, c = 97.79)."""

    a: float
    b: float
    c: float

    def __call__(self, x):
        """h(x) for a float or a numpy array of x > 0 (h is undefined at 0: ValueError)."""
        arr = np.asarray(x, dtype=float)
        if np.any(~(arr > 0)):
            raise ValueError(f"h(x) = a/x^b + c is defined for x > 0 only, got {x!r}")
        out = self.a / arr**self.b + self.c
        return float(out) if np.ndim(out) == 0 else out

    def inverse(self, y: float) -> float:
        """h⁻¹(y) = ((y − c) / a)^(−1/b) (section 2.5): the x > 0 with h(x) = y, or ``math.inf``
        when there is none (for an increasing curve: y at or above the asymptote c)."""
        if self.a == 0 or self.b == 0:
            return math.inf
        ratio = (float(y) - self.c) / self.a
        if not ratio > 0:
            return math.inf
        try:
            x = ratio ** (-1.0 / self.b)
        except OverflowError:
            return math.inf
        return x if math.isfinite(x) and x > 0 else math.inf

    @property
    def increasing(self) -> bool:
        return self.a < 0 and self.b > 0

    def to_dict(self) -> dict[str, float]:
        return {"a": self.a, "b": self.b, "c": self.c}

    def __str__(self) -> str:
        return f"h(x) = {self.a:.4g} / x^{self.b:.4g} + {self.c:.4g}"


def _h(x, a, b, c):
    return a / np.power(x, b) + c


def fit_power_law(x: Sequence[float], y: Sequence[float], *, max_b: float = 5.0) -> PowerLaw:
    """Stage 3 (section 2.4): least-squares fit of h(x) = a / x^b + c with
    ``scipy.optimize.curve_fit`` to the points with x > 0 (x <= 0, i.e. the 0% point, is dropped:
    h is undefined there). Start p0 = (−(y_max − y_min), 0.5, y_max), bounds b ∈ (0, max_b), a and
    c free (digest B.2 stage 3). Raises ValueError with fewer than 3 distinct positive x (three
    parameters), on non-finite values or when the fit does not converge; warns
    (`NotIncreasingWarning`) when the fitted a >= 0."""
    from scipy.optimize import OptimizeWarning, curve_fit

    xs = np.asarray(x, dtype=float).ravel()
    ys = np.asarray(y, dtype=float).ravel()
    if xs.shape != ys.shape:
        raise ValueError(f"x and y differ in length ({xs.size} vs {ys.size})")
    if not (np.all(np.isfinite(xs)) and np.all(np.isfinite(ys))):
        raise ValueError("x and y must be finite numbers")
    keep = xs > 0
    xs, ys = xs[keep], ys[keep]
    distinct = np.unique(xs)
    if distinct.size < 3:
        raise ValueError(f"fitting h(x) = a/x^b + c needs points at >= 3 distinct subset percentages x > 0, "
                         f"got {distinct.size} ({', '.join(f'{v:g}' for v in distinct) or 'none'}; "
                         f"the 0% point is never fitted)")
    y_min, y_max = float(ys.min()), float(ys.max())
    p0 = (-(y_max - y_min), 0.5, y_max)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OptimizeWarning)  # covariance unused (e.g. exactly 3 points)
            params, _ = curve_fit(_h, xs, ys, p0=p0, bounds=([-np.inf, 0.0, -np.inf], [np.inf, max_b, np.inf]),
                                  method="trf", xtol=1e-12, ftol=1e-12, gtol=1e-12, max_nfev=20_000)
    except RuntimeError as err:  # scipy: "Optimal parameters not found: ..."
        raise ValueError(f"fitting h(x) = a/x^b + c did not converge: {err}") from None
    a, b, c = (float(v) for v in params)
    curve = PowerLaw(a, b, c)
    if a >= 0:
        warnings.warn(f"fitted {curve} has a >= 0: the curve does not increase with the subset size "
                      f"(queries on it are not meaningful)", NotIncreasingWarning, stacklevel=2)
    return curve


@dataclass(frozen=True)
class QueryAnswer:
    """One stage-4 query (section 2.5). ``kind`` ``percent_for_metric``: ``asked`` is a metric y
    (%), ``answer`` = h⁻¹(y) in % of the target training data (inf when unreachable);
    ``metric_at_percent``: ``asked`` is x (%), ``answer`` = h(x). ``samples``: the target training
    samples for the percentage (None without a training-set size or when unreachable).
    ``flags``: any of "unreachable", "extrapolation", "not_increasing"."""

    kind: str
    asked: float
    answer: float
    samples: int | None
    flags: tuple[str, ...] = ()

    @property
    def percent(self) -> float:
        return self.answer if self.kind == PERCENT_FOR_METRIC else self.asked

    @property
    def metric(self) -> float:
        return self.asked if self.kind == PERCENT_FOR_METRIC else self.answer

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: an infinite answer is written as null (with the "unreachable" flag)."""
        return {"kind": self.kind, "asked": self.asked,
                "answer": self.answer if math.isfinite(self.answer) else None,
                "samples": self.samples, "flags": list(self.flags)}


def samples_for(percent: float, target_train_size: int | None, *, at_least: bool) -> int | None:
    """x/100 · |D_d| as a whole number: rounded up with ``at_least`` (the samples *required*),
    else rounded like the stage-1 sampler (``round``, robustnlu.efficiency.subsets)."""
    if target_train_size is None or not math.isfinite(percent):
        return None
    exact = round(percent / 100.0 * target_train_size, 6)
    return math.ceil(exact) if at_least else int(round(exact))


def answer_queries(curve: PowerLaw, reach: Sequence[float], at: Sequence[float],
                   fitted_range: tuple[float, float], target_train_size: int | None) -> list[QueryAnswer]:
    """Stage 4 (section 2.5): one `QueryAnswer` per metric target in ``reach`` (h⁻¹) and per
    percentage in ``at`` (h), in that order. ``fitted_range``: the smallest and largest x > 0 the
    curve was fitted on. Flags: "unreachable" (h⁻¹ has no solution, y at/beyond the asymptote;
    answer inf, samples None), "extrapolation" (h⁻¹(y) above 100% or outside the fitted range;
    an asked x outside the fitted range), "not_increasing" (a >= 0) on every answer."""
    lo, hi = float(fitted_range[0]), float(fitted_range[1])
    common = (NOT_INCREASING,) if curve.a >= 0 else ()
    out: list[QueryAnswer] = []
    for y in reach:
        x = curve.inverse(float(y))
        if math.isinf(x):
            out.append(QueryAnswer(PERCENT_FOR_METRIC, float(y), math.inf, None, (UNREACHABLE, *common)))
            continue
        flags = (EXTRAPOLATION,) if (x > 100.0 or x < lo or x > hi) else ()
        out.append(QueryAnswer(PERCENT_FOR_METRIC, float(y), x, samples_for(x, target_train_size, at_least=True),
                               flags + common))
    for x in at:
        x = float(x)
        if not x > 0:
            raise ValueError(f"metric at {x:g}%: h(x) is defined for x > 0 only")
        flags = (EXTRAPOLATION,) if (x < lo or x > hi) else ()
        out.append(QueryAnswer(METRIC_AT_PERCENT, x, float(curve(x)), samples_for(x, target_train_size, at_least=False),
                               flags + common))
    return out


@dataclass(frozen=True)
class Point:
    """One discrete point of a data-efficiency curve: subset %, metric % and the run's seed."""

    percent: float
    metric: float
    seed: int


@dataclass(frozen=True)
class CurveData:
    """What `robustnlu.efficiency.plot.efficiency_png` draws for one model / method: the
    per-seed points, the fit on all points pooled (None when it could not be fitted), the fit of
    each seed with enough points, and the query answers."""

    label: str
    points: tuple[Point, ...]
    fit: PowerLaw | None = None
    seed_fits: Mapping[int, PowerLaw] = field(default_factory=dict)
    answers: tuple[QueryAnswer, ...] = ()

    @property
    def seeds(self) -> list[int]:
        return sorted({p.seed for p in self.points})

    @property
    def fitted_range(self) -> tuple[float, float] | None:
        """(smallest, largest) x > 0 among the points, None if there is none."""
        xs = [p.percent for p in self.points if p.percent > 0]
        return (min(xs), max(xs)) if xs else None
