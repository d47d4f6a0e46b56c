"""Robustness evaluation end to end through the real configs: a SNIPS model scored on the
released noisy suite at the end of training, the `python -m robustnlu.evaluate` CLI, and
augmentation recorded in results.json. Scores are checked against an independent
recomputation (plain intent accuracy, seqeval slot F1) from the saved checkpoint."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest
from omegaconf import OmegaConf
from seqeval.metrics import f1_score

from integration_helpers import FAST, REPO, compose_config, file_bytes, jsonl_overrides, run_cli, write_snips_sample_jsonl
from robustnlu.data.readers import load_corpus
from robustnlu.evaluate import UNCASED_NOTE
from robustnlu.noise.casing import tokenizer_ignores_case
from robustnlu.noise.suite import load_noisy_suite
from robustnlu.predictor import Predictor
from robustnlu.runlock import LOCK_NAME
from robustnlu.train import run

SNIPS_NOISE = {"abbreviation", "casing", "misspelling", "morphology", "paraphrase", "synonym"}


@pytest.fixture(scope="module")
def snips_run(tmp_path_factory):
    """A tiny model trained briefly on the full SNIPS splits, scored on the released suite."""
    out = tmp_path_factory.mktemp("run")
    cfg = compose_config([*FAST, "trainer.max_epochs=1", "+trainer.limit_train_batches=30",
                          "suite=[noisy_nlu]", f"paths.cache_dir={out / 'cache'}"], out)
    return out, cfg, run(cfg)


@pytest.fixture(scope="module")
def pairs(snips_run):
    _, cfg, _ = snips_run
    corpus = load_corpus(cfg.dataset, REPO)
    return {p.noise: p for p in load_noisy_suite(cfg.suite.noisy_nlu, REPO, {"snips": corpus})}


def test_training_with_a_suite_writes_the_robustness_record(snips_run, pairs):
    out, _, results = snips_run
    on_disk = json.loads((out / "robustness.json").read_text())
    assert on_disk["suites"]["noisy_nlu"]["scores"] == results["robustness"]["noisy_nlu"]["scores"]
    scores = {s["noise"]: s for s in results["robustness"]["noisy_nlu"]["scores"]}
    assert set(scores) == SNIPS_NOISE and {s["dataset"] for s in scores.values()} == {"snips"}
    for noise, s in scores.items():
        assert s["n"] == len(pairs[noise].control) > 0
    assert "| snips | misspelling |" in (out / "robustness.md").read_text()


@pytest.mark.parametrize("noise", ["misspelling", "casing", "synonym"])
def test_scores_equal_an_independent_recomputation(snips_run, pairs, noise):
    out, _, results = snips_run
    predictor = Predictor.from_checkpoint(out / results["best_checkpoint"])
    score = next(s for s in results["robustness"]["noisy_nlu"]["scores"] if s["noise"] == noise)
    for side in ("control", "treatment"):
        utterances = getattr(pairs[noise], side)
        predicted = predictor.predict_utterances(utterances)
        intent_acc = sum(p[0] == u.intent for p, u in zip(predicted, utterances)) / len(utterances)
        slot_f1 = f1_score([list(u.tags) for u in utterances], [p[1] for p in predicted])
        frame_acc = sum(p[0] == u.intent and p[1] == list(u.tags) for p, u in zip(predicted, utterances)) / len(utterances)
        assert score[side]["intent_acc"] == pytest.approx(intent_acc)
        assert score[side]["slot_f1"] == pytest.approx(slot_f1)
        assert score[side]["frame_acc"] == pytest.approx(frame_acc)


def test_notes_flag_model_selection_controls_and_casing_under_an_uncased_tokenizer(snips_run, pairs):
    out, _, results = snips_run
    scores = {s["noise"]: s for s in results["robustness"]["noisy_nlu"]["scores"]}
    # the released SNIPS allcaps / misspelling rows are SNIPS's dev split = this run's valid split
    n = len(pairs["misspelling"].control)
    assert f"{n} of {n} controls are model-selection (valid) utterances of this run" in scores["misspelling"]["notes"]
    tokenizer = Predictor.from_checkpoint(out / results["best_checkpoint"]).tokenizer
    assert (UNCASED_NOTE in scores["casing"]["notes"]) == tokenizer_ignores_case(tokenizer)
    assert all(UNCASED_NOTE not in s["notes"] for noise, s in scores.items() if noise != "casing")


def test_evaluate_cli_adds_a_synthetic_suite_and_keeps_the_released_one(snips_run, tmp_path):
    out, _, results = snips_run
    ckpt = out / results["best_checkpoint"]
    proc = run_cli([f"ckpt={ckpt}", "suite=[synthetic]", "~suite.synthetic.noise.synonym"], cwd=tmp_path, module="robustnlu.evaluate")
    assert proc.returncode == 0, proc.stderr[-3000:]
    suites = json.loads((out / "robustness.json").read_text())["suites"]
    assert suites["noisy_nlu"]["scores"] == results["robustness"]["noisy_nlu"]["scores"]
    synthetic = {s["noise"]: s for s in suites["synthetic"]["scores"]}
    assert set(synthetic) <= SNIPS_NOISE - {"synonym"} and {"casing", "misspelling"} <= set(synthetic)
    reports = {p["noise"]: p for p in suites["synthetic"]["pairs"]}
    for noise, s in synthetic.items():  # a pair holds exactly the test utterances the transform changed
        assert s["n"] == reports[noise]["stats"]["utterances_changed"]
    assert reports["casing"]["stats"]["utterances_changed"] == 700  # casing at test time: every utterance
    assert "## synthetic" in proc.stdout and "## noisy_nlu" in proc.stdout


def test_evaluate_cli_reports_a_missing_checkpoint_and_leaves_nothing(tmp_path):
    proc = run_cli([f"ckpt={tmp_path / 'nope' / 'checkpoints' / 'best.ckpt'}"], cwd=tmp_path, module="robustnlu.evaluate")
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and "nope" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "outputs").exists()


@pytest.mark.parametrize("mode", ["inplace", "append"])
def test_augmentation_is_recorded_in_results(mode, tmp_path):
    sample = write_snips_sample_jsonl(tmp_path / "data")
    cfg = compose_config([*FAST, *jsonl_overrides(sample), "trainer.max_epochs=1", "augment=misspelling",
                          f"augment.mode={mode}"], tmp_path / "run")
    results = run(cfg)
    record = json.loads((tmp_path / "run" / "results.json").read_text())["augment"]
    assert record == results["augment"]
    assert record["mode"] == mode and record["noise"]["name"] == "misspelling" and record["noise"]["rate"] == 0.2
    assert record["selected"] == 240 and 0 < record["stats"]["utterances_changed"] < 240
    expected_train = 240 + (record["stats"]["utterances_changed"] if mode == "append" else 0)
    assert record["appended"] == expected_train - 240 and results["sizes"]["train"] == expected_train


# ------------------------------------------------------------------ a run directory cut short


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """A tiny model trained one epoch on a small jsonl sample (no suite): its run directory."""
    out = tmp_path_factory.mktemp("small")
    sample = write_snips_sample_jsonl(out / "data", n_train=60, n_eval=20)
    run(compose_config([*FAST, *jsonl_overrides(sample), "trainer.max_epochs=1"], out / "run"))
    return out / "run"


def cut_config_before_seed(path):
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:next(i for i, line in enumerate(lines) if line.startswith("seed:"))]))


ROBUSTNESS = json.dumps({"suites": {"synthetic": {"scores": [], "pairs": [], "checkpoint": "x.ckpt"}}}, indent=2)


@pytest.mark.parametrize("file, damage, problem", [
    ("config.yaml", lambda p: p.write_text(p.read_text()[:-1]),
     lambda p: f":{p.read_text().count(chr(10)) + 1}: no line break at the end of the last line: the file is cut short"),
    ("config.yaml", cut_config_before_seed, lambda p: ": missing key 'seed': not a whole run config (cut short?)"),
    ("config.yaml", lambda p: p.write_text("dataset:\n  name: [jsonl\n"),
     lambda p: ":3: invalid YAML: expected ',' or ']', but got '<stream end>'"),
    ("robustness.json", lambda p: p.write_text(ROBUSTNESS[:ROBUSTNESS.index('"scores"')]),
     lambda p: ":4: invalid JSON: Expecting property name enclosed in double quotes"),
    ("robustness.json", lambda p: p.write_text('{"suites": []}'),
     lambda p: ": not a robustness.json (TypeError: suites must be an object, got list)"),
])
def test_evaluate_into_a_run_with_a_file_cut_short_is_one_error_line_and_writes_nothing(
        small_run, tmp_path, file, damage, problem):
    """Before: a traceback (yaml's, omegaconf's, or json's after the whole suite had been scored)."""
    run_dir = tmp_path / "run"
    shutil.copytree(small_run, run_dir)
    damage(run_dir / file)
    before = file_bytes(run_dir)
    (ckpt,) = (run_dir / "checkpoints").glob("best-*.ckpt")
    proc = run_cli([f"ckpt={ckpt}", "suite=[synthetic]"], cwd=tmp_path, module="robustnlu.evaluate")
    assert proc.returncode == 2
    assert proc.stderr == f"error: {run_dir / file}{problem(run_dir / file)}\n"
    assert file_bytes(run_dir) == before and not (tmp_path / "outputs").exists()


def test_evaluate_on_a_device_that_is_no_device_writes_nothing(small_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(small_run, run_dir)
    before = file_bytes(run_dir)
    (ckpt,) = (run_dir / "checkpoints").glob("best-*.ckpt")
    proc = run_cli([f"ckpt={ckpt}", "suite=[synthetic]", "device=bogus"], cwd=tmp_path, module="robustnlu.evaluate")
    assert proc.returncode == 2
    assert proc.stderr == "error: device='bogus' is not a device: cpu, cuda, cuda:<index> or mps\n"
    assert file_bytes(run_dir) == before and not (tmp_path / "outputs").exists()


def test_evaluate_reads_a_run_whose_data_folder_is_gone_under_paths_data_dir(small_run, tmp_path):
    """A run brought from another installation or machine: its config.yaml names a data folder
    that is not here; its datasets are read at the same place under this command's paths.data_dir."""
    run_dir = tmp_path / "run"
    shutil.copytree(small_run, run_dir)
    config = OmegaConf.load(run_dir / "config.yaml")
    gone, here = tmp_path / "gone", tmp_path / "here"
    (here / "mine").mkdir(parents=True)
    for split in ("train", "valid", "test"):
        shutil.copy(config.dataset[split], here / "mine" / f"{split}.jsonl")
        config.dataset[split] = str(gone / "mine" / f"{split}.jsonl")
    config.paths.data_dir = str(gone)
    OmegaConf.save(config, run_dir / "config.yaml")
    (ckpt,) = (run_dir / "checkpoints").glob("best-*.ckpt")
    proc = run_cli([f"ckpt={ckpt}", "suite=[synthetic]", "~suite.synthetic.noise.synonym", f"paths.data_dir={here}"],
                   cwd=tmp_path, module="robustnlu.evaluate")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"the run read its datasets under {gone}, which no longer exists; reading them under {here}" in proc.stdout + proc.stderr
    assert "synthetic" in json.loads((run_dir / "robustness.json").read_text())["suites"]


def test_evaluate_refuses_a_run_whose_training_still_runs_and_reads_one_whose_process_is_gone(small_run, tmp_path):
    """A run whose run.lock a live process holds (here: this test's process) is still training: its
    checkpoints are half-trained, so evaluate refuses it in one line and writes nothing; a lock left
    by a process that is gone (SIGKILLed) does not stop it."""
    run_dir = tmp_path / "run"
    shutil.copytree(small_run, run_dir)
    lock = run_dir / LOCK_NAME
    lock.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": "2026-01-01T00:00:00"}))
    before = file_bytes(run_dir)
    (ckpt,) = (run_dir / "checkpoints").glob("best-*.ckpt")
    args = [f"ckpt={ckpt}", "suite=[synthetic]", "~suite.synthetic.noise.synonym"]
    proc = run_cli(args, cwd=tmp_path, module="robustnlu.evaluate")
    assert proc.returncode == 2
    assert proc.stderr == (f"error: {run_dir} is still running: process {os.getpid()} on {socket.gethostname()} holds "
                           f"it (since 2026-01-01T00:00:00, {lock}); wait for it to end, or if that process is gone, "
                           "remove the lock file\n")
    assert file_bytes(run_dir) == before and not (tmp_path / "outputs").exists()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    lock.write_text(json.dumps({"pid": gone.pid, "host": socket.gethostname()}))
    proc = run_cli(args, cwd=tmp_path, module="robustnlu.evaluate")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "synthetic" in json.loads((run_dir / "robustness.json").read_text())["suites"]
