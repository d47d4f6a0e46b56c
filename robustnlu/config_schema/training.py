"""The machinery of a run's config: ``encoder=`` (with its rule on ``data.max_length``),
``trainer=``, ``callbacks=``, ``logger=`` and ``paths=``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from robustnlu.config_spec import (
    AT_LEAST_1, DROPOUT, NON_NEGATIVE, POSITIVE, AnyOf, Anything, MapOf, Node, Rule, Seq, Variants, arguments_of, by_target,
    choice, flag, instance, integer, number, text)
from robustnlu.paths import DATA_DIR


def encoder() -> Variants:
    """conf/encoder/ (robustnlu/model/encoders.py)."""
    tiny = Node({"kind": text(), "hidden_size": integer(AT_LEAST_1), "num_layers": integer(AT_LEAST_1),
                 "num_heads": integer(AT_LEAST_1), "intermediate_size": integer(AT_LEAST_1),
                 "max_position_embeddings": integer("[3, inf)"), "dropout": number(DROPOUT)},
                rules=(Rule("hidden_size", lambda e, _: e["hidden_size"] % e["num_heads"] == 0,
                            "must be a multiple of encoder.num_heads"),))
    return Variants("kind", {"embedded": Node({"kind": text()}), "hf": Node({"kind": text(), "name": text()}),
                             "tiny": tiny})


def encoder_layers(cfg: Mapping[str, Any]) -> int | None:
    """The encoder's number of layers: ``tiny``'s ``num_layers``, else its Hugging Face config's,
    read from local files only (the shipped MiniLM's, a folder, the Hub cache); None where there
    is none yet (an ``encoder=hf`` model not downloaded)."""
    if cfg["kind"] == "tiny":
        return cfg["num_layers"]
    from transformers import AutoConfig

    from robustnlu.model.encoders import embedded_model_path

    try:
        config = AutoConfig.from_pretrained(cfg["name"] if cfg["kind"] == "hf" else embedded_model_path(),
                                            local_files_only=True)
    except (OSError, ValueError):  # not on this machine (the run downloads it), or not a model name
        return None
    return getattr(config, "num_hidden_layers", None)


TINY_POSITIONS_RULE = Rule(
    "data.max_length", lambda c, _: c["encoder"]["kind"] != "tiny" or c["data"]["max_length"] <= c["encoder"]["max_position_embeddings"],
    "must be <= encoder.max_position_embeddings")


PRECISIONS = ("auto", "64-true", "64", "32-true", "32", "16-mixed", "16", "bf16-mixed", "bf16", "16-true", "bf16-true",
              "transformer-engine", "transformer-engine-float16", 64, 32, 16)


#: ``trainer.compile`` compiles one graph per batch shape: it needs the batches in length buckets
COMPILE_BUCKETS_RULE = Rule(
    "trainer.compile.enabled",
    lambda c, _: not (c["trainer"].get("compile") or {}).get("enabled") or c["data"]["pad_to_multiple_of"] is not None,
    "needs length buckets, data.pad_to_multiple_of (e.g. 16): with static shapes every distinct batch shape "
    "compiles a graph of its own")


def trainer() -> Node:
    """conf/trainer/: the `pytorch_lightning.Trainer` arguments (any other one of them is
    allowed unchecked, e.g. ``+trainer.limit_train_batches=10``) and ``on_nonfinite`` and
    ``compile``, ours."""
    from robustnlu.model.compiled import BACKENDS, MODES

    return Node({
        "_target_": choice("pytorch_lightning.Trainer"), "default_root_dir": text(),
        "max_epochs": integer(AT_LEAST_1), "accelerator": choice("auto", "cpu", "gpu", "cuda", "mps", "tpu"),
        "devices": AnyOf((integer(AT_LEAST_1), choice(-1, "auto"), text(pattern=r"-1|[1-9]\d*|\d+(,\d+)*,"),
                          text(pattern=r"\d+(,\d+)+"), Seq(integer(NON_NEGATIVE), min_length=1)),
                         "must be a device count >= 1, -1 (all), auto, or device ids as a list or \"0,1\""),
        "precision": choice(*PRECISIONS), "gradient_clip_val": number(NON_NEGATIVE, null=True),
        "log_every_n_steps": integer(AT_LEAST_1), "deterministic": AnyOf((flag(), choice("warn")), "must be true, false or warn"),
        "enable_model_summary": flag(), "enable_progress_bar": flag(), "use_distributed_sampler": flag(),
        "strategy": Anything(), "num_nodes": integer(AT_LEAST_1), "on_nonfinite": choice("stop", "skip"),
        "compile": Node({"enabled": flag(), "mode": choice(*MODES), "backend": choice(*BACKENDS)}),
    }, optional=frozenset({"strategy", "num_nodes", "on_nonfinite", "compile"}), extra=lambda: arguments_of("pytorch_lightning.Trainer"))


def callbacks() -> MapOf:
    """conf/callbacks/: the shipped callbacks' keys are checked; ``+callbacks.<name>._target_=<class>``
    adds any other callback that imports."""
    mode = choice("min", "max")
    return MapOf(by_target((
        instance("robustnlu.resume.RelocatableModelCheckpoint", {
            "dirpath": text(), "filename": text(), "monitor": text(), "mode": mode,
            "auto_insert_metric_name": flag(), "save_last": flag(), "save_weights_only": flag()}),
        instance("robustnlu.resume.LastCheckpoint", {
            "dirpath": text(), "every_minutes": number(POSITIVE, null=True),
            "every_n_train_steps": integer(AT_LEAST_1, null=True)},
            rules=(Rule("every_minutes", lambda c, _: bool(c["every_minutes"] or c["every_n_train_steps"]),
                        "must be set when every_n_train_steps is null (a mid-epoch save is needed)"),)),
        instance("pytorch_lightning.callbacks.EarlyStopping", {"monitor": text(), "mode": mode,
                                                               "patience": integer(NON_NEGATIVE)}),
        instance("robustnlu.progress.LossProgressBar", {"refresh_s": number(NON_NEGATIVE)}),
        instance("pytorch_lightning.callbacks.RichProgressBar"),
        instance("pytorch_lightning.callbacks.LearningRateMonitor", {"logging_interval": choice("step", "epoch", null=True)}),
    )))


def loggers() -> MapOf:
    """conf/logger/: CSV and W&B (any other logger class that imports is allowed)."""
    return MapOf(by_target((
        *(instance(target, {"save_dir": text(), "name": text(),
                            "version": AnyOf((text(), integer(NON_NEGATIVE), choice("")), "must be a string or a version number")})
          for target in ("robustnlu.resume.ResumableCSVLogger", "pytorch_lightning.loggers.CSVLogger")),
        instance("pytorch_lightning.loggers.WandbLogger", {"save_dir": text(null=True), "mode": choice("offline", "online", "disabled"),
                                                          "project": text(), "name": text(), "group": text(),
                                                          "job_type": text(), "tags": Seq(text()),
                                                          "log_model": AnyOf((flag(), choice("all")), "must be true, false or all")}),
    )))


#: ``paths.data_dir`` must be a folder: a wrong one stops here, naming the setting, rather than
#: at the first dataset file
DATA_DIR_RULE = Rule("data_dir", lambda node, root: Path(node["data_dir"]).is_dir(),
                     "no such folder; it is where the datasets are read (default: the datasets shipped with "
                     f"robustnlu, {DATA_DIR})")


def paths(evaluate: bool = False) -> Node:
    """conf/paths/default.yaml (``hpo_dir``: conf/hparams_search/optuna.yaml); ``evaluate``: the
    ``paths`` of conf/evaluate.yaml (``data_dir`` only)."""
    if evaluate:
        return Node({"data_dir": text()}, rules=(DATA_DIR_RULE,))
    return Node({"data_dir": text(), "output_dir": text(), "cache_dir": text(), "hpo_dir": text()},
                optional=frozenset({"hpo_dir"}), rules=(DATA_DIR_RULE,))
