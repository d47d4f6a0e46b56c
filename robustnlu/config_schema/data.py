"""The corpus side of a run's config: ``dataset=``, ``data=``, the noise transforms of
``augment=`` and ``suite=``, and the efficiency protocol's ``efficiency=``."""

from __future__ import annotations

from robustnlu.config_spec import (
    AT_LEAST_1, NON_NEGATIVE, PROBABILITY, SEED, FalseOr, FolderName, MapOf, Node, Rule, Seq, Variants, by_target, choice,
    flag, instance, integer, number, text)


def dataset() -> Variants:
    """conf/dataset/: the keys of each reader (robustnlu/data/readers/)."""
    name, path = FolderName(), text()
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


def data() -> Node:
    """conf/data/default.yaml (robustnlu.data.datamodule.SLUDataModule)."""
    return Node({"batch_size": integer(AT_LEAST_1), "eval_batch_size": integer(AT_LEAST_1),
                 "max_length": integer("[3, inf)"), "pad_to": integer("[3, inf)", null=True),
                 "pad_to_multiple_of": integer(AT_LEAST_1, null=True),
                 "length_bucketing": flag(), "num_workers": integer(NON_NEGATIVE)},
                rules=(Rule("pad_to", lambda d, _: d["pad_to"] is None or d["pad_to"] >= d["max_length"],
                            "must be null or >= data.max_length"),))


def augment() -> Node:
    """augment= (conf/augment/, conf/config.yaml; robustnlu/noise/augment.py)."""
    from robustnlu.noise.augment import MODES

    return Node({"noise": noise(null=True),
                 "mode": choice(*MODES), "fraction": number("(0, 1]")})


def efficiency() -> Node:
    """conf/efficiency/topv2.yaml (paper 003; robustnlu/efficiency/subsets.py): the shipped
    protocol's keys, checked without importing it (and Lightning with it), so that a bad value is
    refused at once; another protocol class that imports, with its own keys."""
    from robustnlu.efficiency.subsets import TOPV2_DOMAINS

    return by_target((instance("robustnlu.efficiency.protocol.EfficiencyProtocol", {
        "percent": number("[0, 100]"), "mode": choice("joint", "adapt"), "init_from": text(null=True),
        "sources": Seq(choice(*TOPV2_DOMAINS), min_length=1, null=True), "source_limit": integer(AT_LEAST_1, null=True),
        "valid": choice("same", "full"), "subset_seed": integer(SEED)}, checked_only=True),), null=True)
