"""Training augmentation (robustnlu/noise/augment.py): which utterances are noised, in place or
appended, the groups of appended copies, and the record for results.json."""

from __future__ import annotations

import random

import pytest

from robustnlu.data.utterance import Corpus, Utterance
from robustnlu.errors import ConfigError
from robustnlu.noise.augment import augment_corpus
from robustnlu.noise.base import NoiseTransform, replace_each


class Shout(NoiseTransform):
    """Upper-cases each target token with probability ``rate`` (a minimal real transform)."""

    name = "shout"

    def apply(self, u: Utterance, rng: random.Random) -> Utterance:
        return replace_each(u, {i: [u.tokens[i].upper()] for i in self.targets(u, rng)})


SHOUT = {"_target_": f"{__name__}.Shout", "rate": 1.0}


def corpus(n: int = 400) -> Corpus:
    def utt(split, i):
        return Utterance(f"{split}-{i}", ("play", "song", str(i)), ("O", "O", "B-n"), "play")
    return Corpus("toy", [utt("train", i) for i in range(n)], [utt("valid", 0)], [utt("test", 0)])


def test_no_noise_is_no_augmentation():
    c = corpus()
    out, groups, record = augment_corpus(c, {"train-1": 3}, {"noise": None, "mode": "inplace", "fraction": 1.0}, seed=0)
    assert out is c and record is None and groups == {"train-1": 3}


def test_inplace_replaces_the_selected_fraction_and_keeps_uids():
    c = corpus()
    out, _, record = augment_corpus(c, {}, {"noise": SHOUT, "mode": "inplace", "fraction": 0.25}, seed=7)
    assert [u.uid for u in out.train] == [u.uid for u in c.train]
    changed = [u for u in out.train if u.tokens[0] == "PLAY"]
    # each utterance is selected independently with p = 0.25: 100 expected of 400, sd 8.7
    assert 70 <= len(changed) <= 130
    assert record["selected"] == len(changed) == record["stats"]["utterances_changed"]
    assert record["mode"] == "inplace" and record["noise"]["name"] == "shout" and record["appended"] == 0
    assert out.valid == c.valid and out.test == c.test
    again, _, _ = augment_corpus(c, {}, {"noise": SHOUT, "mode": "inplace", "fraction": 0.25}, seed=7)
    assert again.train == out.train
    other, _, _ = augment_corpus(c, {}, {"noise": SHOUT, "mode": "inplace", "fraction": 0.25}, seed=8)
    assert other.train != out.train


def test_append_adds_changed_copies_with_the_originals_groups():
    c = corpus(50)
    groups = {u.uid: i % 5 for i, u in enumerate(c.train)}
    out, new_groups, record = augment_corpus(c, groups, {"noise": SHOUT, "mode": "append", "fraction": 1.0}, seed=0)
    assert out.train[:50] == c.train and len(out.train) == 100 == 50 + record["appended"]
    for copy in out.train[50:]:
        original = copy.uid.removesuffix("+shout")
        assert copy.uid == f"{original}+shout" and new_groups[copy.uid] == groups[original]
        assert copy.tokens[:2] == ("PLAY", "SONG") and copy.tags == ("O", "O", "B-n")
    assert groups == {u.uid: i % 5 for i, u in enumerate(c.train)}  # the caller's mapping is not modified


@pytest.mark.parametrize(("key", "value"), [("mode", "prepend"), ("fraction", 0), ("fraction", 1.5), ("fraction", True)])
def test_bad_settings_name_the_key(key, value):
    cfg = {"noise": SHOUT, "mode": "inplace", "fraction": 1.0, key: value}
    with pytest.raises(ConfigError, match=f"augment.{key}"):
        augment_corpus(corpus(5), {}, cfg, seed=0)


# Krone et al., App. A.2: the augmentation rate chosen for each noise type
PAPER_RATES = {"casing": 0.5, "misspelling": 0.2, "abbreviation": 0.15, "morphology": 0.1, "synonym": 0.1, "paraphrase": 0.15}


def test_every_augment_option_composes_to_its_transform_at_the_papers_rate(tmp_path):
    from integration_helpers import CONF, compose_config
    from robustnlu.noise.augment import build_transform

    options = {p.stem for p in (CONF / "augment").glob("*.yaml")} - {"none"}
    assert options == set(PAPER_RATES)
    for option in sorted(options):
        cfg = compose_config([f"augment={option}"], tmp_path)
        transform = build_transform(cfg.augment.noise, seed=1)
        assert (transform.name, transform.rate, transform.seed) == (option, PAPER_RATES[option], 1)
        assert (cfg.augment.mode, cfg.augment.fraction) == ("inplace", 1.0)
    assert compose_config([], tmp_path).augment.noise is None
