"""What a sweep shows in W&B (`robustnlu.dashboard`, `robustnlu.report --wandb`), read back from
the real offline run files with `wandb leet inspect`: one CLI sweep of 2 scenarios (slot context
drift, i.i.d. and o.o.d. validation) × 2 methods (ERM, Group-DRO), 2 epochs of the tiny encoder
with ``logger=wandb logger.wandb.log_model=true`` and secrets in the environment, then its report
with ``--wandb``; a sweep of two jobs that differ only in the batch size, killed in its first
job and relaunched; and a sweep's job killed, then resumed as a single run, in its sweep and in
a copy of the sweep elsewhere. ~5 min on 2 busy cores, for the whole module."""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from seqeval.metrics.sequence_labeling import get_entities

from integration_helpers import (FAST, SMALL_DRIFT, cli_env, compose_config, jsonl_overrides, run_cli,
                                 write_snips_sample_jsonl)
from robustnlu.analysis.runs import Run
from robustnlu.dashboard import error_rows
from robustnlu.module import SLUModule
from robustnlu.report import wandb_folder
from robustnlu.resume import ResumePoint
from robustnlu.rundir import RunDir
from robustnlu.train import logger_options
from test_cli import read_wandb_records

SECRETS = {"WANDB_API_KEY": "wandbsecret" + "0123456789abcdef0123456789abcdef01",
           "HF_TOKEN": "hf_secretTOKEN0123456789"}
