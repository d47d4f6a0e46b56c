"""``python -m bench [--quick] [--steps N]``: measure, print the table of goals, write
``bench/results/latest.json``. What each number means: see the `bench` package docstring."""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "bench" / "results" / "latest.json"

#: name → (comparison, threshold, what is measured)
GOALS: dict[str, tuple[str, float, str]] = {
    "lightning_overhead": (">=", 0.95, "(a) Lightning / plain loop, ex/s"),
    "dynamic_vs_fixed": (">=", 1.8, "(b) dynamic / fixed-50 padding, ex/s"),
    "peak_rss_gb": ("<", 3.0, "(c) peak RSS of a SNIPS run, GB"),
    "seqdrift_speedup": (">=", 5.0, "(d) SeqDrift SNIPS: dense / scalable time"),
    "seqdrift_memory_ratio": (">=", 10.0, "(e) SeqDrift SNIPS: dense / scalable RSS"),
    "seqdrift_top_s": ("<", 60.0, "(f) SeqDrift TOP-NN scalable, s"),
    "seqdrift_topv2_s": ("<", 180.0, "(g) SeqDrift all TOPv2 (151k), s"),
    "seqdrift_topv2_rss_gb": ("<", 3.0, "(h) SeqDrift all TOPv2, peak RSS GB"),
}
#: (i)-(q): each method's training step time ÷ ERM's, at most (bench.methods)
STEP_TIME_GOALS = {
    "topk": 1.05, "topk_group": 1.05, "group_dro": 1.05, "topic_cvar": 1.05, "nonparam_kl": 1.05,
    "topk_ae_prob": 1.2, "topk_ae_bin": 1.2, "rpdro": 2.2, "pdro": 2.2,
}
GOALS.update({
    f"step_time_{name}": ("<=", goal, f"({chr(ord('i') + n)}) step time {name} / erm")
    for n, (name, goal) in enumerate(STEP_TIME_GOALS.items())
})
#: (r)-(u): bf16-mixed beside float32, where the device supports bf16 (bench.precision)
GOALS.update({
    "bf16_speedup_step": (">=", 1.4, "(r) bf16 / fp32 ex/s, Lightning loop"),
    "bf16_speedup_run": (">=", 1.4, "(s) bf16 / fp32 ex/s, SNIPS training run"),
    "bf16_valid_combined_diff": ("<=", 0.3, "(t) |valid COMBINED bf16 - fp32|, pts"),
    "bf16_test_combined_diff": ("<=", 0.3, "(u) |test COMBINED bf16 - fp32|, pts"),
    "fused_adamw_speedup": (">=", 1.3, "(v) fused / loop AdamW ex/s, Lightning"),
})
#: the parts of the bench, in the order they run (``--skip`` leaves some out)
PARTS = ("speed", "methods", "memory", "precision", "seqdrift")

#: defaults of a full run and of --quick: warm-up and timed steps per speed run, repeats of each
#: run, CLI training steps of the memory run; retries of a disturbed run, allowed while the speed
#: part has run for less than ``retry_budget`` s; the longest wait for a quiet machine before a run
FULL = {"warmup": 3, "steps": 25, "method_steps": 20, "repeats": 3, "rss_steps": 60, "max_retries": 2,
        "retry_budget": 240, "max_wait": 30, "precision_epochs": 1}
QUICK = {"warmup": 2, "steps": 5, "method_steps": 3, "repeats": 2, "rss_steps": 15, "max_retries": 1,
         "retry_budget": 60, "max_wait": 10, "precision_epochs": 1}
RSS_EVAL_BATCHES = 2


def _fmt(x: float | None) -> str:
    return "?" if x is None else f"{x:.2f}"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--quick", action="store_true", help="few steps: a smoke check, not a measurement")
    p.add_argument("--steps", type=int, help="timed (post-warm-up) training steps per speed run")
    p.add_argument("--method-steps", type=int, help="timed lockstep training steps of the methods, (i)-(q)")
    p.add_argument("--warmup", type=int, help="untimed steps at the start of every speed run")
    p.add_argument("--repeats", type=int, help="runs of each loop, alternated (>= 2 for a real measurement)")
    p.add_argument("--rss-steps", type=int, help="training steps of the CLI run whose peak RSS is measured")
    p.add_argument("--max-retries", type=int, help="times a run disturbed by other processes is repeated")
    p.add_argument("--retry-budget", type=float, help="no more retries once the speed runs took this many s")
    p.add_argument("--max-wait", type=float, help="longest wait (s) for a quiet machine before each run")
    p.add_argument("--precision-epochs", type=int,
                   help="epochs of the bf16 and fp32 training runs, (s)-(u) (--quick: of rss-steps batches)")
    p.add_argument("--skip", default="", help=f"comma-separated parts to leave out: {', '.join(PARTS)}")
    p.add_argument("--encoder", default="embedded", choices=("embedded", "tiny"),
                   help="the goals are defined on 'embedded'; 'tiny' only checks that the bench runs")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where the JSON results go")
    args = p.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if min(args.steps, args.method_steps, args.repeats, args.rss_steps, args.precision_epochs) < 1:
        p.error("--steps, --method-steps, --repeats, --rss-steps and --precision-epochs must be >= 1")
    args.skip = {part for part in args.skip.split(",") if part}
    if args.skip - set(PARTS):
        p.error(f"--skip: unknown part(s) {sorted(args.skip - set(PARTS))}; the parts: {', '.join(PARTS)}")
    if min(args.warmup, args.max_retries, args.retry_budget, args.max_wait) < 0:
        p.error("--warmup, --max-retries, --retry-budget and --max-wait must be >= 0")
    return args


