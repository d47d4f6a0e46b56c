"""The Table-4 aggregation reproduces the paper's own headline numbers (Krone et al. 2021,
abstract: noise costs 13.5% IC accuracy and 18.9 SL F1 points on average; augmentation
recovers 11.5% and 17.3), computed from its Table 4."""

from __future__ import annotations

import json

import pytest

from robustnlu.analysis.robustness import NoiseScore, effects, effects_table, main, match_cells, mean_effects, score_table

# Table 4 of paper 002, transcribed: (phenomenon, model) -> ATIS IC orig, noisy, SL orig, noisy,
# SNIPS IC orig, noisy, SL orig, noisy
TABLE4 = {
    ("casing", "base"): (98.8, 73.1, 95.6, 16.2, 99.0, 23.3, 96.3, 5.0),
    ("casing", "aug"): (98.7, 98.1, 94.6, 94.9, 98.9, 98.8, 96.0, 90.0),
    ("misspelling", "base"): (98.8, 97.3, 95.6, 87.0, 99.0, 98.7, 96.3, 91.2),
    ("misspelling", "aug"): (98.7, 97.8, 95.5, 94.3, 99.1, 98.8, 96.4, 95.3),
    ("abbreviation", "base"): (96.0, 86.5, 91.9, 75.9, 97.9, 96.9, 95.8, 85.2),
    ("abbreviation", "aug"): (96.6, 88.9, 91.5, 89.1, 98.3, 98.3, 96.6, 94.8),
    ("morphology", "base"): (98.0, 97.1, 92.3, 93.5, 98.0, 96.9, 95.8, 85.2),
    ("morphology", "aug"): (96.8, 95.9, 94.0, 94.1, 98.3, 98.3, 97.2, 88.8),
    ("synonym", "base"): (96.9, 57.6, 89.0, 86.6, 98.8, 98.3, 95.2, 94.8),
    ("synonym", "aug"): (97.2, 90.4, 92.3, 90.2, 99.2, 98.7, 96.9, 96.4),
    ("paraphrase", "base"): (97.1, 90.9, 88.3, 86.7, 98.8, 98.5, 95.5, 93.7),
    ("paraphrase", "aug"): (97.1, 90.5, 88.8, 86.8, 99.0, 98.8, 95.9, 94.4),
}


def scores(model: str) -> list[NoiseScore]:
    out = []
    for (noise, m), v in TABLE4.items():
        if m != model:
            continue
        for dataset, (ic_o, ic_n, sl_o, sl_n) in (("atis", v[:4]), ("snips", v[4:])):
            out.append(NoiseScore(dataset, noise, 100, {"intent_acc": ic_o / 100, "slot_f1": sl_o / 100, "frame_acc": 0.5},
                                  {"intent_acc": ic_n / 100, "slot_f1": sl_n / 100, "frame_acc": 0.4}))
    return out


def test_paper_table4_gives_the_papers_headline_averages():
    pairs = match_cells(scores("base"), scores("aug"))
    assert len(pairs) == 12
    ic, sl = mean_effects(pairs, "intent_acc"), mean_effects(pairs, "slot_f1")
    assert 100 * ic["drop"] == pytest.approx(-13.50, abs=0.005)
    assert 100 * sl["drop"] == pytest.approx(-18.88, abs=0.005)
    assert 100 * ic["gain"] == pytest.approx(11.52, abs=0.005)
    assert 100 * sl["gain"] == pytest.approx(17.34, abs=0.005)
    # digest A.7, derived by hand: the mean clean cost is +0.07 IC / +0.68 SL
    assert 100 * ic["clean_cost"] == pytest.approx(0.07, abs=0.005)
    assert 100 * sl["clean_cost"] == pytest.approx(0.68, abs=0.005)


def test_effects_of_one_cell_by_hand():
    base = NoiseScore("atis", "synonym", 10, {"intent_acc": 0.969}, {"intent_acc": 0.576})
    aug = NoiseScore("atis", "synonym", 10, {"intent_acc": 0.972}, {"intent_acc": 0.904})
    e = {k: round(100 * v, 1) for k, v in effects(base, aug, "intent_acc").items()}
    assert e == {"drop": -39.3, "gain": 32.8, "residual": -6.8, "clean_cost": 0.3}
    with pytest.raises(ValueError, match="cells differ"):
        effects(base, NoiseScore("snips", "synonym", 1, {"intent_acc": 1.0}, {"intent_acc": 1.0}), "intent_acc")