EPOCHS = 2
#: the links wandb.init points at its run in the folder it writes into
LATEST_LINKS = ("latest-run", "debug.log", "debug-internal.log")
STEPS_PER_EPOCH = 15  # write_snips_sample_jsonl's 240 training utterances in FAST's batches of 16


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("dashboard")
    data = write_snips_sample_jsonl(root / "data", n_train=600, n_eval=60)
    env = {**SECRETS, "WANDB_MODE": "offline",
           **{f"WANDB_{k}_DIR": str(root / "wandb-home" / k.lower()) for k in ("DATA", "CACHE", "CONFIG")}}
    sweep = root / "sweep"
    proc = run_cli(["-m", *FAST, *jsonl_overrides(data), *SMALL_DRIFT, f"trainer.max_epochs={EPOCHS}",
                    "data.batch_size=64", "trainer.log_every_n_steps=2", "validation=iid,ood", "method=erm,group_dro",
                    "logger=wandb", "logger.wandb.log_model=true", "keep_last_checkpoint=true",
                    f"paths.cache_dir={root / 'cache'}", f"hydra.sweep.dir={sweep}"], cwd=root, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    links = {name: os.readlink(sweep / "wandb" / name) for name in LATEST_LINKS}
    report = root / "report"
    proc = run_cli([str(sweep), "--out", str(report), "--rounds", "50", "--wandb"], cwd=root,
                   module="robustnlu.report", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = {}
    for folder in sorted((sweep / "wandb").glob("offline-run-*")):
        (run_file,) = folder.glob("*.wandb")
        records = read_wandb_records(run_file)
        runs[next(r["run"]["display_name"] for r in records if "run" in r)] = (folder, records)
    return {"root": root, "sweep": sweep, "report": report, "runs": runs, "report_stdout": proc.stdout,
            "links_before_report": links}


def jobs(study) -> list[RunDir]:
    return [RunDir(p.parent) for p in sorted(study["sweep"].glob("*/results.json"))]


def record_of(study, job: RunDir):
    return study["runs"][job.wandb_record()["name"]]


def config(records) -> dict:
    """The run's config: what wandb.init got (in the run record) and what was added later."""
    out = {}
    for r in records:
        out.update((r["run"] if "run" in r else r).get("config", {}).get("update", {}))
    return out


def summary(records) -> dict:
    out = {}
    for r in records:
        out.update(r.get("summary", {}).get("update", {}))
    return out


def history(records) -> list[dict]:
    return [r["history"]["item"] for r in records if "history" in r]


def logged_table(folder: Path, records, key: str) -> dict:
    (item,) = [h for h in history(records) if f"{key}.path" in h]
    return json.loads((folder / "files" / item[f"{key}.path"]).read_text())


def test_every_run_of_the_sweep_and_its_report_share_one_wandb_folder(study):
    """4 training runs, named as their jobs' folders, and one report run per scenario group, each
    a run file of its own."""
    assert len(jobs(study)) == 4
    assert sorted(study["runs"]) == sorted(
        [job.path.name for job in jobs(study)] + [f"jsonl-slot_context-full-{v}-report" for v in ("iid", "ood")])
    assert sorted(job.path.name.rsplit("-", 1)[0] for job in jobs(study)) == sorted(
        f"jsonl-slot_context-full-{v}-{m}-seed0" for v in ("iid", "ood") for m in ("erm", "group_dro"))
    for validation in ("iid", "ood"):  # the report prints how to upload its runs
        folder, _ = study["runs"][f"jsonl-slot_context-full-{validation}-report"]
        assert f"wandb sync {folder}" in study["report_stdout"]


def test_the_report_leaves_the_folders_links_to_the_last_training_run(study):
    """wandb.init points ``latest-run`` and the debug logs of the folder it writes into at its own
    run; the report's runs, written after the sweep, leave them at the sweep's last job."""
    folder = study["sweep"] / "wandb"
    trained = {Path(job.wandb_record()["dir"]).name for job in jobs(study)}
    assert Path(study["links_before_report"]["latest-run"]).name in trained
    for name in LATEST_LINKS:
        assert os.readlink(folder / name) == study["links_before_report"][name], name
        assert (folder / name).resolve().is_relative_to((folder / study["links_before_report"]["latest-run"]).resolve())


def test_the_config_holds_the_studys_axes_as_plain_keys(study):
    for job in jobs(study):
        _, records = record_of(study, job)
        logged, results = config(records), job.results()
        stored = yaml.safe_load(job.config_file.read_text())
        for dotted in ("dataset.name", "drift.kind", "drift.partial", "validation.kind", "method.name", "seed",
                       "optimizer.lr", "data.batch_size", "trainer.max_epochs", "scenario"):
            node = stored
            for part in dotted.split("."):
                node = node[part]
            assert logged[dotted] == node, dotted
        assert logged["trainer.precision"] == results["precision"] == "32-true"
        assert logged["split.key"] == results["drift"]["split_key"]
        assert logged["split.clustering_sha256"] == results["drift"]["clustering"]["sha256"]
        module = SLUModule.from_checkpoint(job.best_checkpoint())
        assert logged["model/params/total"] == sum(p.numel() for p in module.parameters())
        assert not {"vocab", "encoder_config", "method"} & set(logged)  # the module's nested pieces: not logged


def test_the_summary_holds_the_drop_and_the_worst_cluster_of_results_json(study):
    for job in jobs(study):
        _, records = record_of(study, job)
        logged, results = summary(records), job.results()
        valid, test = results["metrics"]["valid"], results["metrics"]["test"]
        for key in ("intent_acc", "slot_f1", "combined"):
            assert logged[f"drop/{key}"] == results["measures"][f"drop/{key}"]
            assert logged[f"drop/{key}"] == pytest.approx(valid[key] - test[key], abs=1e-12)
        big = [test[f"group/{g}/combined"] for g in range(10) if test.get(f"group/{g}/n", 0) >= 10]
        assert logged["test/worst_group_min10/combined"] == pytest.approx(min(big))
        assert logged["final"]["test"]["worst_group/combined_id"] == test["worst_group/combined_id"]
        assert not any(k.endswith("combined_id") for h in history(records) for k in h)  # no curve of an id


def test_the_example_counts_are_in_the_summary_and_no_curve(study):
    """A split's ``n`` is its number of utterances: the summary's ``final`` and results.json hold
    it; neither the W&B history nor csv/metrics.csv logs it with every evaluation."""
    for job in jobs(study):
        _, records = record_of(study, job)
        logged, results = summary(records), job.results()
        for split in ("valid", "test"):
            assert logged["final"][split]["n"] == results["metrics"][split]["n"] == len(job.predictions(split)) > 0
        curves = {k for h in history(records) for k in h}
        with open(job.metrics_csv, newline="") as handle:
            columns = set(next(csv.reader(handle)))
        for logged_keys in (curves, columns, set(logged)):
            assert "valid/combined" in logged_keys
            assert not {"valid/n", "test/n"} & logged_keys


def test_the_curves_have_one_valid_point_per_epoch_and_the_best_checkpoint_is_the_summary(study):
    """The valid curve (W&B history and csv/metrics.csv) has one point per trained epoch, at epochs
    0 .. EPOCHS - 1: the best checkpoint's evaluation after training is no point one epoch past the
    last. Its valid point is the curve's at its own epoch, and its valid and test metrics
    (results.json) are the summary's ``valid/*`` and ``test/*``, the runs table's columns."""
    for job in jobs(study):
        _, records = record_of(study, job)
        results = job.results()
        points = [(h["epoch"], h["valid/combined"]) for h in history(records) if "valid/combined" in h]
        assert [epoch for epoch, _ in points] == list(range(EPOCHS))
        assert not any("test/combined" in h for h in history(records))
        with open(job.metrics_csv, newline="") as handle:
            rows = [r for r in csv.DictReader(handle) if r.get("valid/combined")]
        assert [int(r["epoch"]) for r in rows] == list(range(EPOCHS))
        best = int(Path(results["best_checkpoint"]).stem.removeprefix("best-epoch"))
        assert points[best][1] == pytest.approx(results["metrics"]["valid"]["combined"], rel=1e-6)
        logged = summary(records)
        for split in ("valid", "test"):
            for key in ("intent_acc", "slot_f1", "combined"):
                assert logged[f"{split}/{key}"] == pytest.approx(results["metrics"][split][key], rel=1e-6)


def drift_clusters(study, job: RunDir) -> set[int]:
    split = json.loads((study["root"] / "cache" / "seqdrift" / job.results()["drift"]["split_key"] / "split.json")
                       .read_text())
    return {c for k in ("test_clusters", "valid_clusters", "held_out_ood_clusters") for c in split["info"][k]}


def test_the_cluster_tables_hold_the_per_cluster_metrics(study):
    for job in jobs(study):
        folder, records = record_of(study, job)
        drifted = drift_clusters(study, job)
        for split in ("valid", "test"):
            metrics = job.results()["metrics"][split]
            table = logged_table(folder, records, f"clusters/{split}")
            assert table["columns"] == ["cluster", "size", "drift", "intent_acc", "slot_f1", "combined"]
            ids = sorted({int(k.split("/")[1]) for k in metrics if k.startswith("group/")})
            assert [row[0] for row in table["data"]] == ids and ids
            for cluster, size, drift, *values in table["data"]:
                assert size == metrics[f"group/{cluster}/n"] and drift == (cluster in drifted)
                assert values == [metrics[f"group/{cluster}/{k}"] for k in ("intent_acc", "slot_f1", "combined")]


def spans(tokens, tags) -> str:
    return "; ".join(f"{t}={' '.join(tokens[s:e + 1])}" for t, s, e in get_entities(tags))


def test_the_errors_table_holds_the_wrong_test_predictions(study):
    job = jobs(study)[0]
    folder, records = record_of(study, job)
    predictions = job.predictions("test")
    wrong = [p for p in predictions if p["pred_intent"] != p["gold_intent"] or p["pred_tags"] != p["gold_tags"]]
    table = logged_table(folder, records, "errors/test")
    assert len(table["data"]) == len(wrong) > 0
    for row, p in zip(table["data"], wrong, strict=True):
        assert row == [p["uid"], p["group"], " ".join(p["tokens"]), p["gold_intent"], p["pred_intent"],
                       spans(p["tokens"], p["gold_tags"]), spans(p["tokens"], p["pred_tags"])]
    assert [r[0] for r in error_rows(predictions, limit=3)] == [p["uid"] for p in wrong[:3]]  # bounded


def test_group_dro_logs_its_weights_entropy_each_epoch_and_erm_nothing(study):
    for job in jobs(study):
        _, records = record_of(study, job)
        state = [h for h in history(records) if any(k.startswith("objective/") for k in h)]
        if job.results()["method"] == "erm":
            assert not state
            continue
        assert len(state) == EPOCHS
        last = torch.load(job.last_checkpoint, map_location="cpu", weights_only=True)["state_dict"]
        for task in ("slot", "intent"):
            q = last[f"objective.log_q_{task}"].double().exp()
            assert 0 < state[-1][f"objective/q_{task}/entropy"] <= math.log(q.numel()) + 1e-6
            assert state[-1][f"objective/q_{task}/entropy"] == pytest.approx(-(q * q.log()).sum().item(), rel=1e-5)
            assert state[-1][f"objective/q_{task}/max"] == pytest.approx(q.max().item(), rel=1e-5)


def test_the_learning_rate_is_a_curve(study):
    for job in jobs(study):
        _, records = record_of(study, job)
        rates = [h["lr-AdamW/pg1"] for h in history(records) if "lr-AdamW/pg1" in h]
        lr = job.results()["config"]["optimizer"]["lr"]
        assert len(rates) >= 2 and all(0 < r <= lr for r in rates)
        assert rates == sorted(rates, reverse=True)  # linear decay


def test_log_model_keeps_the_best_checkpoint_as_an_artifact(study):
    for job in jobs(study):
        _, records = record_of(study, job)
        (model,) = [r["artifact"] for r in records if "artifact" in r and r["artifact"]["type"] == "model"]
        (entry,) = model["manifest"]["contents"]
        data = job.best_checkpoint().read_bytes()
        assert int(entry["size"]) == len(data)
        assert entry["digest"] == base64.b64encode(hashlib.md5(data).digest()).decode()


def test_the_report_runs_sit_in_their_runs_groups_and_name_them(study):
    with open(study["report"] / "table10_metrics.csv", newline="") as handle:
        table10 = list(csv.DictReader(handle))
    for validation in ("iid", "ood"):
        group = f"jsonl-slot_context-full-{validation}"
        folder, records = study["runs"][f"{group}-report"]
        run = next(r["run"] for r in records if "run" in r)
        members = [j for j in jobs(study) if j.results()["drift"]["validation"] == validation]
        trained = [next(r["run"] for r in record_of(study, j)[1] if "run" in r) for j in members]
        assert run["job_type"] == "report" and {run["run_group"]} == {t["run_group"] for t in trained} == {group}
        assert {run["project"]} == {t["project"] for t in trained}
        logged = config(records)
        assert sorted(logged["runs"]) == sorted(j.wandb_record()["name"] for j in members)
        assert logged["validation.kind"] == validation and logged["scenario"] == group
        assert logged["drift.kind"] == "slot_context" and logged["drift.partial"] is False
        rows = logged_table(folder, records, "table10_metrics")
        mine = [r for r in table10 if r["validation"] == validation]
        assert [row[4] for row in rows["data"]] == [r["method"] for r in mine] == ["erm", "group_dro"]
        counts = [row[5] for row in rows["data"]]  # n_models: a count in the dashboard too, not 1.0
        assert counts == [int(r["n_models"]) for r in mine] == [1, 1] and all(type(n) is int for n in counts)
        means = [row[6] for row in rows["data"]]
        assert means == [float(r[rows["columns"][6]]) for r in mine] and all(type(m) is float for m in means)


def test_no_secret_reaches_the_sweep_or_its_wandb_files(study):
    files = [p for p in (*study["sweep"].rglob("*"), *study["report"].rglob("*")) if p.is_file()]
    assert any(p.suffix == ".wandb" for p in files)
    for path in files:
        data = path.read_bytes()
        for value in SECRETS.values():
            assert value.encode() not in data, f"{value[:6]}… found in {path}"


@pytest.fixture(scope="module")
def killed_sweep(tmp_path_factory):
    """A sweep of two ERM jobs that differ only in the batch size (16, then 64), SIGKILLed while
    its first job trains, after a mid-epoch checkpoint; then `python -m robustnlu.sweep relaunch`
    (the first job resumed, the second trained)."""
    root = tmp_path_factory.mktemp("killed")
    data = write_snips_sample_jsonl(root / "data")
    env = {"WANDB_MODE": "offline", **{f"WANDB_{k}_DIR": str(root / "wandb-home" / k.lower()) for k in ("DATA", "CACHE", "CONFIG")}}
    sweep = root / "sweep"
    log = (root / "driver.log").open("w")
    driver = subprocess.Popen(
        [sys.executable, "-m", "robustnlu", "-m", *FAST, *jsonl_overrides(data), "trainer.max_epochs=2",
         "data.batch_size=16,64", "logger=wandb", "callbacks.last_checkpoint.every_n_train_steps=2",
         f"hydra.sweep.dir={sweep}"], cwd=root, env=cli_env(**env), stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 300
    while time.time() < deadline and driver.poll() is None:
        if any(not (c.parents[1] / "results.json").exists() for c in sweep.glob("*/checkpoints/last.ckpt")):
            driver.send_signal(signal.SIGKILL)
            break
        time.sleep(0.05)
    driver.wait(timeout=60)
    assert driver.returncode == -signal.SIGKILL, (root / "driver.log").read_text()[-3000:]
    killed = RunDir(next(p.parents[1] for p in sweep.glob("*/checkpoints/last.ckpt")))
    killed_run = killed.wandb_record()
    proc = run_cli(["relaunch", str(sweep)], cwd=root, module="robustnlu.sweep", env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {"jobs": [RunDir(p.parent) for p in sorted(sweep.glob("*/results.json"))], "killed": killed,
            "killed_run": killed_run, "folders": sorted((sweep / "wandb").glob("offline-run-*"))}


def run_record(folder: Path) -> dict:
    """The run record of a finished W&B run's file."""
    return next(r["run"] for r in read_wandb_records(next(folder.glob("*.wandb"))) if "run" in r)


def test_jobs_that_differ_in_a_hyper_parameter_only_have_their_folders_names(killed_sweep):
    done = killed_sweep["jobs"]
    assert sorted(j.results()["config"]["data"]["batch_size"] for j in done) == [16, 64]
    names = {j.path.name for j in done}
    assert len(names) == 2 and {n.rsplit("-", 1)[0] for n in names} == {"jsonl-erm-seed0"}  # told apart by the hash
    assert killed_sweep["killed_run"]["name"] == killed_sweep["killed"].path.name  # as it was killed
    for job in done:
        record = job.wandb_record()
        assert record["name"] == job.path.name == run_record(Path(record["dir"]))["display_name"]


def test_a_relaunched_job_goes_on_in_its_wandb_run(killed_sweep):
    """The killed job's W&B run (its id in wandb.json) in two run folders, the killed part and the
    resumed one, under the job's name; the resumed part logs the final evaluation. (The killed
    part's file may hold no record: W&B had not written them out when the process was killed.)"""
    killed, before = killed_sweep["killed"], killed_sweep["killed_run"]
    assert killed.results()["resumed_from"]["global_step"] > 0
    after = killed.wandb_record()
    parts = [f for f in killed_sweep["folders"] if f.name.endswith(f"-{before['id']}")]
    assert len(parts) == 2 and len(killed_sweep["folders"]) == 3  # and the other job's
    assert [Path(before["dir"]).name, Path(after["dir"]).name] == [p.name for p in parts]
    resumed = run_record(parts[1])
    assert after["id"] == resumed["run_id"] == before["id"]
    assert after["name"] == resumed["display_name"] == killed.path.name
    records = read_wandb_records(next(parts[1].glob("*.wandb")))
    assert summary(records)["final"]["test"]["combined"] == pytest.approx(killed.results()["metrics"]["test"]["combined"])


def test_a_resumed_run_keeps_its_wandb_runs_id_and_name(tmp_path):
    """The W&B run a run continues is the one its wandb.json records, under the name it has there
    (a sweep's job resumed as a single run would otherwise be renamed to the single run's name)."""
    cfg = compose_config([*FAST, "logger=wandb"], tmp_path)
    recorded = {"id": "k1ll3d00", "name": "jsonl-erm-seed0-0123abcd", "dir": str(tmp_path / "wandb" / "offline-run-x")}
    (tmp_path / "wandb.json").write_text(json.dumps(recorded))
    resumed = logger_options(cfg.logger.wandb, tmp_path, ResumePoint(checkpoint=tmp_path / "checkpoints" / "last.ckpt"))
    assert resumed == {"save_dir": str(tmp_path), "id": "k1ll3d00", "name": "jsonl-erm-seed0-0123abcd", "resume": "allow"}
    assert logger_options(cfg.logger.wandb, tmp_path, ResumePoint()) == {"save_dir": str(tmp_path)}  # a new W&B run


def resumable(run_dir: Path, then: Path, wandb_dir: Path) -> Path:
    """A killed run in ``run_dir`` whose wandb.json its first launch in ``then`` wrote, naming its
    W&B run's folder ``wandb_dir``."""
    run_dir.mkdir(parents=True)
    record = {"id": "k1ll3d00", "name": "n", "dir": str(wandb_dir), "run_dir": str(then)}
    (run_dir / "wandb.json").write_text(json.dumps(record))
    return run_dir


@pytest.mark.parametrize("then, recorded, now, save_dir", [
    ("s/job", "s/wandb/offline-run-x", "s/job", "s"),  # a sweep's job resumed as a single run: its sweep's
    ("old/s/job", "old/s/wandb/offline-run-x", "new/s/job", "new/s"),  # the sweep moved: the new place
    ("s/job", "s/wandb/offline-run-x", "copy/job", "copy"),  # copied: the copy's, the original's left alone
    ("old/run", "old/run/wandb/offline-run-x", "new/run", "new/run"),  # a single run moved
    ("s/job", "w/wandb/offline-run-x", "s/job", "w"),  # its own folder (logger.wandb.save_dir=w): as it was
])
def test_a_resumed_run_writes_its_wandb_files_where_its_first_launch_did(tmp_path, then, recorded, now, save_dir):
    cfg = compose_config([*FAST, "logger=wandb"], tmp_path)
    run_dir = resumable(tmp_path / now, tmp_path / then, tmp_path / recorded)
    resume = ResumePoint(checkpoint=run_dir / "checkpoints" / "last.ckpt")
    assert logger_options(cfg.logger.wandb, run_dir, resume)["save_dir"] == str(tmp_path / save_dir)
    cfg.logger.wandb.save_dir = str(tmp_path / "mine")  # given on resume: the logger takes it from the config
    assert "save_dir" not in logger_options(cfg.logger.wandb, run_dir, resume)


def test_the_report_of_a_moved_sweep_logs_into_the_sweeps_wandb_folder_where_it_is_now(tmp_path):
    """A sweep of two jobs, moved after training: the report's W&B runs go into its ``wandb/`` at its
    new place (not ``--out``, as when the recorded folder was taken as it is and found gone); a
    sweep whose jobs logged into two folders still reports into ``out``."""
    runs = [Run(resumable(tmp_path / "new/s" / job, tmp_path / "old/s" / job, tmp_path / "old/s/wandb" / f"offline-run-{job}"), {})
            for job in ("job1", "job2")]
    (tmp_path / "new/s/wandb").mkdir()
    assert wandb_folder(runs, tmp_path / "out") == tmp_path / "new/s"
    apart = resumable(tmp_path / "new/t/job3", tmp_path / "old/t/job3", tmp_path / "old/t/wandb/offline-run-job3")
    assert wandb_folder([*runs, Run(apart, {})], tmp_path / "out") == tmp_path / "out"


@pytest.fixture(scope="module")
def resumed_job(tmp_path_factory):
    """A sweep of one job SIGKILLed in its second epoch (its last.ckpt: the first epoch's end) and
    copied; the job resumed as a single run (``hydra.run.dir=<sweep>/<job>``) in the sweep, which
    is then moved away (the folder the copy's wandb.json records is gone), and in the copy."""
    root = tmp_path_factory.mktemp("resumed")
    data = write_snips_sample_jsonl(root / "data")
    env = {"WANDB_MODE": "offline", **{f"WANDB_{k}_DIR": str(root / "wandb-home" / k.lower()) for k in ("DATA", "CACHE", "CONFIG")}}
    common = [*FAST, *jsonl_overrides(data), "trainer.max_epochs=2", "logger=wandb"]
    sweep, copy, moved = root / "sweep", root / "copy", root / "moved"
    kill = ["+callbacks.kill._target_=integration_helpers.KillAtStep", f"+callbacks.kill.step={STEPS_PER_EPOCH + 1}"]
    killed = run_cli(["-m", *common, *kill, f"hydra.sweep.dir={sweep}"], cwd=root, env=env)
    assert killed.returncode == -signal.SIGKILL, killed.stdout[-3000:] + killed.stderr[-3000:]
    (job,) = [p.parents[1].name for p in sweep.glob("*/checkpoints/last.ckpt")]
    first = RunDir(sweep / job).wandb_record()
    shutil.copytree(sweep, copy, symlinks=True)
    for where in (sweep, copy):
        proc = run_cli([*common, "resume=true", "+resume_override=[callbacks.kill]", f"hydra.run.dir={where / job}"],
                       cwd=root, env=env)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        if where == sweep:
            sweep.rename(moved)
    return {"first": first, "job": job, "sweeps": {"in place": moved, "copied, the original moved": copy},
            "gone": sweep}


@pytest.mark.parametrize("where", ["in place", "copied, the original moved"])
def test_a_sweeps_job_resumed_as_a_single_run_goes_on_in_the_sweeps_wandb_folder(resumed_job, where):
    """The resumed part of the job's W&B run (the id in wandb.json, the job's name) is a second run
    folder in ``<sweep>/wandb/``, beside the killed part, none in the job's folder; a copy's goes
    into the copy's, not into the original's recorded folder (moved away: it is not made again)."""
    sweep, first = resumed_job["sweeps"][where], resumed_job["first"]
    job = RunDir(sweep / resumed_job["job"])
    parts = sorted((sweep / "wandb").glob("offline-run-*"))
    assert [p.name for p in parts[:1]] == [Path(first["dir"]).name] and len(parts) == 2
    assert Path(job.wandb_record()["dir"]).name == parts[1].name
    resumed = run_record(parts[1])
    assert (resumed["run_id"], resumed["display_name"]) == (first["id"], job.path.name)
    assert job.results()["resumed_from"]["global_step"] == STEPS_PER_EPOCH
    assert not (job.path / "wandb").exists() and not resumed_job["gone"].exists()