def check(name: str, value: float | None) -> str:
    if value is None:
        return "n/a"
    op, threshold, _ = GOALS[name]
    ok = {">=": value >= threshold, "<=": value <= threshold, "<": value < threshold}[op]
    return "PASS" if ok else "MISS"


def measure_speed(args: argparse.Namespace, results: dict[str, Any]) -> None:
    """Comparisons (a) and (b): alternate plain-dynamic, Lightning-dynamic and plain-fixed runs;
    a run disturbed by other processes is repeated (while the retry budget lasts)."""
    import pytorch_lightning as pl
    import torch

    from bench.contention import CONTENTION_CPUS, wait_for_quiet
    from bench.loops import run_lightning, run_plain
    from bench.workload import FIXED_PAD_TO, compose_config, load_workload, token_stats
    from robustnlu.optim.adamw import use_fused
    from robustnlu.precision import BF16, FP32, resolve_precision

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="robustnlu-bench-") as tmp:
        cfg = compose_config(Path(tmp), [f"encoder={args.encoder}"])
        workload = load_workload(cfg, args.warmup + args.steps + 1)
        batches = {"dynamic": workload.batches(None), "fixed": workload.batches(FIXED_PAD_TO)}
        timed = slice(args.warmup, args.warmup + args.steps)
        results["tokens"] = {mode: token_stats(b[timed]) for mode, b in batches.items()}
        results["settings"].update(device=str(device), batch_size=int(cfg.data.batch_size),
                                   fixed_pad_to=FIXED_PAD_TO, seed=int(cfg.seed))
        clip = float(cfg.trainer.gradient_clip_val)

        def one_run(loop: str, padding: str, precision: str, adamw: str):
            pl.seed_everything(cfg.seed, verbose=False)
            module = workload.fresh_module()
            module.hparams.optimizer = {**module.hparams.optimizer, "fused": adamw == "fused"}
            try:
                if loop == "plain":
                    return run_plain(module, batches[padding], args.warmup, clip, device, padding)
                return run_lightning(cfg, module, batches[padding], args.warmup, device, padding, precision)
            finally:
                del module
                gc.collect()

        # (a) and (b) in float32 (the plain loop's precision); (r) Lightning in bf16-mixed beside
        # Lightning in float32, where the device supports bf16 (trainer.precision=auto picks it);
        # (v) Lightning in float32 with PyTorch's per-parameter AdamW loop instead of the fused kernel
        # where the device has one (optimizer.fused=auto picks it)
        bf16 = resolve_precision("auto", device.type) == BF16
        fused = use_fused(workload.initial.model, "auto")
        results["settings"].update(auto_precision=resolve_precision("auto", device.type), fused_adamw=fused)
        default_adamw = "fused" if fused else "loop"
        order = [("plain", "dynamic", FP32, default_adamw), ("lightning", "dynamic", FP32, default_adamw),
                 ("plain", "fixed", FP32, default_adamw)]
        order += [("lightning", "dynamic", BF16, default_adamw)] if bf16 else []
        order += [("lightning", "dynamic", FP32, "loop")] if fused else []
        runs = results["runs"] = []
        waited = 0.0
        for repeat in range(args.repeats):
            for slot, (loop, padding, precision, adamw) in enumerate(order, start=1 + repeat * len(order)):
                for attempt in range(1 + args.max_retries):
                    if device.type == "cpu":
                        waited += wait_for_quiet(args.max_wait)
                    timing = one_run(loop, padding, precision, adamw)
                    disturbed = timing.others_busy is not None and timing.others_busy > CONTENTION_CPUS
                    retry = (disturbed and attempt < args.max_retries
                             and time.perf_counter() - started < args.retry_budget)
                    runs.append({"repeat": repeat, "attempt": attempt, "used": not retry, **timing.to_dict(),
                                 "adamw": adamw, "torch_threads": torch.get_num_threads()})
                    print(f"  [{slot}/{len(order) * args.repeats}] {loop:9s} {padding:7s} {precision:10s} {adamw:5s} "
                          f"{timing.examples_per_s:7.1f} ex/s  ({timing.timed_steps} steps in {timing.seconds:.2f} s;"
                          f" CPUs busy: ours {timing.cpu_busy:.2f}, others {_fmt(timing.others_busy)})"
                          + ("  disturbed: run again" if retry else ""), flush=True)
                    if not retry:
                        break

    if {r["torch_threads"] for r in runs} != {results["settings"]["torch_threads"]}:
        raise RuntimeError(f"the thread count changed between runs: {[r['torch_threads'] for r in runs]}")
    setups = {repr(r["setup"]) for r in runs}
    if len(setups) != 1:
        raise RuntimeError(f"the loops did not train alike (optimizer groups / schedule / clipping): {setups}")
    used = [r for r in runs if r["used"]]

    def median(loop: str, padding: str, precision: str = FP32, adamw: str = default_adamw) -> float:
        return statistics.median(r["examples_per_s"] for r in used
                                 if (r["loop"], r["padding"], r["precision"], r["adamw"]) == (loop, padding, precision, adamw))

    medians = {"plain_dynamic": median("plain", "dynamic"), "lightning_dynamic": median("lightning", "dynamic"),
               "plain_fixed": median("plain", "fixed")}
    if bf16:
        medians["lightning_dynamic_bf16"] = median("lightning", "dynamic", BF16)
        results["ratios"]["bf16_speedup_step"] = medians["lightning_dynamic_bf16"] / medians["lightning_dynamic"]
    if fused:
        medians["lightning_dynamic_loop_adamw"] = median("lightning", "dynamic", FP32, "loop")
        results["ratios"]["fused_adamw_speedup"] = medians["lightning_dynamic"] / medians["lightning_dynamic_loop_adamw"]
    results["examples_per_s_median"] = medians
    others = [r["others_busy"] for r in used if r["others_busy"] is not None]
    results["contention"] = {
        "threshold_cpus": CONTENTION_CPUS,
        "max_others_busy": max(others, default=None),
        "contended": bool(others) and max(others) > CONTENTION_CPUS,
        "runs_repeated": len(runs) - len(used),
        "waited_for_quiet_s": waited,
    }
    results["ratios"]["lightning_overhead"] = medians["lightning_dynamic"] / medians["plain_dynamic"]
    results["ratios"]["dynamic_vs_fixed"] = medians["plain_dynamic"] / medians["plain_fixed"]


