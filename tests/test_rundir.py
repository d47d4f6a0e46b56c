"""`robustnlu.rundir`: the run directory's files, its predictions (plain and a record's compressed) and
how runs are found under a sweep."""

from __future__ import annotations

import gzip
import json
import lzma
from pathlib import Path

import pytest

from robustnlu.errors import DataError
from robustnlu.rundir import RunDir, finished_runs, job_order, read_json_object, read_predictions, sweep_runs, walk

ROW = {"uid": "u0", "tokens": ["play", "adele"], "gold_intent": "play", "pred_intent": "play",
       "gold_tags": ["O", "B-artist"], "pred_tags": ["O", "O"]}


def rows(n: int, intent: str = "play") -> list[dict]:
    return [{**ROW, "uid": f"u{i}", "pred_intent": intent} for i in range(n)]


def jsonl(rs: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rs)


def finished(path, seed=0):
    path.mkdir(parents=True)
    (path / "results.json").write_text(json.dumps({"seed": seed, "best_checkpoint": "checkpoints/best.ckpt"}))
    return path


def test_files_of_a_run_and_of_a_checkpoint(tmp_path):
    run = RunDir(finished(tmp_path / "run", seed=3))
    assert run.finished() and run.is_run()
    assert run.results()["seed"] == 3 and run.status() is None and run.meta() == {}
    assert run.best_checkpoint() == tmp_path / "run" / "checkpoints" / "best.ckpt"
    assert run.last_checkpoint == tmp_path / "run" / "checkpoints" / "last.ckpt"
    assert RunDir.of_checkpoint(run.best_checkpoint()).path == run.path.resolve()
    assert run.config_file.name == "config.yaml" and run.robustness_file.name == "robustness.json"
    assert run.metrics_csv == run.path / "csv" / "metrics.csv"  # a training run's log
    (run.path / "metrics.csv").write_text("epoch\n")
    assert run.metrics_csv == run.path / "metrics.csv"  # a reproduction record's copy
    (run.path / "status.json").write_text('{"state": "failed"}')
    (run.path / "meta.json").write_text('{"part": "A"}')
    assert run.status() == {"state": "failed"} and run.meta() == {"part": "A"}
    unfinished = RunDir(tmp_path / "killed")
    unfinished.path.mkdir()
    assert not unfinished.is_run()
    (unfinished.path / "status.json").write_text('{"state": "running"}')
    assert unfinished.is_run() and not unfinished.finished()


def test_read_json_object_names_the_file_and_problem(tmp_path):
    path = tmp_path / "results.json"
    for text, problem in (("{not json", "invalid JSON"), ("[1, 2]", "expected a JSON object")):
        path.write_text(text)
        with pytest.raises(DataError, match=problem) as info:
            read_json_object(path)
        assert str(info.value).startswith(str(path))


def test_predictions_of_a_run_and_malformed_lines(tmp_path):
    a = rows(3)
    run = RunDir(tmp_path / "run")
    path = run.path / "predictions" / "test.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text(jsonl(a) + "\n")
    assert run.predictions() == a
    assert read_predictions(path) == a
    with pytest.raises(DataError, match="valid.jsonl: no valid predictions"):
        run.predictions("valid")
    bad_rows = {
        "{not json": "invalid JSON",
        json.dumps({**a[0], "uid": "x", "pred_tags": ["O"] * 9}): "9 predicted tags",
        json.dumps({k: v for k, v in a[0].items() if k != "gold_intent"}): "missing key",
        json.dumps({**a[0], "uid": "y", "gold_tags": "O O"}): "gold_tags must be a list of strings",
        json.dumps(a[0]): "already on line 1",
    }
    for line, problem in bad_rows.items():
        path.write_text(json.dumps(a[0]) + "\n" + line + "\n")
        with pytest.raises(DataError, match=problem) as info:
            run.predictions()
        assert str(info.value).startswith(f"{path}:2: ")


