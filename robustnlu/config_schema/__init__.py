"""What every value a user can set must be: the schema of each Hydra app's config, checked
before a run writes anything (`robustnlu.cli.run_or_exit`, `check_config`).

Declarative: one table per config group (a `Node` of keys, a `Variants` choosing the node by a
key such as ``optimizer.name``), its values `integer`, `number`, `choice`, `flag`, `text` with
their ranges written as intervals (``"(0, 1]"``). The YAML files in conf/ keep the defaults and
their sources; this module says only what is allowed. A method's keys, and its group source's or
adversary's, are what their classes declare (`robustnlu.hparams`: any importable subclass is
checked against its own declaration). A bad value is a `ConfigError` with one
line ``<key>: <problem> (got <value>)``; a key the schema does not know is one too, except
where a node takes an object's keyword arguments (``trainer``: any `pytorch_lightning.Trainer`
argument, callbacks and loggers: their class's arguments, any ``_target_`` that imports).

Why not Hydra's structured configs (dataclasses in the ConfigStore): OmegaConf checks types
only (no ranges, no choices), and a structured config fails while Hydra composes the config,
with Hydra's own multi-line message and exit status 1 and, in a multirun, the whole sweep
instead of the one job. Checked here, a bad value fails like any other user error: one line,
exit 2, no run directory, and only its own job in a sweep.

The spec language is in `robustnlu.config_spec`; the nodes of the config groups in
``drift`` (SeqDrift's split), ``data`` (corpus, noise, efficiency), ``method`` (objective, groups,
adversary, selection, optimiser) and ``training`` (encoder, trainer, callbacks, loggers, paths).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from robustnlu.config_schema.data import augment, data, dataset, efficiency, noise, suites
from robustnlu.config_schema.drift import drift, split_rule, validation
from robustnlu.config_schema.method import CONATURAL_RULE, method, optimizer, ratio_layers_rule, selection, top_k_rule
from robustnlu.config_spec import (
    AT_LEAST_1, DROPOUT, MISSING, NON_NEGATIVE, SEED, FolderName, Node, Seq, bad, choice, flag, integer, number, text)
from robustnlu.config_schema.training import COMPILE_BUCKETS_RULE, TINY_POSITIONS_RULE, callbacks, encoder, loggers, paths, trainer


@lru_cache(maxsize=None)
def schema(config_name: str) -> Node:
    """The schema of the Hydra app whose primary config is ``conf/<config_name>.yaml``."""
    seed = integer(SEED)
    if config_name == "config":  # python -m robustnlu
        return Node({
            "seed": seed, "resume": flag(), "keep_last_checkpoint": flag(),
            "optimized_metric": text(pattern=r"(valid|test)/\w+"),
            "optimizer": optimizer(), "trainer": trainer(), "data": data(),
            "dataset": dataset(), "drift": drift(), "validation": validation(),
            "scenario": FolderName(),  # after the dataset: a bad dataset.name is named as such
            "encoder": encoder(), "model": Node({"dropout": number(DROPOUT), "crf": flag(),
                                                 "intent_loss_scale": number(NON_NEGATIVE)}),
            "method": method(), "selection": selection(), "augment": augment(),
            "callbacks": callbacks(), "logger": loggers(), "suite": suites(), "paths": paths(),
            "efficiency": efficiency(),
            # +resume_override=[key, ...]: settings a resumed run may change (robustnlu/resume.py)
            "resume_override": Seq(text(pattern=r"[\w.]+")),
        }, optional=frozenset({"suite", "efficiency", "resume_override"}),
            rules=(split_rule(), TINY_POSITIONS_RULE, COMPILE_BUCKETS_RULE, CONATURAL_RULE, top_k_rule(), ratio_layers_rule()))
    if config_name == "seqdrift":  # python -m robustnlu.seqdrift
        return Node({"dataset": dataset(), "drift": drift(), "validation": validation(), "paths": paths(),
                     "inspect": integer(NON_NEGATIVE), "inspect_examples": integer(NON_NEGATIVE),
                     "verify": flag()}, rules=(split_rule(),))
    if config_name == "noise_dataset":  # python -m robustnlu.noise
        from robustnlu.data.utterance import SPLITS

        return Node({"dataset": dataset(), "noise": noise(), "paths": paths(),
                     "splits": Seq(choice(*SPLITS), min_length=1), "out_dir": text(), "seed": seed})
    if config_name == "evaluate":  # python -m robustnlu.evaluate
        return Node({"suite": suites(), "ckpt": text(), "device": text(), "batch_size": integer(AT_LEAST_1),
                     "paths": paths(evaluate=True)},
                    optional=frozenset({"suite"}))
    raise KeyError(f"no config schema for {config_name!r}")


def plain(cfg: DictConfig) -> dict[str, Any]:
    """The config as plain containers with its interpolations resolved, without Hydra's own
    ``hydra`` node; ``???`` (a value that must be given) becomes `MISSING`."""

    def value_of(node: DictConfig | ListConfig, name: Any, key: str) -> Any:
        if OmegaConf.is_missing(node, name):
            return MISSING
        try:
            value = node[name]
        except Exception as err:  # an interpolation of a key that does not exist, a bad resolver
            raw = OmegaConf.to_container(node)[name]
            raise bad(key, f"cannot be resolved: {err}".splitlines()[0], raw) from None
        return walk(value, key) if isinstance(value, (DictConfig, ListConfig)) else value

    def walk(node: DictConfig | ListConfig, key: str) -> Any:
        if isinstance(node, ListConfig):
            return [value_of(node, i, f"{key}[{i}]") for i in range(len(node))]
        return {name: value_of(node, name, f"{key}.{name}" if key else str(name))
                for name in node if key or name != "hydra"}

    return walk(cfg, "")


def check_config(cfg: DictConfig, config_name: str) -> None:
    """Raise `ConfigError` for the first value of ``cfg`` that the app's schema does not allow."""
    values = plain(cfg)
    schema(config_name).check("", values, values)


def check_loaded_encoder(cfg: DictConfig, encoder_config: Any) -> None:
    """The training config's rules on the encoder's size, with the layer count of the encoder the
    run loaded (its Hugging Face config): `check_config` could not read it where the run
    downloads the model (``encoder=hf`` with a name not yet in the local cache)."""
    values = {key: OmegaConf.to_container(cfg[key], resolve=True) for key in ("method", "encoder")}
    layers = getattr(encoder_config, "num_hidden_layers", None)
    Node({}, extra="*", rules=(ratio_layers_rule(lambda _: layers),)).check("", values, values)


__all__ = ["check_config", "check_loaded_encoder", "schema"]
