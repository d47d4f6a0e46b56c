"""The device check's throughput measurement (`bench.device_check`'s ``throughput`` stage) in parts:
the variants compared, the order their runs take, one timed run, and the summary of a
configuration's runs by a rule, which `bench.gpu_readme` also applies to a committed run.

A fair comparison of variants that share one process: each new tensor shape's first use costs
(cuBLAS's choice of kernels, the caching allocator's cudaMalloc, a synchronisation; autocast's
casts), and dynamic padding gives most batches a shape of their own. So each run first steps once on
each distinct shape of its timed batches (`bench.workload.shape_warmup`), then the plan's warm-up,
then the timed steps; and the variants' order rotates from one repeat to the next, so that no
variant always runs first in a fresh configuration.
"""

from __future__ import annotations

import statistics
from typing import Any

from robustnlu.precision import BF16, FP32

#: (loop, precision, padding): our Lightning loop and the plain PyTorch loop in bf16-mixed and float32,
#: and JointBERT's recipe (float32, padded to `bench.workload.FIXED_PAD_TO`)
VARIANTS = (("lightning", BF16, "dynamic"), ("lightning", FP32, "dynamic"), ("plain", BF16, "dynamic"),
            ("plain", FP32, "dynamic"), ("recipe", FP32, "fixed"))

#: how a variant's figure is made from its repeats: ``median`` (the check's own, its runs warmed on
#: every shape); ``best``, the fastest repeat (timeit's rule: noise only slows a run), for a run
#: without the shape warm-up, whose first variant in each configuration paid every shape's first use
RULES = {"median": statistics.median, "best": max}
RULE_LABELS = {"median": "median of its repeats", "best": "best of its repeats"}


def precision_name(precision: str) -> str:
    return {BF16: "bf16", FP32: "fp32"}[precision]


def variant_name(loop: str, precision: str) -> str:
    return f"{loop}_{precision_name(precision)}"


def run_order(variants, repeats: int) -> list[tuple[int, Any]]:
    """(repeat, variant) in the order they run: repeat r runs ``variants`` rotated left by r."""
    n = len(variants)
    return [(r, variants[(r + i) % n]) for r in range(repeats) for i in range(n)]


def summary_rule(settings: dict[str, Any]) -> str:
    """The rule for a run with these throughput ``settings``: ``best`` where they show no shape warm-up."""
    return "median" if settings.get("shape_warmup") else "best"


def timed_run(loop: str, cfg, module, batches, warmup: int, device, padding: str, precision: str, clip: float):
    """One run of ``loop`` on ``batches``: a step on each distinct shape of the timed batches, the
    first ``warmup`` batches, then the timed ones (`bench.loops`' clock); its `RunTiming`."""
    from bench.loops import run_lightning, run_plain
    from bench.workload import shape_warmup

    run_batches, start = shape_warmup(batches, warmup)
    if loop == "lightning":
        return run_lightning(cfg, module, run_batches, start, device, padding, precision)
    return run_plain(module, run_batches, start, clip, device, padding, precision, recipe=loop == "recipe")


def summarise_config(config: dict[str, Any], ours: str, rule: str) -> None:
    """Per variant its examples/s by ``rule`` over its runs (`RULES`) with their min and max (the
    spread), its MFU by the same rule and its peak memory; the ratios between variants."""
    pick = RULES[rule]
    variants: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(r["variant"] for r in config["runs"]):
        runs = [r for r in config["runs"] if r["variant"] == name]
        speeds = [r["examples_per_s"] for r in runs]
        mfus = [r["mfu"] for r in runs if r["mfu"] is not None]
        memory = [r["peak_memory_bytes"] for r in runs if r["peak_memory_bytes"] is not None]
        variants[name] = {"examples_per_s": pick(speeds), "min_examples_per_s": min(speeds),
                          "max_examples_per_s": max(speeds), "runs": len(runs),
                          "mfu": pick(mfus) if mfus else None,
                          "peak_memory_bytes": max(memory) if memory else None,
                          "final_loss": runs[-1]["final_loss"]}
    config["summary_rule"], config["variants"] = rule, variants

    def ratio(a: str, b: str) -> float | None:
        return variants[a]["examples_per_s"] / variants[b]["examples_per_s"] if a in variants and b in variants else None

    config["ratios"] = {
        "bf16_vs_fp32_lightning": ratio("lightning_bf16", "lightning_fp32"),
        "bf16_vs_fp32_plain": ratio("plain_bf16", "plain_fp32"),
        "lightning_vs_plain_bf16": ratio("lightning_bf16", "plain_bf16"),
        "lightning_vs_plain_fp32": ratio("lightning_fp32", "plain_fp32"),
        "ours_vs_jointbert_recipe": ratio(ours, "recipe_fp32"),
    }


#: the goals for a GPU run, on each throughput configuration: Lightning ÷ plain loop (in our
#: precision) and our loop ÷ JointBERT's recipe, at least
GOALS = {"lightning_vs_plain": 0.9, "ours_vs_jointbert_recipe": 3.0}


def throughput_summary(throughput: dict[str, Any]) -> dict[str, Any]:
    """The headline per summarised configuration (``<arch>_b<batch>``): ours, its spread, MFU and
    memory, the ratios and the goals met."""
    out: dict[str, Any] = {}
    for config in throughput.get("configs", []):
        if "variants" not in config:
            continue
        name = throughput["settings"]["ours"]
        ours = config["variants"].get(name, {})
        measured = {"lightning_vs_plain": config["ratios"][f"lightning_vs_plain_{name.rsplit('_', 1)[1]}"],
                    "ours_vs_jointbert_recipe": config["ratios"]["ours_vs_jointbert_recipe"]}
        out[f"{config['arch']}_b{config['batch_size']}"] = {
            "ours_examples_per_s": ours.get("examples_per_s"), "ours_runs": ours.get("runs"),
            "ours_min_examples_per_s": ours.get("min_examples_per_s"),
            "ours_max_examples_per_s": ours.get("max_examples_per_s"),
            "mfu": ours.get("mfu"), "peak_memory_bytes": ours.get("peak_memory_bytes"), **config["ratios"], **measured,
            "goals_met": {k: None if v is None else v >= GOALS[k] for k, v in measured.items()}}
    return out


def resummarised(throughput: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A committed run's throughput headline recomputed from its runs by the rule its settings call
    for (`summary_rule`), and that rule; ``throughput`` is left as it is."""
    rule = summary_rule(throughput["settings"])
    configs = [dict(c) for c in throughput.get("configs", []) if c.get("runs")]
    for config in configs:
        summarise_config(config, throughput["settings"]["ours"], rule)
    return rule, throughput_summary({**throughput, "configs": configs})