@pytest.mark.parametrize(("suffix", "compress"), [(".xz", lzma.compress), (".gz", gzip.compress)])
def test_predictions_of_a_compact_record(tmp_path, suffix, compress):
    """A record of `robustnlu.reproduce` keeps ``predictions/<split>.jsonl.xz`` (a study's records
    written before, ``.jsonl.gz``); the plain file wins."""
    a, b = rows(3), rows(2, intent="weather")
    run = RunDir(tmp_path / "record")
    compressed = run.path / "predictions" / f"test.jsonl{suffix}"
    compressed.parent.mkdir(parents=True)
    compressed.write_bytes(compress(jsonl(a).encode()))
    assert run.predictions_file() == compressed
    assert run.predictions() == a == read_predictions(compressed)
    (run.path / "predictions" / "test.jsonl").write_text(jsonl(b))
    assert run.predictions() == b


def test_a_gzipped_record_cut_short_or_not_utf8_names_the_file(tmp_path):
    """A record's predictions cut short (a copy interrupted, a disk full) or corrupt: a `DataError`
    naming the file and the last line read, not gzip's EOFError."""
    path = tmp_path / "test.jsonl.gz"
    whole = gzip.compress(jsonl(rows(3)).encode())
    path.write_bytes(whole[:-4])  # the trailer's length field: the 3 rows decompress, then the stream ends
    with pytest.raises(DataError) as info:
        read_predictions(path)
    assert str(info.value) == (f"{path}: cannot be read past line 3 (cut short or corrupt?): EOFError: Compressed "
                               "file ended before the end-of-stream marker was reached")
    path.write_bytes(whole[:10])  # the header alone
    with pytest.raises(DataError, match=r": cannot be read past line 0 \(cut short or corrupt\?\): EOFError: "):
        read_predictions(path)
    path.write_bytes(gzip.compress(jsonl(rows(1)).encode() + b"\xff\n"))
    with pytest.raises(DataError, match=r": cannot be read past line 0 \(cut short or corrupt\?\): UnicodeDecodeError: "):
        read_predictions(path)


def test_walk_finds_runs_at_any_depth_but_not_inside_a_run(tmp_path):
    sweep = tmp_path / "sweep"
    finished(sweep / "iid" / "erm-1")
    finished(sweep / "ood" / "erm-1")
    finished(sweep / "iid" / "erm-1" / "nested")  # inside a run: not a run of the sweep
    finished(sweep / "iid" / "erm-2" / "checkpoints")  # a run's own sub-folder: never walked
    (sweep / "ood" / "topk-1").mkdir()
    (sweep / "ood" / "topk-1" / "status.json").write_text('{"state": "failed"}')
    assert [r.path.relative_to(sweep).as_posix() for r in walk(sweep)] == ["iid/erm-1", "ood/erm-1", "ood/topk-1"]
    assert [r.path for r in walk(sweep / "iid" / "erm-1")] == [sweep / "iid" / "erm-1"]
    # finished runs only, each once though found under two of the given directories
    assert [r.path.relative_to(sweep).as_posix() for r in finished_runs([sweep, sweep / "ood"])] == [
        "iid/erm-1", "ood/erm-1"]


def test_finished_runs_counts_a_run_once_however_its_path_is_spelled(tmp_path, monkeypatch):
    """Relative and absolute, with ``.`` and ``..``, through a symlink: one run directory, one run
    (a report given overlapping folders must not count a seed twice)."""
    run = finished(tmp_path / "a" / "run")
    (tmp_path / "link").symlink_to(run, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    spellings = [Path("a/run"), Path("a/./run/../run"), run, tmp_path / "link", Path("link")]
    assert [r.path for r in finished_runs(spellings)] == [Path("a/run")]
    assert [r.path for r in finished_runs([tmp_path / "link", Path("a")])] == [tmp_path / "link"]


def test_sweep_runs_in_job_order(tmp_path):
    for name in ("10-b", "2-a", "1-c", "x"):
        finished(tmp_path / name)
    (tmp_path / "3-failed").mkdir()
    assert [r.path.name for r in sweep_runs(tmp_path)] == ["1-c", "2-a", "10-b", "x"]
    assert [r.path.name for r in sweep_runs(tmp_path / "2-a")] == ["2-a"]
    assert sweep_runs(tmp_path / "3-failed") == [] and sweep_runs(tmp_path / "missing") == []
    assert sorted([tmp_path / "b", tmp_path / "3-x", tmp_path / "20"], key=job_order)[0].name == "3-x"
