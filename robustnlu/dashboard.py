"""What a training run gives its loggers for a dashboard (W&B with ``logger=wandb``), so that
a sweep can be filtered, pivoted and compared by the study's axes.

- `run_config`, logged to every logger before training (W&B: the run's config; CSV:
  ``csv/hparams.yaml``): the whole resolved config flattened to dotted keys (``dataset.name``,
  ``drift.kind``, ``drift.partial``, ``validation.kind``, ``method.name``, ``method.k``,
  ``seed``, ``optimizer.lr``, ``data.batch_size``, ``scenario``, ...), as lightning-hydra-template's
  ``log_hyperparameters`` does, with ``trainer.precision`` as trained (``auto`` resolved), the
  split's key and clustering checksum (``split.key``, ``split.clustering_sha256``) and the
  parameter counts (``model/params/{total,trainable,non_trainable,objective}``). It holds the
  config only: tokens and keys live in the environment, never in it.
- `log_results`, at the end, to W&B: the summary (the final metrics under ``final``, the split
  sizes and statistics, and the robustness measures ``drop/<m>`` and
  ``<split>/worst_group_min10/<m>`` of `robustnlu.metrics.registry.run_measures`) and two kinds
  of tables: ``clusters/<split>``, one row per SeqDrift cluster of valid and of test (id, size,
  whether it is a drift cluster, intent acc, slot F1, COMBINED), and ``errors/test``, the test
  utterances with a wrong intent or tag (at most `ERROR_ROWS`, in uid order).

The history holds what changes during training: the losses and validation metrics
(`robustnlu.module.SLUModule`; a split's example count ``n`` and worst cluster's id are no
curves, `robustnlu.module.NOT_CURVES`: the summary's ``final`` holds them), the objective's state
(``objective/*``, `robustnlu.robust.base.RobustObjective.logged_state`) and the learning rate
(``callbacks.lr_monitor``). With ``logger.wandb.log_model=true`` Lightning's logger adds the best
checkpoint as an artifact at the end of training (conf/logger/wandb.yaml says what it costs). The
W&B run's name, folder and id are the run's (`robustnlu.train.logger_options`: a sweep's job is
named by its folder).
"""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.loggers import WandbLogger

from robustnlu.data.bio import slot_spans
from robustnlu.metrics.registry import cluster_metrics
from robustnlu.rundir_check import flatten
from robustnlu.seqdrift.split import DriftSplit

#: the most test errors ``errors/test`` holds (a few hundred kB in the run's files)
ERROR_ROWS = 500
#: the columns of a ``clusters/<split>`` table after id, size and drift
CLUSTER_COLUMNS = ("intent_acc", "slot_f1", "combined")


def run_config(cfg: DictConfig, module: pl.LightningModule, drift_split: DriftSplit, precision: str) -> dict[str, Any]:
    """The run's config as flat dotted keys (module docstring); ``precision``: as trained."""
    config = flatten(OmegaConf.to_container(cfg, resolve=True))
    config.setdefault("drift.partial", False)  # drift=none has none: the same column in every run
    config["trainer.precision"] = precision
    config["split.key"] = drift_split.key
    config["split.clustering_sha256"] = (drift_split.info.get("clustering") or {}).get("sha256")
    params = list(module.parameters())
    trainable = sum(p.numel() for p in params if p.requires_grad)
    total = sum(p.numel() for p in params)
    return {**config, "model/params/total": total, "model/params/trainable": trainable,
            "model/params/non_trainable": total - trainable,
            "model/params/objective": sum(p.numel() for p in module.objective.parameters())}


def cluster_rows(metrics: dict[str, Any], drift_clusters: set[int]) -> list[list[Any]]:
    """One split's ``clusters/<split>`` rows: cluster id, size, drift cluster or not, `CLUSTER_COLUMNS`."""
    return [[cluster, int(values["n"]), cluster in drift_clusters, *(values[k] for k in CLUSTER_COLUMNS)]
            for cluster, values in cluster_metrics(metrics).items()]


def _slots(tokens: list[str], tags: list[str]) -> str:
    return "; ".join(f"{slot}={' '.join(tokens[start:end])}" for slot, start, end in slot_spans(tags))


def error_rows(predictions: list[dict[str, Any]], limit: int = ERROR_ROWS) -> list[list[Any]]:
    """``errors/test`` rows: the first ``limit`` predictions (rows of ``predictions/<split>.jsonl``)
    with a wrong intent or tag: uid, cluster, utterance, gold and predicted intent and slots."""
    wrong = [r for r in predictions if r["pred_intent"] != r["gold_intent"] or r["pred_tags"] != r["gold_tags"]]
    return [[r["uid"], r["group"], " ".join(r["tokens"]), r["gold_intent"], r["pred_intent"],
             _slots(r["tokens"], r["gold_tags"]), _slots(r["tokens"], r["pred_tags"])] for r in wrong[:limit]]


def log_results(trainer: pl.Trainer, results: dict[str, Any], predictions: list[dict[str, Any]],
                drift_split: DriftSplit) -> None:
    """The W&B summary and tables of a finished run (module docstring); ``predictions``: the
    test split's prediction rows."""
    loggers = [lg for lg in trainer.loggers if isinstance(lg, WandbLogger)]
    if not loggers or not trainer.is_global_zero:
        return
    summary = {"final": {split: {k: v for k, v in results["metrics"][split].items() if not k.startswith("group/")}
                         for split in ("valid", "test")},
               "sizes": results["sizes"], "drift": results["drift"], **results["measures"]}
    drift_clusters = {a.cluster for a in drift_split.assignments.values() if a.in_drift}
    tables = {f"clusters/{split}": (["cluster", "size", "drift", *CLUSTER_COLUMNS],
                                    cluster_rows(results["metrics"][split], drift_clusters))
              for split in ("valid", "test")}
    tables["errors/test"] = (["uid", "cluster", "utterance", "gold_intent", "pred_intent", "gold_slots",
                              "pred_slots"], error_rows(predictions))
    for lg in loggers:
        lg.experiment.summary.update(summary)
        for key, (columns, rows) in tables.items():
            if rows:
                lg.log_table(key, columns=columns, data=rows)
