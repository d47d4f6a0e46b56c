"""The training objective's side of a run's config: ``method=`` with its group source
(``method.groups``, conf/groups/) or learned adversary (``method.adversary``, conf/adversary/),
``selection=`` and ``optimizer=`` (with the rule that ties the co-natural optimiser to the
efficiency protocol).

A method's keys, and those of its group source or adversary, are what its ``_target_`` class
declares (`robustnlu.hparams`): any importable `RobustObjective` subclass is a method, a user's
own included; the rules below tie some of its values to other parts of the config."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from robustnlu.config_spec import (
    AT_LEAST_1, NON_NEGATIVE, POSITIVE, FolderName, Importable, Node, Rule, Seq, Spec, Variants, choice, flag, imported, instance,
    integer, number, text)
from robustnlu.config_schema.training import encoder_layers
from robustnlu.hparams import DeclaredObject


def method() -> DeclaredObject:
    """conf/method/: any `RobustObjective` with the keys its class declares, and its ``name``
    (run directories, results.json, the report, W&B)."""
    from robustnlu.robust.base import RobustObjective

    return DeclaredObject(RobustObjective, fixed={"name": FolderName()})


def builds(node: Any, *classes: type) -> bool:
    """Whether the config ``node`` builds a subclass of one of ``classes`` (a rule that holds for
    some classes only; the node's own check has imported its ``_target_``)."""
    target = node.get("_target_") if isinstance(node, Mapping) else None
    return isinstance(target, str) and issubclass(imported("_target_", target), classes)


def selection() -> Variants:
    """conf/selection/ (core paper 5.1; thesis 5.3.3)."""
    from robustnlu.selection.greedy_minmax import SCORES

    def node(criterion: Spec) -> Node:
        return Node({"name": text(), "monitor": text(), "mode": choice("min", "max"), "criterion": criterion})

    plain = node(choice(None, null=True))
    minmax = node(instance("robustnlu.selection.greedy_minmax.GreedyMinmax",
                           {"kl_threshold": number(POSITIVE), "score": choice(*SCORES)}, checked_only=True))
    return Variants("name", {"valid_combined": plain, "worst_group": plain, "greedy_minmax": minmax})


def optimizer() -> Variants:
    """conf/optimizer/ (core paper Table 9; thesis ch. 7 for conatural)."""
    shared = {"_target_": Importable(), "_partial_": flag(), "name": text(), "lr": number(POSITIVE),
              "weight_decay": number(NON_NEGATIVE), "warmup_steps": integer(NON_NEGATIVE)}
    return Variants("name", {
        "adamw": Node({**shared, "betas": Seq(number("[0, 1)"), length=2), "eps": number(POSITIVE),
                        "fused": choice("auto", True, False)}),
        "conatural": Node({**shared, "damping": number(POSITIVE), "fisher_samples": integer(AT_LEAST_1),
                           "gamma": number("(0, 1]"), "linear_decay": flag()}),
    })


CONATURAL_RULE = Rule(
    "optimizer.name", lambda c, _: c["optimizer"]["name"] != "conatural" or c.get("efficiency") is not None,
    "conatural preconditions with the source task's Fisher: use it with efficiency=topv2 efficiency.mode=adapt "
    "(the protocol checks the mode)")


def objective_batch(cfg: Mapping[str, Any]) -> tuple[int, str]:
    """How many examples a training step's objective ranks, and where that number comes from:
    ``data.batch_size`` per process times the processes (``trainer.devices`` per node times
    ``trainer.num_nodes``), whose parts `robustnlu.distributed.gather_task_losses` joins into
    one global batch."""
    from robustnlu.hardware import processes_per_node

    size, trainer = cfg["data"]["batch_size"], cfg["trainer"]
    world = processes_per_node(trainer["devices"]) * trainer.get("num_nodes", 1)
    if world == 1:
        return size, f"data.batch_size ({size})"
    return size * world, f"the global batch, data.batch_size x {world} processes ({size} x {world} = {size * world})"


def top_k_rule() -> Rule:
    """TopK, TopK-Group and TopK-AE (and their subclasses) average the k largest losses of the
    batch (of each group): with k >= the batch nothing is left out (TopK is then ERM; the group
    methods average each group whole)."""
    from robustnlu.robust.topk import TopK
    from robustnlu.robust.topk_ae import TopKAE
    from robustnlu.robust.topk_group import TopKGroup

    return Rule(
        "method.k",
        lambda c, _: not builds(c["method"], TopK, TopKGroup, TopKAE) or c["method"]["k"] < objective_batch(c)[0],
        lambda c, _: f"must be < {objective_batch(c)[1]}: with k >= the batch, top-k keeps every loss and selects nothing")


def ratio_layers_rule(layers: Callable[[Mapping[str, Any]], int | None] = encoder_layers) -> Rule:
    """R-PDRO's ratio adversary keeps the first ``n_layers`` of the SLU encoder's layers: at most
    all of them, ``layers(cfg["encoder"])`` (None: not known, not checked). Before the run that
    is `encoder_layers`, read from local files; the run checks again with the encoder it loaded
    (`robustnlu.config_schema.check_loaded_encoder`). The adversary's module (transformers) is
    imported for a method with an adversary only: a config error of another comes at once."""
    def fits(cfg: Mapping[str, Any], _: Any) -> bool:
        adversary = cfg["method"].get("adversary")
        if adversary is None:
            return True
        from robustnlu.adversary.ratio import RatioAdversary

        known = layers(cfg["encoder"]) if builds(adversary, RatioAdversary) else None
        return known is None or adversary["n_layers"] <= known

    return Rule("method.adversary.n_layers", fits,
                lambda c, _: f"must be <= the encoder's {layers(c['encoder'])} layers")