def test_tables_show_each_cell_and_the_unweighted_mean():
    table = score_table(scores("base")).splitlines()
    assert len(table) == 2 + 12 + 1
    casing_snips = next(line for line in table if line.startswith("| snips | casing"))
    assert "| 99.0 | 23.3 | -75.7 |" in casing_snips and "| 96.3 | 5.0 | -91.3 |" in casing_snips
    assert "-13.5" in table[-1] and "-18.9" in table[-1]
    effects_lines = effects_table(match_cells(scores("base"), scores("aug"))).splitlines()
    assert "+11.5" in effects_lines[-1] and "+17.3" in effects_lines[-1] and "-13.5" in effects_lines[-1]


def test_round_trip_and_cli_comparison(tmp_path, capsys):
    for model in ("base", "aug"):
        run = tmp_path / model
        run.mkdir()
        entry = {"scores": [s.to_dict() for s in scores(model)], "pairs": [], "checkpoint": "x.ckpt"}
        (run / "robustness.json").write_text(json.dumps({"suites": {"noisy_nlu": entry}}))
    assert [NoiseScore.from_dict(s.to_dict()) for s in scores("aug")] == scores("aug")
    assert main([str(tmp_path / "base"), str(tmp_path / "aug")]) == 0
    out = capsys.readouterr().out
    assert "aug vs" in out and "+11.5" in out
    assert main([str(tmp_path / "missing")]) == 2
    assert "no robustness results" in capsys.readouterr().err


def write_run(folder, model, augment):
    """A finished run of ``model``'s Table-4 scores whose results.json records ``augment``."""
    folder.mkdir(parents=True)
    entry = {"scores": [s.to_dict() for s in scores(model)], "pairs": [], "checkpoint": "x.ckpt"}
    (folder / "robustness.json").write_text(json.dumps({"suites": {"noisy_nlu": entry}}))
    (folder / "results.json").write_text(json.dumps({"augment": augment}))


MISSPELLING = {"noise": {"name": "misspelling", "rate": 0.2}, "mode": "inplace"}


def test_a_sweep_directory_compares_its_augmented_run_with_its_run_without_augmentation(tmp_path, capsys):
    """Job folders of augment=none,misspelling differ in their hash alone: the baseline is picked by
    what the run recorded, not by where it sorts (here the augmented run's folder sorts first)."""
    sweep = tmp_path / "sweep"
    write_run(sweep / "snips-erm-seed0-0aaaaaaa", "aug", MISSPELLING)
    write_run(sweep / "snips-erm-seed0-fbbbbbbb", "base", None)
    assert main([str(sweep)]) == 0
    headings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("## ")]
    base = f"{sweep / 'snips-erm-seed0-fbbbbbbb'} (augment=none)"
    aug = f"{sweep / 'snips-erm-seed0-0aaaaaaa'} (augment=misspelling)"
    assert headings == [f"## noisy_nlu: {base}", f"## noisy_nlu: {aug} vs {base} (points)"]
    assert main([str(sweep / "snips-erm-seed0-fbbbbbbb"), str(sweep / "snips-erm-seed0-0aaaaaaa")]) == 0
    assert "+11.5" in capsys.readouterr().out  # the same comparison as naming the two runs


@pytest.mark.parametrize("augments, problem", [
    ([None, None], "2 finished runs trained without augmentation (augment=none), not one baseline"),
    ([MISSPELLING], "0 finished runs trained without augmentation (augment=none), not one baseline"),
    ([], "neither a run directory nor a sweep of finished runs"),
    ([{"mode": "inplace"}], "augment must be null or name its noise"),
])
def test_a_sweep_without_exactly_one_baseline_is_one_error_line(tmp_path, capsys, augments, problem):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    for k, augment in enumerate(augments):
        write_run(sweep / f"job{k}", "base", augment)
    assert main([str(sweep)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("error: ") and problem in captured.err


def test_runs_scored_on_different_utterances_are_refused(tmp_path, capsys):
    """A synthetic suite noises the run's own split seeded by the run's seed: another seed changes
    which utterances a transform alters, so a cell's pairs (n) differ and no effect is computed."""
    for model, n in (("base", 100), ("aug", 97)):
        run = tmp_path / model
        run.mkdir()
        entry = {"scores": [{**s.to_dict(), "n": n if s.cell == ("snips", "synonym") else 100} for s in scores(model)],
                 "pairs": [], "checkpoint": "x.ckpt"}
        (run / "robustness.json").write_text(json.dumps({"suites": {"synthetic": entry}}))
    assert main([str(tmp_path / "base"), str(tmp_path / "aug")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"error: {tmp_path / 'aug' / 'robustness.json'}: suite synthetic, snips synonym: 97 "
                            "utterance pairs, but 100 in the baseline's: the two runs were scored on different "
                            "utterances (another seed or split?); compare runs scored on the same ones\n")
