"""Greedy-Minmax (thesis 5.3.3, 6.2.2) against a brute-force NumPy Minmax, the incumbent's
re-scoring, the KL filter's boundary (thesis 5.6.1), the state round trip and a training run whose
best checkpoint must be the last incumbent."""

from __future__ import annotations

import csv
import io
import math

import numpy as np
import pytest
import torch

from integration_helpers import FAST, SMALL_DRIFT, compose_config, jsonl_overrides, write_snips_sample_jsonl
from robustnlu.selection.greedy_minmax import GreedyMinmax


def t(values):
    return torch.tensor(values, dtype=torch.float32)


def update(criterion, scores, log_weights):
    """One validation with ``scores`` as both errors and losses."""
    return criterion.update(t(scores), t(scores), t(log_weights))


def np_ratios(lw):
    e = np.exp(lw - lw.max())
    return len(lw) * e / e.sum()


def np_full_minmax(scores, log_weights, kappa):
    """Per validation t: (argmin_{i≤t} max_{a∈A_t} mean r_a·s_i (full Minmax), its risk, |A_t|)."""
    adversaries, winners = [np.ones(scores.shape[1])], []
    for step in range(len(scores)):
        r = np_ratios(log_weights[step])
        if np.mean(r * np.log(r)) <= kappa:
            adversaries.append(r)
        risks = [max(np.mean(a * s) for a in adversaries) for s in scores[: step + 1]]
        winners.append((int(np.argmin(risks)), min(risks), len(adversaries)))
    return winners


def test_greedy_equals_full_minmax_when_the_minmax_winner_is_the_incumbent_or_the_newcomer():
    # Greedy-Minmax keeps only {incumbent, newest}: it equals full Minmax at validation t as long as
    # every earlier winner was the previous winner or the newest model (then by induction)
    rng = np.random.default_rng(0)
    applicable = rejected = 0
    for _ in range(150):
        steps, n = 6, 25
        scores = rng.uniform(0, 1, size=(steps, n))
        log_weights = rng.normal(size=(steps, n)) * rng.uniform(0.3, 2.8, size=(steps, 1))
        winners = np_full_minmax(scores, log_weights, math.log(10))
        criterion = GreedyMinmax(score="loss")
        for step in range(steps):
            out = criterion.update(t(scores[step] + 5), t(scores[step]), t(log_weights[step]))  # errors unused
            if step and winners[step][0] not in (winners[step - 1][0], step):
                break
            incumbent = criterion.state_dict()["incumbent_scores"].numpy()
            np.testing.assert_allclose(incumbent, scores[winners[step][0]].astype(np.float32), rtol=1e-7)
            assert out["minmax_incumbent_risk"] == pytest.approx(winners[step][1], rel=1e-5)
            assert out["adversaries"] == winners[step][2]
        else:
            applicable += 1
        rejected += steps + 1 - winners[-1][2]
    assert applicable >= 30 and rejected >= 30  # neither condition is vacuous


def test_the_incumbent_is_rescored_on_the_enlarged_adversary_set():
    criterion = GreedyMinmax()
    first = update(criterion, [1, 1, 0, 0], [0, 0, 0, 0])  # uniform only: R = 0.5
    assert first["minmax_incumbent"] == 1 and first["minmax_incumbent_risk"] == 0.5
    # a new adversary on the first two examples: r̂ = (1.5, 1.5, 0.5, 0.5), KL ≈ 0.27
    lw = [math.log(3), math.log(3), 0, 0]
    second = update(criterion, [1, 0, 1, 0], lw)
    # the new model: max(0.5, (1.5 + 0.5)/4) = 0.5; the incumbent re-scored: max(0.5, 3/4) = 0.75.
    # Against its stale 0.5 the new model would not be strictly better.
    assert second["minmax_risk"] == pytest.approx(0.5) and second["minmax_incumbent_risk"] == pytest.approx(0.5)
    assert second["minmax_incumbent"] == 2 and second["adversaries"] == 2
    third = update(criterion, [1, 0, 0, 1], lw)  # not strictly better (0.5): the incumbent stays
    assert third["minmax_incumbent"] == 2 and third["minmax_risk"] == pytest.approx(0.5)


@pytest.mark.parametrize("n", [5, 49])  # 49 · softmax(0) is not exactly 1 in floating point
def test_without_an_adversary_the_criterion_is_the_validation_error(n):
    criterion = GreedyMinmax()
    errors = [[1, 1, 0, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 0, 0]]
    out = [update(criterion, e + [0] * (n - 5), [0.0] * n) for e in errors]
    assert [o["minmax_risk"] for o in out] == pytest.approx([2 / n, 1 / n, 3 / n])
    assert [o["minmax_incumbent"] for o in out] == [1, 2, 2] and out[-1]["adversaries"] == 1


