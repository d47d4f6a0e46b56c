"""SLUMetrics and conlleval chunking (`robustnlu.data.bio.slot_spans`), checked against seqeval and against hand arithmetic."""

from __future__ import annotations

import random
import warnings

import pytest
import torch
from seqeval.metrics import f1_score, precision_score, recall_score
from seqeval.metrics.sequence_labeling import get_entities

from robustnlu.data.bio import slot_spans
from robustnlu.metrics.counts import SlotErrors, UtteranceCounts, semer_slot_errors, utterance_counts
from robustnlu.metrics.slu import SLUMetrics
from robustnlu.metrics.registry import METRICS, PER_GROUP

BIO_TAGS = ["O", "B-a", "I-a", "B-b", "I-b"]
INTENTS = ["play", "weather", "book"]


def random_tags(rng: random.Random, tagset: list[str], max_len: int = 12) -> list[str]:
    return [rng.choice(tagset) for _ in range(rng.randint(0, max_len))]


def seqeval_spans(tags: list[str]) -> set[tuple[str, int, int]]:
    """seqeval's default-mode chunks with the inclusive end made exclusive."""
    return {(t, start, end + 1) for t, start, end in get_entities(tags)}


def random_corpus(seed: int, n: int, groups: tuple[int, ...] = ()) -> dict[str, list]:
    """Gold utterances and predictions that are gold with ~25% of tags and intents perturbed
    (so invalid BIO, wrong boundaries and wrong types all occur)."""
    rng = random.Random(seed)
    tagset = [*BIO_TAGS, "B-c", "I-c"]
    keys = ("pred_intents", "gold_intents", "pred_tags", "gold_tags")
    corpus: dict[str, list] = {k: [] for k in keys}
    for _ in range(n):
        gold = random_tags(rng, tagset)
        corpus["gold_tags"].append(gold)
        corpus["pred_tags"].append([rng.choice(tagset) if rng.random() < 0.25 else t for t in gold])
        gold_intent = rng.choice(INTENTS)
        corpus["gold_intents"].append(gold_intent)
        corpus["pred_intents"].append(rng.choice(INTENTS) if rng.random() < 0.3 else gold_intent)
    if groups:
        corpus["groups"] = [rng.choice(groups) for _ in range(n)]
    return corpus


def feed(metric: SLUMetrics, corpus: dict[str, list], idx: list[int] | None = None) -> SLUMetrics:
    idx = range(len(corpus["gold_intents"])) if idx is None else idx
    metric.update(**{k: [v[i] for i in idx] for k, v in corpus.items()})
    return metric


# --------------------------------------------------------------------------- conlleval chunking


def test_slot_spans_matches_seqeval_get_entities_on_random_bio():
    rng = random.Random(0)
    for _ in range(600):
        tags = random_tags(rng, BIO_TAGS)
        assert set(slot_spans(tags)) == seqeval_spans(tags), tags


def test_slot_spans_matches_seqeval_with_iobes_prefixes():
    rng = random.Random(1)
    tagset = [*BIO_TAGS, "E-a", "S-a", "E-b", "S-b"]
    for _ in range(600):
        tags = random_tags(rng, tagset)
        assert set(slot_spans(tags)) == seqeval_spans(tags), tags


@pytest.mark.parametrize(
    "tags, spans",
    [
        ([], set()),
        (["O", "I-a", "I-a"], {("a", 1, 3)}),  # I- after O opens a span
        (["B-a", "I-b"], {("a", 0, 1), ("b", 1, 2)}),  # type change: two spans
        (["B-a", "B-a", "I-a"], {("a", 0, 1), ("a", 1, 3)}),
        (["B-a", "I-a"], {("a", 0, 2)}),  # span running to the end
        (["B-from-city", "I-from-city"], {("from-city", 0, 2)}),  # dash inside the type
    ],
)
def test_slot_spans_hand_cases(tags, spans):
    assert set(slot_spans(tags)) == spans


@pytest.mark.parametrize("tag", ["PER", "B-", "X-a", ""])
def test_slot_spans_rejects_malformed_tags(tag):
    with pytest.raises(ValueError, match="is not O, B-<type>"):
        slot_spans(["O", tag])


