"""The data-efficiency study's outputs (Desai et al. 2021, stages 3-4; `robustnlu.efficiency.study`
builds the study): efficiency.json, efficiency.md with the answers in the paper's words
(`sentence`) and efficiency.png."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from robustnlu.efficiency.curve import EXTRAPOLATION, METRIC_AT_PERCENT, NOT_INCREASING, UNREACHABLE, QueryAnswer
from robustnlu.io import atomic_write_files, json_text
from robustnlu.metrics.registry import in_words
from robustnlu.tables import markdown_lines

if TYPE_CHECKING:  # the study builds what is rendered here and imports this module
    from robustnlu.efficiency.study import EfficiencyCurve, EfficiencyStudy

FILES = ("efficiency.json", "efficiency.md", "efficiency.png")


def _num(v: float) -> str:
    return f"{v:g}" if float(v).is_integer() else f"{v:.2f}"


def sentence(curve: EfficiencyCurve, ans: QueryAnswer, metric: str) -> str:
    """A stage-4 answer in the paper's words (section 2, "Model m requires x% of samples from
    target domain d ... to achieve y% exact match")."""
    name, d = in_words(metric), curve.target
    caveats = []
    if EXTRAPOLATION in ans.flags:
        lo, hi = curve.data.fitted_range or (math.nan, math.nan)
        caveats.append(f"extrapolated beyond the fitted range {_num(lo)}-{_num(hi)}%")
    if NOT_INCREASING in ans.flags:
        caveats.append("the fitted curve does not increase (a >= 0)")
    tail = f" ({'; '.join(caveats)})" if caveats else ""
    if UNREACHABLE in ans.flags:
        c = curve.data.fit.c if curve.data.fit else math.nan
        return (f"Model {curve.label} does not reach {_num(ans.asked)}% {name} on target domain {d} at any "
                f"subset size: the fitted curve levels off at {c:.2f}%{tail}.")
    samples = "" if ans.samples is None else f" ({ans.samples} samples)"
    if ans.kind == METRIC_AT_PERCENT:
        return (f"With {_num(ans.asked)}%{samples} of target domain {d}, model {curve.label} reaches "
                f"{ans.answer:.2f}% {name}{tail}.")
    return (f"Model {curve.label} requires {ans.answer:.2f}%{samples} of target domain {d} to reach "
            f"{_num(ans.asked)}% {name}{tail}.")


def to_json(study: EfficiencyStudy) -> dict[str, Any]:
    out = {"metric": study.metric, "metric_unit": "% (test, x100)", "reach": list(study.reach),
           "at": list(study.at), "function": "h(x) = a / x^b + c, fitted on the points with x > 0", "curves": []}
    for c in study.curves:
        fr = c.data.fitted_range
        out["curves"].append({
            "label": c.label, "target": c.target, "mode": c.mode, "target_train_size": c.target_train_size,
            "dirs": [str(d) for d in c.dirs],
            "points": [{"percent": r.percent, "seed": r.seed, "metric": r.metric, "subset_size": r.subset_size,
                        "run_dir": str(r.path)} for r in c.runs],
            "fit": None if c.data.fit is None else {**c.data.fit.to_dict(), "rmse": c.rmse},
            "fitted_range": list(fr) if fr else None,
            "seed_fits": {str(s): f.to_dict() for s, f in sorted(c.data.seed_fits.items())},
            "queries": [{**a.to_dict(), "sentence": sentence(c, a, study.metric)} for a in c.data.answers],
            "forgetting": {_num(p): v for p, v in c.forgetting.items()},
            "notes": list(c.notes),
        })
    return out


def to_markdown(study: EfficiencyStudy) -> str:
    name = in_words(study.metric)
    lines = ["# Data-efficiency study", "",
             "Protocol of Desai et al. (2021), stages 3-4: h(x) = a / x^b + c fitted with "
             "`scipy.optimize.curve_fit` on the (target subset %, test "
             f"{name} %) points with x > 0, all seeds pooled (the 0% point is shown, not fitted); "
             "x = h⁻¹(y) = ((y − c)/a)^(−1/b). Samples = x/100 · |target train|.", ""]
    for c in study.curves:
        lines += [f"## {c.label}", "",
                  f"Target domain **{c.target}**, mode `{c.mode}`, |target train| = "
                  f"{c.target_train_size if c.target_train_size is not None else 'unknown'}, "
                  f"{len(c.runs)} runs from {', '.join(f'`{d}`' for d in c.dirs)}.", ""]
        seeds = c.data.seeds
        cell = {(r.percent, r.seed): r.metric for r in c.runs}
        percents = sorted({r.percent for r in c.runs})
        rows = []
        for p in percents:
            vals = [cell.get((p, s)) for s in seeds]
            got = [v for v in vals if v is not None]
            rows.append([_num(p), *["" if v is None else f"{v:.2f}" for v in vals], f"{np.mean(got):.2f}"])
        lines += markdown_lines(["subset %", *[f"seed {s}" for s in seeds], "mean"], rows, align=":")
        lines.append("")
        if c.data.fit is not None:
            f = c.data.fit
            lines.append(f"Pooled fit: h(x) = {f.a:.4f} / x^{f.b:.4f} + {f.c:.4f} (RMSE {c.rmse:.2f} points, "
                         f"fitted on {_num(c.data.fitted_range[0])}-{_num(c.data.fitted_range[1])}%).")
        else:
            lines.append("Pooled fit: none.")
        for s, f in sorted(c.data.seed_fits.items()):
            lines.append(f"- seed {s}: h(x) = {f.a:.4f} / x^{f.b:.4f} + {f.c:.4f}")
        lines.append("")
        if c.data.answers:
            lines += [f"- {sentence(c, a, study.metric)}" for a in c.data.answers] + [""]
        if c.forgetting:
            keys = sorted({k for v in c.forgetting.values() for k in v})
            lines += ["Forgetting on the source domains (mean drop over seeds):", ""]
            lines += markdown_lines(["subset %", *keys], [[_num(p), *[f"{v[k]:.4g}" if k in v else "" for k in keys]]
                                                          for p, v in c.forgetting.items()], align=":")
            lines.append("")
        if c.notes:
            lines += ["Notes:", ""] + [f"- {n}" for n in c.notes] + [""]
    lines += ["![data-efficiency curves](efficiency.png)", ""]
    return "\n".join(lines)


def write_efficiency(study: EfficiencyStudy, out_dir: Path) -> list[Path]:
    """efficiency.json, efficiency.md and efficiency.png under ``out_dir``, rendered first, then
    written as one step (`atomic_write_files`). Returns the paths (`FILES`)."""
    from robustnlu.efficiency.plot import efficiency_png

    out_dir = Path(out_dir)
    payload, md = to_json(study), to_markdown(study)
    label = f"test {in_words(study.metric)} (%)"
    targets = sorted({c.target for c in study.curves})
    png = efficiency_png([c.data for c in study.curves], label, title=f"target domain: {', '.join(targets)}")
    return atomic_write_files({out_dir / "efficiency.json": json_text(payload), out_dir / "efficiency.md": md,
                               out_dir / "efficiency.png": png})
