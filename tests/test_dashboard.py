"""What a sweep shows in W&B (`robustnlu.dashboard`, `robustnlu.report --wandb`), read back from
the real offline run files with `wandb leet inspect`: one CLI sweep of 2 scenarios (slot context
drift, i.i.d. and o.o.d. validation) × 2 methods (ERM, Group-DRO), 2 epochs of the tiny encoder
with ``logger=wandb logger.wandb.log_model=true`` and secrets in the environment, then its report
with ``--wandb``. ~3 min on 2 busy cores, for the whole module."""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import math
from pathlib import Path

import pytest
import torch
import yaml
from seqeval.metrics.sequence_labeling import get_entities

from integration_helpers import FAST, SMALL_DRIFT, jsonl_overrides, run_cli, write_snips_sample_jsonl
from robustnlu.dashboard import error_rows
from robustnlu.module import SLUModule
from robustnlu.rundir import RunDir
from test_cli import read_wandb_records

SECRETS = {"WANDB_API_KEY": "wandbsecret" + "0123456789abcdef0123456789abcdef01",
           "HF_TOKEN": "hf_secretTOKEN0123456789"}
EPOCHS = 2


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
    report = root / "report"
    proc = run_cli([str(sweep), "--out", str(report), "--rounds", "50", "--wandb"], cwd=root,
                   module="robustnlu.report", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = {}
    for folder in sorted((sweep / "wandb").glob("offline-run-*")):
        (run_file,) = folder.glob("*.wandb")
        records = read_wandb_records(run_file)
        runs[next(r["run"]["display_name"] for r in records if "run" in r)] = (folder, records)
    return {"root": root, "sweep": sweep, "report": report, "runs": runs, "report_stdout": proc.stdout}


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
    """4 training runs and one report run per scenario group, each a run file of its own."""
    assert len(jobs(study)) == 4
    assert sorted(study["runs"]) == sorted(
        [f"jsonl-slot_context-full-{v}-{m}-seed0" for v in ("iid", "ood") for m in ("erm", "group_dro")]
        + [f"jsonl-slot_context-full-{v}-report" for v in ("iid", "ood")])
    for validation in ("iid", "ood"):  # the report prints how to upload its runs
        folder, _ = study["runs"][f"jsonl-slot_context-full-{validation}-report"]
        assert f"wandb sync {folder}" in study["report_stdout"]


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


def test_no_secret_reaches_the_sweep_or_its_wandb_files(study):
    files = [p for p in (*study["sweep"].rglob("*"), *study["report"].rglob("*")) if p.is_file()]
    assert any(p.suffix == ".wandb" for p in files)
    for path in files:
        data = path.read_bytes()
        for value in SECRETS.values():
            assert value.encode() not in data, f"{value[:6]}… found in {path}"