@pytest.mark.parametrize("kl_threshold", [math.log(10), 2.302585])
def test_kl_filter_accepts_a_uniform_ten_percent_subset_and_rejects_five_percent(kl_threshold):
    n = 200
    ten, five = np.full(n, -np.inf), np.full(n, -np.inf)
    ten[::10], five[::20] = 0.0, 0.0  # uniform on 10% / 5% of the examples: KL = log 10 / log 20
    criterion = GreedyMinmax(kl_threshold=kl_threshold)
    out = update(criterion, [0.0] * n, five)
    assert out["adversary_kl"] == pytest.approx(math.log(20)) and out["adversaries"] == 1
    out = update(criterion, [0.0] * n, ten)
    assert out["adversary_kl"] == pytest.approx(math.log(10)) and out["adversaries"] == 2
    errors = np.zeros(n)
    errors[::10] = 1  # wrong exactly on the adversary's subset: its robust error is 1
    assert update(criterion, errors.tolist(), [0.0] * n)["minmax_risk"] == pytest.approx(1.0)


def test_score_loss_uses_the_losses():
    criterion = GreedyMinmax(score="loss")
    out = criterion.update(t([1, 1]), t([0.5, 2.5]), t([0, 0]))
    assert out["minmax_risk"] == pytest.approx(1.5)
    with pytest.raises(ValueError, match="score="):
        GreedyMinmax(score="accuracy")


def test_state_round_trip_continues_identically():
    rng = np.random.default_rng(1)
    original = GreedyMinmax()
    for _ in range(4):
        update(original, rng.integers(0, 2, 30).tolist(), (rng.normal(size=30) * 0.8).tolist())
    buffer = io.BytesIO()
    torch.save(original.state_dict(), buffer)
    buffer.seek(0)
    restored = GreedyMinmax()
    restored.load_state_dict(torch.load(buffer, weights_only=True))
    for _ in range(3):
        errors, lw = rng.integers(0, 2, 30).tolist(), (rng.normal(size=30) * 0.8).tolist()
        assert update(restored, errors, lw) == update(original, errors, lw)
    assert torch.equal(restored.adversaries, original.adversaries) and original.adversaries.size(0) > 2


@pytest.mark.slow
def test_rpdro_run_tests_the_last_greedy_minmax_incumbent(tmp_path):
    from robustnlu.train import run

    # score=loss: the tiny model's frame error stays ≈ 100% for these few epochs, so with 0-1 errors
    # the incumbent would never change; its losses do
    sample = write_snips_sample_jsonl(tmp_path / "snips", n_train=600, n_eval=60)
    overrides = [*FAST, *jsonl_overrides(sample), *SMALL_DRIFT, "method=rpdro", "selection=greedy_minmax",
                 "selection.criterion.score=loss", "trainer.max_epochs=4", f"paths.cache_dir={tmp_path / 'cache'}",
                 "keep_last_checkpoint=true"]
    results = run(compose_config(overrides, tmp_path / "run"))
    with open(tmp_path / "run" / "csv" / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("valid/minmax_incumbent")]
    counters = [float(r["valid/minmax_incumbent"]) for r in rows]
    assert len(counters) == 4 and counters == sorted(counters) and counters[0] == 1 and counters[-1] >= 2
    incumbent_row = rows[counters.index(max(counters))]
    assert results["best_checkpoint"] == f"checkpoints/best-epoch{int(incumbent_row['epoch']):03d}.ckpt"
    best = torch.load(tmp_path / "run" / results["best_checkpoint"], weights_only=True)
    last = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=True)
    assert best["selection"]["incumbent_changes"] == max(counters) == last["selection"]["incumbent_changes"]
    assert torch.equal(best["selection"]["incumbent_scores"], last["selection"]["incumbent_scores"])
    # the incumbent's risk on the final adversary set is the last one logged
    adversaries, scores = last["selection"]["adversaries"], last["selection"]["incumbent_scores"]
    risk = (adversaries @ scores).max().item() / scores.numel()
    assert risk == pytest.approx(float(rows[-1]["valid/minmax_incumbent_risk"]), rel=1e-5)
    # the tested model is the incumbent: its validation metrics are those logged at its epoch
    assert results["metrics"]["valid"]["combined"] == pytest.approx(float(incumbent_row["valid/combined"]), abs=1e-6)