def measure_seqdrift(quick: bool, results: dict[str, Any]) -> None:
    """Numbers (d)-(h): SeqDrift clustering, scalable vs the paper's dense recipe (bench.seqdrift)."""
    from bench.seqdrift import measure_seqdrift as measure

    measure(quick, results)


def measure_methods(args: argparse.Namespace, results: dict[str, Any]) -> None:
    """Numbers (i)-(q): each training objective's step time ÷ ERM's (bench.methods)."""
    from bench.methods import measure_methods as measure

    with tempfile.TemporaryDirectory(prefix="robustnlu-bench-") as tmp:
        measure(args, results, Path(tmp))


def measure_precision(args: argparse.Namespace, results: dict[str, Any]) -> None:
    """Numbers (s)-(u): a SNIPS training run in bf16-mixed beside one in float32 (bench.precision)."""
    from bench.precision import compare_precisions
    from robustnlu.precision import BF16, resolve_precision

    if resolve_precision("auto") != BF16:
        print("  no bf16 on this device: trainer.precision=auto trains in float32; (s)-(u) not measured", flush=True)
        return
    compare_precisions(args, results)


def measure_memory(args: argparse.Namespace, results: dict[str, Any]) -> None:
    """Number (c): the peak RSS of a real CLI training run."""
    from bench.memory import peak_rss_of_training_run

    print(f"  CLI training run, {args.rss_steps} steps ...", flush=True)
    memory = peak_rss_of_training_run(args.rss_steps, RSS_EVAL_BATCHES, extra=[f"encoder={args.encoder}"])
    results["memory"] = memory
    if memory["returncode"] != 0 or not memory["results_written"]:
        raise RuntimeError(f"`python -m robustnlu` failed (exit {memory['returncode']}):\n{memory['output_tail']}")
    results["ratios"]["peak_rss_gb"] = memory["peak_rss_gb"]
    print(f"  ... peak RSS {memory['peak_rss_gb']:.2f} GB, {memory['wall_s']:.0f} s", flush=True)