# --------------------------------------------------------------------------- slot F1 vs seqeval


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_slot_scores_equal_seqeval_default_mode_across_batches(seed):
    corpus = random_corpus(seed, n=300)
    metric = SLUMetrics(INTENTS)
    bounds = sorted(random.Random(seed).sample(range(1, 300), 4))
    for lo, hi in zip([0, *bounds], [*bounds, 300]):
        feed(metric, corpus, list(range(lo, hi)))
    result = metric.compute()
    gold, pred = corpus["gold_tags"], corpus["pred_tags"]
    assert result["slot_f1"] == pytest.approx(f1_score(gold, pred), abs=1e-9)
    assert result["slot_precision"] == pytest.approx(precision_score(gold, pred), abs=1e-9)
    assert result["slot_recall"] == pytest.approx(recall_score(gold, pred), abs=1e-9)
    assert 0.2 < result["slot_f1"] < 0.95  # a non-trivial comparison
    assert result["n"] == 300


def test_no_span_at_all_scores_zero_like_seqeval_and_warns():
    gold = [["O", "O"], ["O"]]
    pred = [["O", "O"], ["O"]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = f1_score(gold, pred)
    metric = SLUMetrics(INTENTS)
    metric.update(["play", "book"], ["play", "weather"], pred, gold)
    with pytest.warns(UserWarning, match="ill-defined"):
        result = metric.compute()
    assert expected == 0.0
    assert result["slot_f1"] == result["slot_precision"] == result["slot_recall"] == 0.0
    assert result["combined"] == pytest.approx(0.5 / 2)  # intent_acc 1/2, slot_f1 0


# --------------------------------------------------------------------------- SEMER


def test_semer_slot_errors_hand_cases():
    # Wrong boundaries of a city (substitution) and a date left out (deletion).
    gold = {("city", 2, 4), ("date", 4, 5)}
    assert semer_slot_errors(gold, {("city", 2, 3)}) == SlotErrors(1, 1, 0)
    # Right city, plus a date nobody said (insertion).
    pred = {("date", 0, 1), ("city", 1, 2)}
    assert semer_slot_errors({("city", 1, 2)}, pred) == SlotErrors(0, 0, 1)
    # A wrong type is not a substitution: one deletion and one insertion.
    assert semer_slot_errors({("city", 0, 1)}, {("date", 0, 1)}) == SlotErrors(0, 1, 1)
    # One gold span split in two: one substitution, the other piece an insertion.
    assert semer_slot_errors({("a", 0, 2)}, {("a", 0, 1), ("a", 1, 2)}) == SlotErrors(1, 0, 1)
    assert semer_slot_errors(set(), set()) == SlotErrors(0, 0, 0)
    assert SlotErrors(1, 2, 3).total == 6


def test_semer_two_utterances_by_hand():
    # u1 "fly to new york tomorrow", intent right:
    #    gold city[2:4] date[4:5], pred city[2:3] -> 1 substitution + 1 deletion = 2 errors;
    #    denominator 2 gold slots + 1 = 3.
    # u2 "weather in paris", intent wrong (flight for weather):
    #    gold city[1:2], pred date[0:1] city[1:2] -> 1 insertion + 1 intent error = 2 errors;
    #    denominator 1 gold slot + 1 = 2.
    # SEMER = (2 + 2) / (3 + 2) = 0.8
    gold_tags = [["O", "O", "B-city", "I-city", "B-date"], ["O", "B-city", "O"]]
    pred_tags = [["O", "O", "B-city", "O", "O"], ["B-date", "B-city", "O"]]
    metric = SLUMetrics(["flight", "weather"])
    metric.update(["flight", "flight"], ["flight", "weather"], pred_tags, gold_tags)
    assert metric.compute()["semer"] == pytest.approx(0.8)
    assert utterance_counts("flight", "flight", pred_tags[0], gold_tags[0]).semer_errors == 2
    assert utterance_counts("flight", "weather", pred_tags[1], gold_tags[1]).semer_errors == 2


def test_utterance_counts_by_hand():
    counts = utterance_counts("play", "play", ["B-a", "I-a", "B-b"], ["B-a", "I-a", "O"])
    # gold a[0:2]; pred a[0:2] b[2:3]: 1 correct, 1 insertion, frame wrong.
    assert counts == UtteranceCounts(
        intent_correct=1,
        gold_spans=1,
        pred_spans=2,
        correct_spans=1,
        semer_errors=1,
        frame_correct=0,
    )
    with pytest.raises(ValueError, match="2 predicted tags but 3 gold tags"):
        utterance_counts("play", "play", ["O", "O"], ["O", "O", "O"])


# --------------------------------------------------------------------------- accuracies, combined


def hand_corpus() -> dict[str, list]:
    return {
        "gold_intents": ["play", "play", "play", "weather", "weather"],
        "pred_intents": ["play", "weather", "play", "weather", "weather"],
        "gold_tags": [
            ["B-song", "I-song", "O"],
            ["B-artist", "O"],
            ["B-song", "O", "O"],
            ["B-city", "O"],
            ["O", "B-date"],
        ],
        "pred_tags": [
            ["B-song", "I-song", "O"],
            ["B-artist", "O"],
            ["B-song", "I-song", "O"],
            ["O", "O"],
            ["O", "B-date"],
        ],
    }


def test_intent_acc_combined_frame_acc_and_ma_intent_combined_by_hand():
    # u1 play/play,    song exact            -> spans g1 p1 c1, frame right
    # u2 play/weather, artist exact          -> g1 p1 c1, frame wrong (intent)
    # u3 play/play,    song too long         -> g1 p1 c0, frame wrong
    # u4 weather/weather, city missed        -> g1 p0 c0, frame wrong
    # u5 weather/weather, date exact         -> g1 p1 c1, frame right
    # all:     intent_acc 4/5; P 3/4, R 3/5, F1 = 2*(3/4)(3/5)/(27/20) = 2/3;
    #          combined (4/5 + 2/3)/2 = 11/15; frame_acc 2/5
    # play:    acc 2/3; P = R = 2/3, F1 2/3       -> combined 2/3
    # weather: acc 2/2; P 1/1, R 1/2, F1 2/3     -> combined (1 + 2/3)/2 = 5/6
    # MA INT. COMBINED = (2/3 + 5/6)/2 = 3/4 ("book" is never gold, so not averaged)
    result = feed(SLUMetrics(INTENTS), hand_corpus()).compute()
    assert result["intent_acc"] == pytest.approx(4 / 5)
    assert result["slot_f1"] == pytest.approx(2 / 3)
    assert result["combined"] == pytest.approx(11 / 15)
    assert result["frame_acc"] == pytest.approx(2 / 5)
    assert result["ma_intent_combined"] == pytest.approx(3 / 4)
    assert result["n"] == 5
    assert "worst_group/combined" not in result  # no groups given


def test_metric_keys():
    result = feed(SLUMetrics(INTENTS), hand_corpus()).compute()
    assert set(result) == {
        "intent_acc", "slot_precision", "slot_recall", "slot_f1", "combined",
        "semer", "frame_acc", "ma_intent_combined", "n",
    }
    assert all(isinstance(v, float) for v in result.values())


def test_intent_only_in_gold_is_an_error_and_unknown_gold_intent_raises():
    metric = SLUMetrics(["play", "weather"])
    # "weather" is never predicted; "navigate" is predicted but known to no split.
    metric.update(["play", "navigate"], ["weather", "weather"], [["O"], ["O"]], [["O"], ["O"]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert metric.compute()["intent_acc"] == 0.0
    with pytest.raises(ValueError, match="'navigate'"):
        metric.update(["play"], ["navigate"], [["O"]], [["O"]])


def test_inconsistent_batch_lengths_raise():
    with pytest.raises(ValueError, match="all must be equal"):
        SLUMetrics(INTENTS).update(["play"], ["play", "play"], [["O"]], [["O"], ["O"]])


def test_empty_metric_raises_and_reset_starts_over():
    metric = SLUMetrics(INTENTS)
    with pytest.raises(RuntimeError, match="before any utterance"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torchmetrics warns about compute before update
        metric.compute()
    corpus = random_corpus(5, n=40)
    feed(metric, random_corpus(6, n=40))
    metric.reset()
    assert feed(metric, corpus).compute() == feed(SLUMetrics(INTENTS), corpus).compute()


# --------------------------------------------------------------------------- groups


def test_group_metrics_equal_a_metric_fed_only_that_group():
    corpus = random_corpus(7, n=400, groups=(0, 1, -1))
    result = feed(SLUMetrics(INTENTS), corpus).compute()
    per_group = {}
    for g in (0, 1):
        idx = [i for i, x in enumerate(corpus["groups"]) if x == g]
        per_group[g] = feed(SLUMetrics(INTENTS), corpus, idx).compute()
        for name in (*PER_GROUP, "n"):
            assert result[f"group/{g}/{name}"] == pytest.approx(per_group[g][name], abs=1e-12)
    assert not any(k.startswith("group/-1/") for k in result)
    for name in PER_GROUP:
        pick = min if METRICS[name].higher_is_better else max
        assert result[f"worst_group/{name}"] == pick(per_group[g][name] for g in (0, 1))
    worst = min((0, 1), key=lambda g: per_group[g]["combined"])
    assert result["worst_group/combined_id"] == worst


def test_worst_group_by_hand():
    # Group 3 holds the utterances with errors (u2, u3, u4), group 0 the two perfect ones.
    corpus = {**hand_corpus(), "groups": [0, 3, 3, 3, 0]}
    result = feed(SLUMetrics(INTENTS), corpus).compute()
    assert result["group/0/combined"] == 1.0
    assert result["group/3/intent_acc"] == pytest.approx(2 / 3)
    # group 3: spans g3 p2 c1 -> P 1/2, R 1/3, F1 = 2*(1/6)/(5/6) = 2/5
    assert result["group/3/slot_f1"] == pytest.approx(2 / 5)
    assert result["worst_group/combined"] == pytest.approx((2 / 3 + 2 / 5) / 2)
    assert result["worst_group/combined_id"] == 3.0
    # group 3 SEMER: u2 intent error 1, u3 substitution 1, u4 deletion 1 -> 3 / (3 + 3)
    assert result["worst_group/semer"] == pytest.approx(0.5)
    assert result["group/0/semer"] == 0.0


# --------------------------------------------------------------------------- distributed state


def test_merged_states_equal_one_metric_fed_everything():
    corpus = random_corpus(11, n=200, groups=(0, 1, 2))
    whole = feed(SLUMetrics(INTENTS), corpus).compute()
    first = feed(SLUMetrics(INTENTS), corpus, list(range(0, 80)))
    second = feed(SLUMetrics(INTENTS), corpus, list(range(80, 200)))
    first.merge_state(second)
    assert first.compute() == pytest.approx(whole, abs=1e-12)


def test_ddp_cat_sync_equals_one_metric_fed_everything():
    """Each 'rank' gathers its rows and the other rank's, as torchmetrics' all-gather does."""
    corpus = random_corpus(12, n=150, groups=(0, 1))
    whole = feed(SLUMetrics(INTENTS), corpus).compute()
    states: dict[int, torch.Tensor] = {}

    def rank(r: int) -> SLUMetrics:
        def all_gather(tensor: torch.Tensor, group=None) -> list[torch.Tensor]:
            states[r] = tensor
            return [states[0], states[1]]

        return SLUMetrics(INTENTS, dist_sync_fn=all_gather, distributed_available_fn=lambda: True)

    ranks = [rank(0), rank(1)]
    feed(ranks[0], corpus, list(range(0, 150, 2)))  # two update calls on rank 0
    feed(ranks[0], corpus, list(range(1, 60, 2)))
    feed(ranks[1], corpus, list(range(61, 150, 2)))
    # What rank 1 sends: its rows, pre-concatenated as torchmetrics does before gathering.
    states[1] = torch.cat(ranks[1].rows)
    assert ranks[0].compute() == pytest.approx(whole, abs=1e-12)
    assert len(ranks[0].rows) == 2  # unsynced again after compute: local state kept
