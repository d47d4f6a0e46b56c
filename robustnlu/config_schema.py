"""What every value a user can set must be: the schema of each Hydra app's config, checked
before a run writes anything (`robustnlu.cli.run_or_exit`, `check_config`).

Declarative: one table per config group (a `Node` of keys, a `Variants` choosing the node by a
key such as ``optimizer.name``), its values `integer`, `number`, `choice`, `flag`, `text` with
their ranges written as intervals (``"(0, 1]"``). The YAML files in conf/ keep the defaults and
their sources; this module says only what is allowed. A bad value is a `ConfigError` with one
line ``<key>: <problem> (got <value>)``; a key the schema does not know is one too, except
where a node takes an object's keyword arguments (``trainer``: any `pytorch_lightning.Trainer`
argument, callbacks and loggers: their class's arguments, any ``_target_`` that imports).

Why not Hydra's structured configs (dataclasses in the ConfigStore): OmegaConf checks types
only (no ranges, no choices), and a structured config fails while Hydra composes the config,
with Hydra's own multi-line message and exit status 1 and, in a multirun, the whole sweep
instead of the one job. Checked here, a bad value fails like any other user error: one line,
exit 2, no run directory, and only its own job in a sweep.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from robustnlu.errors import ConfigError


# ---------------------------------------------------------------------------- the spec language
class Missing:
    """A value the config leaves to the user (``???``)."""

    def __str__(self) -> str:
        return "???"


MISSING = Missing()


def show(value: Any) -> str:
    """A value as the user would write it on the command line."""
    if isinstance(value, (DictConfig, ListConfig)):
        value = OmegaConf.to_container(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(show(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{show(v)}" for k, v in value.items()) + "}"
    return str(value)


def bad(key: str, problem: str, value: Any) -> ConfigError:
    return ConfigError(f"{key}: {problem} (got {show(value)})")


class Spec:
    """What one value may be. ``check`` raises `ConfigError` naming ``key``; ``root`` is the
    whole config (plain containers), for rules that look at other keys."""

    null: bool = False

    def check(self, key: str, value: Any, root: Mapping[str, Any]) -> None:
        raise NotImplementedError


def present(spec: Spec, key: str, value: Any, kind: type, noun: str) -> bool:
    """False for a null that ``spec`` allows; `ConfigError` unless ``value`` is a ``kind``."""
    if value is None and spec.null:
        return False
    if not isinstance(value, kind):
        raise bad(key, f"must be {noun}", value)
    return True


@dataclass(frozen=True)
class Interval:
    """``"(0, 1]"``, ``"[1, inf)"``: the allowed range of a number."""

    low: float
    high: float
    closed_low: bool
    closed_high: bool

    @classmethod
    def parse(cls, text: str) -> Interval:
        m = re.fullmatch(r"([\[(])\s*(-?[\w.]+)\s*,\s*(-?[\w.]+)\s*([\])])", text)
        if not m:
            raise ValueError(f"not an interval: {text!r}")
        return cls(float(m[2]), float(m[3]), m[1] == "[", m[4] == "]")

    def __contains__(self, x: float) -> bool:
        above = x >= self.low if self.closed_low else x > self.low
        below = x <= self.high if self.closed_high else x < self.high
        return above and below

    def describe(self) -> str:
        def num(x: float) -> str:
            return str(int(x)) if x.is_integer() else str(x)

        if math.isinf(self.high):
            return f"must be {'>=' if self.closed_low else '>'} {num(self.low)}"
        if math.isinf(self.low):
            return f"must be {'<=' if self.closed_high else '<'} {num(self.high)}"
        return f"must be in {'[' if self.closed_low else '('}{num(self.low)}, {num(self.high)}{']' if self.closed_high else ')'}"


@dataclass(frozen=True)
class Scalar(Spec):
    """An int, a number (int or float, finite), a bool or a string, with its range or choices."""

    kind: str  # integer | number | flag | text
    interval: Interval | None = None
    choices: tuple[Any, ...] = ()
    null: bool = False
    pattern: str | None = None  # text: a regular expression the whole string must match

    def check(self, key: str, value: Any, root: Mapping[str, Any]) -> None:
        if value is None:
            if not self.null:
                raise bad(key, "must be set", value)
            return
        if self.choices:
            if isinstance(value, bool) or value not in self.choices:
                raise bad(key, f"must be one of {', '.join(show(c) for c in self.choices)}", value)
            return
        is_bool = isinstance(value, bool)
        ok = {"integer": isinstance(value, int) and not is_bool,
              "number": isinstance(value, (int, float)) and not is_bool,
              "flag": is_bool,
              "text": isinstance(value, str) and value != ""}[self.kind]
        if not ok:
            noun = {"integer": "an integer", "number": "a number", "flag": "true or false", "text": "a non-empty string"}
            raise bad(key, f"must be {noun[self.kind]}", value)
        if self.kind == "number" and not math.isfinite(value):
            raise bad(key, "must be a finite number", value)
        if self.interval is not None and value not in self.interval:
            raise bad(key, self.interval.describe(), value)
        if self.pattern is not None and not re.fullmatch(self.pattern, value):
            raise bad(key, f"must match {self.pattern}", value)


def integer(interval: str | None = None, *, null: bool = False) -> Scalar:
    return Scalar("integer", Interval.parse(interval) if interval else None, null=null)


def number(interval: str | None = None, *, null: bool = False) -> Scalar:
    return Scalar("number", Interval.parse(interval) if interval else None, null=null)


def choice(*options: Any, null: bool = False) -> Scalar:
    return Scalar("choice", choices=tuple(options), null=null)


def flag() -> Scalar:
    return Scalar("flag")


def text(*, null: bool = False, pattern: str | None = None) -> Scalar:
    return Scalar("text", null=null, pattern=pattern)


@dataclass(frozen=True)
class Anything(Spec):
    """Not checked here (an interpolation of a node checked elsewhere, free-form options)."""

    null: bool = True

    def check(self, key: str, value: Any, root: Mapping[str, Any]) -> None:
        return


@dataclass(frozen=True)
class Importable(Spec):
    """A ``_target_``: a dotted path that imports."""

    null: bool = False

    def check(self, key: str, value: Any, root: Mapping[str, Any]) -> None:
        if not isinstance(value, str) or not value:
            raise bad(key, "must be a dotted path to a class or function", value)
        _importable(key, value)


@dataclass(frozen=True)
class Seq(Spec):
    """A list of ``item`` (exactly ``length`` long, at least ``min_length``)."""

    item: Spec
    length: int | None = None
    min_length: int = 0
    null: bool = False

    def check(self, key: str, value: Any, root: Mapping[str, Any]) -> None:
        if not present(self, key, value, list, "a list"):
            return
        if self.length is not None and len(value) != self.length:
            raise bad(key, f"must be a list of {self.length}", value)
        if len(value) < self.min_length:
            raise bad(key, f"must be a list of at least {self.min_length}", value)
        for i, item in enumerate(value):
            self.item.check(f"{key}[{i}]", item, root)


@dataclass(frozen=True)
class FalseOr(Spec):
    """``false`` (or null) for "none", else ``spec`` (e.g. a TOP file's header names)."""

    spec: Spec
    null: bool = True

    def check(self, key: str, value: Any, root: Mapping[str, Any]) -> None:
        if value is not None and value is not False:
            self.spec.check(key, value, root)


@dataclass(frozen=True)
class Rule:
    """A condition across keys of a node (or of the whole config): ``test(node, root)`` must
    hold; otherwise ``key`` (relative to the node) is reported with ``problem``."""

    key: str
    test: Callable[[Mapping[str, Any], Mapping[str, Any]], bool]
    problem: str


@dataclass(frozen=True)
class Node(Spec):
    """A mapping with these ``keys`` (all required but those in ``optional``). ``extra``: the
    other keys allowed unchecked (``"*"``: any), or a function that returns them when a key
    outside ``keys`` turns up (a constructor's arguments: its import may need an extra)."""

    keys: Mapping[str, Spec]
    optional: frozenset[str] = frozenset()
    extra: frozenset[str] | str | Callable[[], frozenset[str] | str] = frozenset()
    rules: tuple[Rule, ...] = ()
    null: bool = False

    def check(self, key: str, value: Any, root: Mapping[str, Any]) -> None:
        if not present(self, key, value, dict, "a mapping"):
            return
        prefix = f"{key}." if key else ""
        unknown = [name for name in value if name not in self.keys]
        extra = self.extra() if unknown and callable(self.extra) else self.extra
        for name in unknown:
            if extra != "*" and name not in extra:
                known = ", ".join(sorted(self.keys))
                raise bad(f"{prefix}{name}", f"unknown key ({key or 'the config'} has {known})", value[name])
        for name, spec in self.keys.items():
            if value.get(name) is MISSING:
                raise bad(f"{prefix}{name}", "must be set", MISSING)
            if name in value:
                spec.check(f"{prefix}{name}", value[name], root)
            elif name not in self.optional:
                raise bad(f"{prefix}{name}", "must be set", None)
        for rule in self.rules:
            if not rule.test(value, root):
                name = rule.key
                raise bad(f"{prefix}{name}", rule.problem, _select(value, name))


@dataclass(frozen=True)
class Variants(Spec):
    """A node whose keys depend on the value of its key ``by`` (``optimizer.name``,
    ``encoder.kind``, an object's ``_target_``). ``importable``: a ``_target_`` not listed is
    allowed when it imports; its keys are then its own."""

    by: str
    options: Mapping[str, Node]
    importable: bool = False
    null: bool = False

    def check(self, key: str, value: Any, root: Mapping[str, Any]) -> None:
        if not present(self, key, value, dict, "a mapping"):
            return
        which = value.get(self.by)
        node = self.options.get(which) if isinstance(which, str) else None
        if node is not None:
            node.check(key, value, root)
        elif self.importable and isinstance(which, str) and which:
            _importable(f"{key}.{self.by}", which)
        else:
            raise bad(f"{key}.{self.by}", f"must be one of {', '.join(self.options)}", which)


@dataclass(frozen=True)
class MapOf(Spec):
    """A mapping of free names to values of one spec (a null value switches an entry off)."""

    value: Spec
    null: bool = False

    def check(self, key: str, value: Any, root: Mapping[str, Any]) -> None:
        if not present(self, key, value, dict, "a mapping"):
            return
        for name, item in value.items():
            if item is not None:
                self.value.check(f"{key}.{name}", item, root)


@dataclass(frozen=True)
class AnyOf(Spec):
    """One of several specs (``trainer.devices``: a count, ``auto`` or a list of ids)."""

    specs: tuple[Spec, ...]
    problem: str
    null: bool = False

    def check(self, key: str, value: Any, root: Mapping[str, Any]) -> None:
        for spec in self.specs:
            try:
                spec.check(key, value, root)
                return
            except ConfigError:
                continue
        raise bad(key, self.problem, value)


def _select(node: Mapping[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _importable(key: str, target: str) -> Any:
    from hydra.utils import get_object

    try:
        return get_object(target)
    except Exception as err:  # ImportError, AttributeError, a failing module: not importable
        raise bad(key, f"cannot be imported ({str(err.__cause__ or err).splitlines()[0]})", target) from None


def arguments_of(target: str) -> frozenset[str] | str:
    """The keyword arguments ``target``'s constructor takes (``"*"`` when it takes ``**kwargs``)."""
    params = inspect.signature(_importable("_target_", target)).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return "*"
    return frozenset(p.name for p in params) | {"_target_", "_partial_", "_recursive_", "_convert_", "_args_"}


def instance(target: str, keys: Mapping[str, Spec] | None = None, *, checked_only: bool = False,
             optional: frozenset[str] = frozenset(), rules: tuple[Rule, ...] = ()) -> Node:
    """The node of a Hydra-instantiated ``target`` with ``keys`` checked (plus ``_target_``,
    ``_partial_``); ``checked_only=False``: its constructor's other arguments are allowed too."""
    keys = {"_target_": choice(target), "_partial_": flag(), **(keys or {})}
    return Node(keys, optional=frozenset({"_partial_"}) | optional,
                extra=frozenset() if checked_only else lambda: arguments_of(target), rules=rules)


def by_target(nodes: tuple[Node, ...], null: bool = False) -> Variants:
    """The `Variants` of objects told apart by their ``_target_``; another importable target is
    allowed with its own keys (a user's noise, callback, logger, group source)."""
    return Variants("_target_", {n.keys["_target_"].choices[0]: n for n in nodes}, importable=True, null=null)


# ---------------------------------------------------------------------------- the config groups
PROBABILITY = "[0, 1]"
DROPOUT = "[0, 1)"
POSITIVE = "(0, inf)"
NON_NEGATIVE = "[0, inf)"
AT_LEAST_1 = "[1, inf)"
SEED = "[0, 4294967295]"  # numpy's and Lightning's seed range
SAMPLING = choice("shuffle", "group_balanced")


def dataset() -> Variants:
    """conf/dataset/: the keys of each reader (robustnlu/data/readers/)."""
    name, path = text(), text()
    splits3 = Node({s: text() for s in ("train", "valid", "test")})
    dev_carve = {"dev_fraction": number("(0, 1)"), "dev_seed": integer(SEED)}
    return Variants("format", {
        "bio_lines": Node({"name": name, "format": text(), "path": path, "folders": splits3}),
        "jsonl": Node({"name": name, "format": text(), "train": text(), "valid": text(null=True),
                       "test": text(), **dev_carve}, optional=frozenset(dev_carve) | {"valid"}),
        "conll_bio": Node({"name": name, "format": text(), "corpora": MapOf(text()),
                           "files": Node({"train": text(), "test": text()}), **dev_carve}),
        "top_tree": Node({"name": name, "format": text(), "path": path, "files": splits3,
                          "header": FalseOr(Seq(text(), min_length=1)),
                          "columns": Seq(text(), min_length=1), "domain": text(null=True)},
                         optional=frozenset({"domain", "header"})),
    })


def drift() -> Variants:
    """conf/drift/ (core paper section 3, Table 7; robustnlu/seqdrift/)."""
    from robustnlu.seqdrift.split import AFFINITIES, CLUSTER_SOURCES, RARE_SLOT_POLICIES

    seqdrift = Node({
        "kind": text(), "partial": flag(), "partial_fraction": number("(0, 1]"),
        "n_clusters": integer("[2, inf)"), "ngram_min": integer(AT_LEAST_1), "ngram_max": integer(AT_LEAST_1),
        "top_ngrams": integer(AT_LEAST_1), "min_intent_freq": integer(NON_NEGATIVE),
        "min_slot_freq": integer(NON_NEGATIVE), "min_projected_size": number(NON_NEGATIVE),
        "rare_slots": choice(*RARE_SLOT_POLICIES), "require_slots": flag(), "lookahead": flag(),
        "test_fraction": number("(0, 1)"), "valid_fraction": number("(0, 1)"),
        "affinity": choice(*AFFINITIES), "seed": integer(SEED),
        "clusters": choice(*CLUSTER_SOURCES),
    }, optional=frozenset({"clusters"}), rules=(
        Rule("ngram_min", lambda d, _: d["ngram_min"] <= d["ngram_max"], "must be <= drift.ngram_max"),
    ))
    return Variants("kind", {"none": Node({"kind": text()}), "slot_value": seqdrift, "slot_context": seqdrift})


def validation() -> Node:
    from robustnlu.seqdrift.split import VALIDATION_KINDS

    return Node({"kind": choice(*VALIDATION_KINDS), "hold_out_both": flag()})


def fractions_leave_training_data(cfg: Mapping[str, Any], _: Any) -> bool:
    """test + validation (twice with ``validation.hold_out_both``) < 1 (section 3.3)."""
    d = cfg["drift"]
    if d.get("kind") == "none":
        return True
    held_out = 2 if cfg["validation"]["hold_out_both"] else 1
    return d["test_fraction"] + held_out * d["valid_fraction"] < 1


TINY_POSITIONS_RULE = Rule(
    "data.max_length", lambda c, _: c["encoder"]["kind"] != "tiny" or c["data"]["max_length"] <= c["encoder"]["max_position_embeddings"],
    "must be <= encoder.max_position_embeddings")

CONATURAL_RULE = Rule(
    "optimizer.name", lambda c, _: c["optimizer"]["name"] != "conatural" or c.get("efficiency") is not None,
    "conatural preconditions with the source task's Fisher: use it with efficiency=topv2 efficiency.mode=adapt "
    "(the protocol checks the mode)")

SPLIT_RULE = Rule("drift.test_fraction", fractions_leave_training_data,
                  "test + validation fractions (validation twice with validation.hold_out_both) must be < 1")


def encoder() -> Variants:
    """conf/encoder/ (robustnlu/model/encoders.py)."""
    tiny = Node({"kind": text(), "hidden_size": integer(AT_LEAST_1), "num_layers": integer(AT_LEAST_1),
                 "num_heads": integer(AT_LEAST_1), "intermediate_size": integer(AT_LEAST_1),
                 "max_position_embeddings": integer("[3, inf)"), "dropout": number(DROPOUT)},
                rules=(Rule("hidden_size", lambda e, _: e["hidden_size"] % e["num_heads"] == 0,
                            "must be a multiple of encoder.num_heads"),))
    return Variants("kind", {"embedded": Node({"kind": text()}), "hf": Node({"kind": text(), "name": text()}),
                             "tiny": tiny})


def noise(null: bool = False) -> Variants:
    """conf/noise/ (paper 002; robustnlu/noise/)."""
    from robustnlu.noise.base import TARGET_TOKENS
    from robustnlu.noise.casing import STYLES, UNITS
    from robustnlu.noise.misspelling import EDIT_TYPES
    from robustnlu.noise.paraphrase import SIGNATURES

    rate, targets = number(PROBABILITY), choice(*TARGET_TOKENS)
    return by_target((
        instance("robustnlu.noise.casing.Casing", {"rate": rate, "unit": choice(*UNITS), "style": choice(*STYLES),
                                                   "target_tokens": targets}),
        instance("robustnlu.noise.misspelling.Misspelling", {
            "rate": rate, "edit_probs": Node({t: number(NON_NEGATIVE) for t in EDIT_TYPES}, optional=frozenset(EDIT_TYPES)),
            "min_token_len": integer("[2, inf)"), "target_tokens": targets},
            rules=(Rule("edit_probs", lambda n, _: sum(n["edit_probs"].values()) > 0, "must have a positive sum"),)),
        instance("robustnlu.noise.abbreviation.Abbreviation", {"rate": rate, "kb_file": text(null=True),
                                                               "vowel_drop": flag(), "homophones": flag(),
                                                               "target_tokens": targets}),
        instance("robustnlu.noise.morphology.Morphology", {"rate": rate, "target_tokens": targets,
                                                           "top_k": integer(AT_LEAST_1)}),
        instance("robustnlu.noise.synonym.Synonym", {"rate": rate, "target_tokens": targets,
                                                     "max_senses": integer(AT_LEAST_1), "top_k": integer(AT_LEAST_1),
                                                     "data_dir": text(null=True)}),
        instance("robustnlu.noise.paraphrase.Paraphrase", {"rate": rate, "signature": choice(*SIGNATURES)}),
    ), null=null)


def suites() -> MapOf:
    """conf/suite/ (robustnlu/noise/suite.py, robustnlu/evaluate.py)."""
    from robustnlu.data.utterance import SPLITS
    from robustnlu.noise.suite import FOLDER_NOISE

    return MapOf(Variants("kind", {
        "released": Node({"kind": text(), "path": text(), "noise_types": Seq(choice(*FOLDER_NOISE), min_length=1),
                          "on_malformed": choice("skip", "error"), "normalise": flag()}),
        "synthetic": Node({"kind": text(), "split": choice(*SPLITS), "noise": MapOf(noise())}),
    }))


def group_sources() -> Variants:
    """conf/groups/seqdrift_clusters.yaml, lda_topics.yaml: ``method.groups`` of the group methods."""
    return by_target((
        instance("robustnlu.groups.seqdrift_clusters.SeqDriftClusters", checked_only=True),
        instance("robustnlu.groups.lda_topics.LDATopics", {
            "n_topics": integer(AT_LEAST_1), "doc_topic_prior": number(POSITIVE), "topic_word_prior": number(POSITIVE),
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
    """conf/adversary/ratio_net.yaml: ``method.adversary`` of R-PDRO."""
    return by_target((instance("robustnlu.adversary.ratio.RatioAdversary", {"n_layers": integer(AT_LEAST_1)},
                               checked_only=True),))


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
        "adamw": Node({**shared, "betas": Seq(number("[0, 1)"), length=2), "eps": number(POSITIVE)}),
        "conatural": Node({**shared, "damping": number(POSITIVE), "fisher_samples": integer(AT_LEAST_1),
                           "gamma": number("(0, 1]"), "linear_decay": flag()}),
    })


def data() -> Node:
    """conf/data/default.yaml (robustnlu.data.datamodule.SLUDataModule)."""
    return Node({"batch_size": integer(AT_LEAST_1), "eval_batch_size": integer(AT_LEAST_1),
                 "max_length": integer("[3, inf)"), "pad_to": integer("[3, inf)", null=True),
                 "length_bucketing": flag(), "num_workers": integer(NON_NEGATIVE)},
                rules=(Rule("pad_to", lambda d, _: d["pad_to"] is None or d["pad_to"] >= d["max_length"],
                            "must be null or >= data.max_length"),))


def augment() -> Node:
    """augment= (conf/augment/, conf/config.yaml; robustnlu/noise/augment.py)."""
    from robustnlu.noise.augment import MODES

    return Node({"noise": noise(null=True),
                 "mode": choice(*MODES), "fraction": number("(0, 1]")})


PRECISIONS = ("auto", "64-true", "64", "32-true", "32", "16-mixed", "16", "bf16-mixed", "bf16", "16-true", "bf16-true",
              "transformer-engine", "transformer-engine-float16", 64, 32, 16)


def trainer() -> Node:
    """conf/trainer/: the `pytorch_lightning.Trainer` arguments (any other one of them is
    allowed unchecked, e.g. ``+trainer.limit_train_batches=10``) and ``on_nonfinite``, ours."""
    return Node({
        "_target_": choice("pytorch_lightning.Trainer"), "default_root_dir": text(),
        "max_epochs": integer(AT_LEAST_1), "accelerator": choice("auto", "cpu", "gpu", "cuda", "mps", "tpu"),
        "devices": AnyOf((integer(AT_LEAST_1), choice(-1, "auto"), text(pattern=r"-1|[1-9]\d*|\d+(,\d+)*,"),
                          text(pattern=r"\d+(,\d+)+"), Seq(integer(NON_NEGATIVE), min_length=1)),
                         "must be a device count >= 1, -1 (all), auto, or device ids as a list or \"0,1\""),
        "precision": choice(*PRECISIONS), "gradient_clip_val": number(NON_NEGATIVE, null=True),
        "log_every_n_steps": integer(AT_LEAST_1), "deterministic": AnyOf((flag(), choice("warn")), "must be true, false or warn"),
        "enable_model_summary": flag(), "enable_progress_bar": flag(), "use_distributed_sampler": flag(),
        "strategy": Anything(), "on_nonfinite": choice("stop", "skip"),
    }, optional=frozenset({"strategy", "on_nonfinite"}), extra=arguments_of("pytorch_lightning.Trainer"))


def callbacks() -> MapOf:
    """conf/callbacks/: the shipped callbacks' keys are checked; ``+callbacks.<name>._target_=<class>``
    adds any other callback that imports."""
    mode = choice("min", "max")
    return MapOf(by_target((
        instance("pytorch_lightning.callbacks.ModelCheckpoint", {
            "dirpath": text(), "filename": text(), "monitor": text(), "mode": mode,
            "auto_insert_metric_name": flag(), "save_last": flag()}),
        instance("robustnlu.resume.LastCheckpoint", {
            "dirpath": text(), "every_minutes": number(POSITIVE, null=True),
            "every_n_train_steps": integer(AT_LEAST_1, null=True)},
            rules=(Rule("every_minutes", lambda c, _: bool(c["every_minutes"] or c["every_n_train_steps"]),
                        "must be set when every_n_train_steps is null (a mid-epoch save is needed)"),)),
        instance("pytorch_lightning.callbacks.EarlyStopping", {"monitor": text(), "mode": mode,
                                                               "patience": integer(NON_NEGATIVE)}),
        instance("pytorch_lightning.callbacks.RichProgressBar"),
    )))


def loggers() -> MapOf:
    """conf/logger/: CSV and W&B (any other logger class that imports is allowed)."""
    return MapOf(by_target((
        instance("pytorch_lightning.loggers.CSVLogger", {"save_dir": text(), "name": text(),
                                                        "version": AnyOf((text(), integer(NON_NEGATIVE), choice("")),
                                                                         "must be a string or a version number")}),
        instance("pytorch_lightning.loggers.WandbLogger", {"save_dir": text(null=True), "mode": choice("offline", "online", "disabled"),
                                                          "project": text(), "name": text(), "group": text(),
                                                          "job_type": text(), "tags": Seq(text()),
                                                          "log_model": AnyOf((flag(), choice("all")), "must be true, false or all")}),
    )))


def paths() -> Node:
    """conf/paths/default.yaml (``hpo_dir``: conf/hparams_search/base.yaml)."""
    return Node({"root": text(null=True), "output_dir": text(), "cache_dir": text(), "hpo_dir": text()},
                optional=frozenset({"hpo_dir"}))


def efficiency() -> Node:
    """conf/efficiency/topv2.yaml (paper 003; robustnlu/efficiency/subsets.py)."""
    from robustnlu.efficiency.subsets import TOPV2_DOMAINS

    return Node({"_target_": Importable(), "percent": number("[0, 100]"), "mode": choice("joint", "adapt"), "init_from": text(null=True),
                 "sources": Seq(choice(*TOPV2_DOMAINS), min_length=1, null=True),
                 "source_limit": integer(AT_LEAST_1, null=True), "valid": choice("same", "full"),
                 "subset_seed": integer(SEED)}, null=True)


# ---------------------------------------------------------------------------- one schema per app
@lru_cache(maxsize=None)
def schema(config_name: str) -> Node:
    """The schema of the Hydra app whose primary config is ``conf/<config_name>.yaml``."""
    seed = integer(SEED)
    if config_name == "config":  # python -m robustnlu
        return Node({
            "seed": seed, "resume": flag(), "keep_last_checkpoint": flag(), "scenario": text(),
            "optimized_metric": text(pattern=r"(valid|test)/\w+"),
            "optimizer": optimizer(), "trainer": trainer(), "data": data(),
            "dataset": dataset(), "drift": drift(), "validation": validation(),
            "encoder": encoder(), "model": Node({"dropout": number(DROPOUT), "crf": flag(),
                                                 "intent_loss_scale": number(NON_NEGATIVE)}),
            "method": method(), "selection": selection(), "augment": augment(),
            "callbacks": callbacks(), "logger": loggers(), "suite": suites(), "paths": paths(),
            "efficiency": efficiency(),
        }, optional=frozenset({"suite", "efficiency"}), rules=(SPLIT_RULE, TINY_POSITIONS_RULE, CONATURAL_RULE))
    if config_name == "seqdrift":  # python -m robustnlu.seqdrift
        return Node({"dataset": dataset(), "drift": drift(), "validation": validation(), "paths": paths(),
                     "inspect": integer(NON_NEGATIVE), "inspect_examples": integer(NON_NEGATIVE),
                     "verify": flag()}, rules=(SPLIT_RULE,))
    if config_name == "noise_dataset":  # python -m robustnlu.noise
        from robustnlu.data.utterance import SPLITS

        return Node({"dataset": dataset(), "noise": noise(), "paths": paths(),
                     "splits": Seq(choice(*SPLITS), min_length=1), "out_dir": text(), "seed": seed})
    if config_name == "evaluate":  # python -m robustnlu.evaluate
        return Node({"suite": suites(), "ckpt": text(), "device": text(), "batch_size": integer(AT_LEAST_1)},
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


__all__ = ["check_config", "schema"]
