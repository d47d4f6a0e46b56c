"""The training objective's side of a run's config: ``method=`` with its group source
(``method.groups``, conf/groups/) or learned adversary (``method.adversary``, conf/adversary/),
``selection=`` and ``optimizer=`` (with the rule that ties the co-natural optimiser to the
efficiency protocol)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from robustnlu.config_schema.spec import (
    AT_LEAST_1, DROPOUT, NON_NEGATIVE, POSITIVE, PROBABILITY, SAMPLING, SEED, Importable, Node, Rule, Seq, Spec, Variants,
    by_target, choice, flag, instance, integer, number, text)
from robustnlu.config_schema.training import encoder_layers


def group_sources() -> Variants:
    """conf/groups/seqdrift_clusters.yaml, lda_topics.yaml: ``method.groups`` of the group methods."""
    return by_target((
        instance("robustnlu.groups.seqdrift_clusters.SeqDriftClusters", checked_only=True),
        instance("robustnlu.groups.lda_topics.LDATopics", {
            # the priors: scikit-learn's LatentDirichletAllocation takes [0, 1] (checked when it fits); 0 is no Dirichlet
            "n_topics": integer(AT_LEAST_1), "doc_topic_prior": number("(0, 1]"), "topic_word_prior": number("(0, 1]"),
            "max_vocabulary": integer(AT_LEAST_1), "stop_words": choice("english", null=True),
            "assignment": choice("hard", "soft"), "passes": integer(AT_LEAST_1), "doc_iterations": integer(AT_LEAST_1),
            "chunk_size": integer(AT_LEAST_1), "learning_offset": number("[1, inf)"), "learning_decay": number(PROBABILITY),
            "seed": integer(SEED)}, checked_only=True),
    ))


def autoencoder() -> Variants:
    """conf/groups/autoencoder.yaml: ``method.groups`` of TopK-AE."""
    from robustnlu.groups.autoencoder import BETA_WEIGHTS

    return by_target((instance("robustnlu.groups.autoencoder.OnlineAutoencoder", {
        "latent_groups": integer(AT_LEAST_1), "dropout": number(DROPOUT), "beta": number(NON_NEGATIVE),
        "beta_weights": choice(*BETA_WEIGHTS)}, checked_only=True),))


def generative_lm() -> Variants:
    """conf/adversary/generative_lm.yaml: ``method.adversary`` of P-DRO."""
    from robustnlu.adversary.generative_lm import OUTPUT_VOCABS

    return by_target((instance("robustnlu.adversary.generative_lm.GenerativeLM", {
        "hidden_size": integer(AT_LEAST_1), "num_layers": integer(AT_LEAST_1), "dropout": number(DROPOUT),
        "output_vocab": choice(*OUTPUT_VOCABS)}, checked_only=True),))


def ratio_net() -> Variants:
    """conf/adversary/ratio_net.yaml: ``method.adversary`` of R-PDRO: the first ``n_layers`` of
    the SLU encoder's layers (at most all of them, where the encoder's size can be read)."""
    def fits(adversary: Mapping[str, Any], root: Mapping[str, Any]) -> bool:
        layers = encoder_layers(root["encoder"])
        return layers is None or adversary["n_layers"] <= layers

    def problem(adversary: Mapping[str, Any], root: Mapping[str, Any]) -> str:
        return f"must be <= the encoder's {encoder_layers(root['encoder'])} layers"

    return by_target((instance("robustnlu.adversary.ratio.RatioAdversary", {"n_layers": integer(AT_LEAST_1)},
                               checked_only=True, rules=(Rule("n_layers", fits, problem),)),))


def method() -> Variants:
    """conf/method/ (core paper section 4, Table 9; Michel's thesis chapters 5-6)."""
    from robustnlu.robust.topk_ae import ASSIGNMENTS

    def node(**keys: Spec) -> Node:
        return Node({"_target_": Importable(), "name": text(), **keys})

    k = integer(AT_LEAST_1)
    topk_ae = node(groups=autoencoder(), k=k, assignment=choice(*ASSIGNMENTS), ae_lr=number(POSITIVE),
                   ae_weight_decay=number(NON_NEGATIVE))
    return Variants("name", {
        "erm": node(),
        "topk": node(k=k),
        "topk_group": node(groups=group_sources(), k=k, sampling=SAMPLING),
        "topk_ae_prob": topk_ae,
        "topk_ae_bin": topk_ae,
        "group_dro": node(groups=group_sources(), step_size=number(POSITIVE), decay=number("(0, 1]"),
                          shared_weights=flag(), sampling=SAMPLING),
        "topic_cvar": node(groups=group_sources(), alpha=number("(0, 1]"), ema_step=number("(0, 1]"),
                           renormalize=flag(), sampling=SAMPLING),
        "nonparam_kl": node(kappa=number(POSITIVE), detach_weights=flag()),
        "rpdro": node(adversary=ratio_net(), tau=number(POSITIVE), lr=number(POSITIVE),
                      weight_decay=number(NON_NEGATIVE), betas=Seq(number("[0, 1)"), length=2), eps=number(POSITIVE),
                      max_grad_norm=number(POSITIVE, null=True), min_batch_size=integer(AT_LEAST_1)),
        "pdro": node(adversary=generative_lm(), temperature=number(POSITIVE), window=integer(AT_LEAST_1),
                     adversary_lr=number(POSITIVE), max_grad_norm=number(POSITIVE, null=True),
                     pretrain_epochs=integer(NON_NEGATIVE), pretrain_lr=number(POSITIVE),
                     pretrain_batch_size=integer(AT_LEAST_1), seed=integer(SEED)),
    })


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
    from robustnlu.distributed import processes_per_node

    size, trainer = cfg["data"]["batch_size"], cfg["trainer"]
    world = processes_per_node(trainer["devices"]) * trainer.get("num_nodes", 1)
    if world == 1:
        return size, f"data.batch_size ({size})"
    return size * world, f"the global batch, data.batch_size x {world} processes ({size} x {world} = {size * world})"


#: TopK, TopK-Group and TopK-AE average the k largest losses of the batch (of each group): with
#: k >= the batch nothing is left out (TopK is then ERM; the group methods average each group whole)
TOP_K_RULE = Rule(
    "method.k", lambda c, _: "k" not in c["method"] or c["method"]["k"] < objective_batch(c)[0],
    lambda c, _: f"must be < {objective_batch(c)[1]}: with k >= the batch, top-k keeps every loss and selects nothing")