def format_table(results: dict[str, Any]) -> str:
    s = results["settings"]
    ratios = results["ratios"]
    lines = [
        f"robustnlu bench: {s['encoder']} encoder, SNIPS, batch {s.get('batch_size', '?')}, "
        f"{s['steps']} timed steps (+{s['warmup']} warm-up) x {s['repeats']} repeats, "
        f"{s['torch_threads']} torch threads, {s.get('device', '?')}"
        + ("  [--quick: smoke check, not a measurement]" if s["quick"] else ""),
        f"{'':40s} {'measured':>9s}  {'goal':8s} result",
    ]
    for name, (op, threshold, label) in GOALS.items():
        value = ratios.get(name)
        shown = "-" if value is None else f"{value:.3f}" if value < 10 else f"{value:.1f}"
        lines.append(f"{label:40s} {shown:>9s}  {op} {threshold:<5g} {check(name, value)}")
    if m := results.get("examples_per_s_median"):
        t = results["tokens"]
        lines += [
            f"  medians: plain {m['plain_dynamic']:.1f} ex/s, Lightning {m['lightning_dynamic']:.1f} ex/s, "
            f"plain fixed-{s['fixed_pad_to']} {m['plain_fixed']:.1f} ex/s"
            + (f", Lightning bf16-mixed {m['lightning_dynamic_bf16']:.1f} ex/s" if "lightning_dynamic_bf16" in m else "")
            + (f", Lightning with the AdamW loop {m['lightning_dynamic_loop_adamw']:.1f} ex/s"
               if "lightning_dynamic_loop_adamw" in m else "")
            + f" (trainer.precision=auto here: {s['auto_precision']})",
            f"  tokens per batch (padded): dynamic {t['dynamic']['padded_tokens_per_batch']:.0f}, "
            f"fixed {t['fixed']['padded_tokens_per_batch']:.0f}; real (non-pad) "
            f"{t['dynamic']['real_tokens_per_batch']:.0f}; longest sequence {t['dynamic']['max_seq_len']}",
        ]
    if c := results.get("contention"):
        if c["runs_repeated"]:
            lines.append(f"  {c['runs_repeated']} run(s) disturbed by other processes were repeated")
        if c["contended"]:
            lines.append(f"  WARNING: other processes kept up to {c['max_others_busy']:.2f} of {s['cpu_count']} CPUs "
                         "busy during timed runs that count: the speed ratios are unreliable; "
                         "re-run on an idle machine")
    if runs := results.get("precision_runs"):
        lines.append("  SNIPS training runs: " + "; ".join(
            f"{p} {r['examples_per_s']:.1f} ex/s ({r['train_examples']} examples, fit {r['fit_time_s']:.0f} s), "
            f"COMBINED valid {r['combined']['valid']:.2f} test {r['combined']['test']:.2f}" for p, r in runs.items()))
    if mem := results.get("memory"):
        lines.append(f"  CLI run: {s['rss_steps']} training steps, {RSS_EVAL_BATCHES} val/test batches, "
                     f"{mem['wall_s']:.0f} s, exit {mem['returncode']}")
    if "error" in results:
        lines.append(f"  ERROR: {results['error']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = parse_args(argv)

    import torch

    from robustnlu.io import atomic_write_json
    from robustnlu.train import versions

    threads = torch.get_num_threads()
    torch.set_num_threads(threads)  # the default, pinned: every run of every comparison uses it
    started = time.perf_counter()
    results: dict[str, Any] = {
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "settings": {"quick": args.quick, "encoder": args.encoder, "steps": args.steps,
                     "method_steps": args.method_steps, "warmup": args.warmup,
                     "repeats": args.repeats, "rss_steps": args.rss_steps, "torch_threads": threads,
                     "precision_epochs": args.precision_epochs, "skipped": sorted(args.skip),
                     "cpu_count": os.cpu_count(), "load_average_at_start": os.getloadavg()},
        "goals": {name: {"op": op, "threshold": t} for name, (op, t, _) in GOALS.items()},
        "ratios": {},
        "versions": versions(),
    }
    status = 0
    try:
        parts = {"speed": lambda: measure_speed(args, results), "methods": lambda: measure_methods(args, results),
                 "memory": lambda: measure_memory(args, results), "precision": lambda: measure_precision(args, results),
                 "seqdrift": lambda: measure_seqdrift(args.quick, results)}
        for part in PARTS:
            if part not in args.skip:
                parts[part]()
    except Exception as err:  # report what was measured, then fail
        traceback.print_exc()
        results["error"] = f"{type(err).__name__}: {err}"
        status = 1
    results["verdicts"] = {name: check(name, results["ratios"].get(name)) for name in GOALS}
    results["wall_s"] = time.perf_counter() - started
    atomic_write_json(args.out, results)
    print(format_table(results))
    print(f"  total {results['wall_s']:.0f} s; full numbers in {args.out}")
    return status


if __name__ == "__main__":
    sys.exit(main())
