"""``python -m robustnlu.predict`` on a tiny trained model: what it refuses, each as one ``error:``
line with exit status 2, before anything is written, and what it still answers at the edge."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest
import torch

from integration_helpers import (FAST, cli_env, compose_config, file_bytes, jsonl_overrides, run_cli,
                                 write_snips_sample_jsonl)
from robustnlu.data.utterance import Utterance
from robustnlu.predict import main
from robustnlu.predictor import Predictor
from robustnlu.runlock import LOCK_NAME
from robustnlu.train import run

#: the tiny encoder's positions (conf/encoder/tiny.yaml) less [CLS] and [SEP]: the most one-token words it reads
WORDS_READ = 128 - 2


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    sample = write_snips_sample_jsonl(out / "data", n_train=60, n_eval=20)
    results = run(compose_config([*FAST, *jsonl_overrides(sample), "trainer.max_epochs=1"], out / "run"))
    return out / "run" / results["best_checkpoint"]


def refused(capsys, argv: list[str]) -> str:
    """The stderr of ``main(argv)``, which must exit with 2 and print nothing on stdout."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err


#: the training stack: what predict must not import (with them: seconds of start-up, torch._dynamo)
TRAINING_STACK = ("pytorch_lightning", "lightning_fabric", "torchmetrics")


def test_predict_answers_without_importing_the_training_stack(ckpt, tmp_path):
    """Predict reads the model alone: a process that ran it holds none of Lightning's modules nor
    torchmetrics (its start-up is what a deadline on a slow machine measures)."""
    probe = ("import sys\nfrom robustnlu.predict import main\ncode = main(sys.argv[1:])\n"
             f"print('loaded:', *sorted(m for m in {TRAINING_STACK!r} if m in sys.modules))\nsys.exit(code)\n")
    proc = subprocess.run([sys.executable, "-c", probe, "--ckpt", str(ckpt), "play adele"], cwd=tmp_path,
                          env=cli_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("intent: ") and proc.stdout.splitlines()[-1] == "loaded:"


def test_predictions_equal_the_runs_own_decoding_of_its_test_split(ckpt):
    """The predictor's answers on the test split are those the run's `SLUModule` decoded from the
    same best checkpoint (predictions/test.jsonl), in the split's order."""
    lines = (ckpt.parent.parent / "predictions" / "test.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    utterances = [Utterance(r["uid"], tuple(r["tokens"]), tuple(r["gold_tags"]), r["gold_intent"]) for r in rows]
    predicted = Predictor.from_checkpoint(ckpt).predict_utterances(utterances, batch_size=8)
    assert len(rows) == 20 and predicted == [(r["pred_intent"], r["pred_tags"]) for r in rows]


def test_an_utterance_longer_than_the_encoder_reads_is_refused(ckpt, tmp_path):
    """'play' is one sub-word token: 126 words fill the 128 positions with [CLS] and [SEP]; 127 do
    not (before: the words past 126 were tagged O unread; 5,000 words: a tensor size error)."""
    for words in (WORDS_READ + 1, 5000):
        proc = run_cli(["--ckpt", str(ckpt), " ".join(["play"] * words)], cwd=tmp_path, module="robustnlu.predict")
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr == (f"error: the utterance has {words} words, longer than the model reads: its encoder "
                               f"takes 128 sub-word tokens, the first {WORDS_READ} words; shorten or split the "
                               "utterance\n")


def test_a_long_line_of_a_file_is_refused_by_line_and_nothing_is_written(ckpt, tmp_path, capsys):
    texts = tmp_path / "in.txt"
    texts.write_text("play adele\n\n" + " ".join(["play"] * (WORDS_READ + 1)) + "\n")
    err = refused(capsys, ["--ckpt", str(ckpt), "--file", str(texts), "--out", str(tmp_path / "out.jsonl")])
    assert err == (f"error: {texts}:3: {WORDS_READ + 1} words, longer than the model reads: its encoder takes 128 "
                   f"sub-word tokens, the first {WORDS_READ} words; shorten or split the utterance\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


def test_an_utterance_of_as_many_words_as_the_encoder_reads_is_answered(ckpt, tmp_path, capsys):
    texts = tmp_path / "in.txt"
    texts.write_text(" ".join(["play"] * WORDS_READ) + "\n")
    assert main(["--ckpt", str(ckpt), "--file", str(texts), "--out", str(tmp_path / "out.jsonl")]) == 0
    (row,) = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(row["tokens"]) == len(row["tags"]) == WORDS_READ


def test_rows_of_a_file_with_blank_lines_name_their_lines(ckpt, tmp_path, capsys):
    texts = tmp_path / "in.txt"
    texts.write_text("play adele\n\n  \nbook a table for ünïcödé 🎵\n\nwhat is the weather\n")
    assert main(["--ckpt", str(ckpt), "--file", str(texts)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["line"], r["text"]) for r in rows] == [
        (1, "play adele"), (4, "book a table for ünïcödé 🎵"), (6, "what is the weather")]
    assert all(len(r["tokens"]) == len(r["tags"]) == len(r["text"].split()) for r in rows)


@pytest.mark.parametrize("utterance", ["", "   "])
def test_an_empty_utterance_is_refused(ckpt, capsys, utterance):
    assert refused(capsys, ["--ckpt", str(ckpt), utterance]) == "error: the utterance is empty: there is nothing to parse\n"


def test_an_out_that_is_an_input_or_a_directory_or_unwritable_is_refused(ckpt, tmp_path, capsys):
    texts = tmp_path / "in.txt"
    texts.write_text("play adele\n")
    (tmp_path / "link.txt").symlink_to(texts)
    (tmp_path / "folder").mkdir()
    before = file_bytes(tmp_path)
    ckpt_bytes = ckpt.read_bytes()
    cases = {
        texts: f"{texts} is an input of this command; writing it would overwrite the input: choose another --out",
        tmp_path / "folder" / ".." / "link.txt": f"{tmp_path / 'folder' / '..' / 'link.txt'} is an input of this command "
                                                 f"({texts}); writing it would overwrite the input: choose another --out",
        ckpt: f"{ckpt} is an input of this command; writing it would overwrite the input: choose another --out",
        tmp_path / "folder": f"{tmp_path / 'folder'} is a directory, not a file",
        texts / "out.jsonl": f"cannot write {texts / 'out.jsonl'}: {texts} is not a directory",
    }
    for out, problem in cases.items():
        assert refused(capsys, ["--ckpt", str(ckpt), "--file", str(texts), "--out", str(out)]) == f"error: --out: {problem}\n"
    assert file_bytes(tmp_path) == before and ckpt.read_bytes() == ckpt_bytes


def test_an_out_the_system_refuses_to_create_is_one_error_line(ckpt, tmp_path, capsys):
    """/proc takes no new folder (the check before the work cannot know): the write's error, one line."""
    texts = tmp_path / "in.txt"
    texts.write_text("play adele\n")
    err = refused(capsys, ["--ckpt", str(ckpt), "--file", str(texts), "--out", "/proc/robustnlu-test/out.jsonl"])
    assert err == "error: --out: cannot write /proc/robustnlu-test: No such file or directory\n"


def test_out_without_file_is_refused(ckpt, tmp_path, capsys):
    err = refused(capsys, ["--ckpt", str(ckpt), "--out", str(tmp_path / "out.jsonl"), "play adele"])
    assert err == "error: --out needs --file (the answer for an utterance on the command line is printed)\n"
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize("device, problem", [
    ("bogus", "--device='bogus' is not a device: cpu, cuda, cuda:<index> or mps"),
    ("meta", "--device=meta: not a device to predict on: cpu, cuda, cuda:<index> or mps"),
])
def test_a_device_that_is_no_device_is_refused(ckpt, capsys, device, problem):
    assert refused(capsys, ["--ckpt", str(ckpt), "--device", device, "play adele"]) == f"error: {problem}\n"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: --device cuda is valid here")
def test_cuda_without_cuda_is_refused(ckpt, capsys):
    err = refused(capsys, ["--ckpt", str(ckpt), "--device", "cuda", "play adele"])
    assert err == f"error: --device=cuda: this machine has no CUDA device (torch {torch.__version__}); use cpu\n"


def test_a_cuda_index_past_the_devices_is_refused(ckpt, capsys):
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    err = refused(capsys, ["--ckpt", str(ckpt), "--device", f"cuda:{count}", "play adele"])
    if count:
        assert err == f"error: --device=cuda:{count}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}\n"
    else:
        assert err == f"error: --device=cuda:0: this machine has no CUDA device (torch {torch.__version__}); use cpu\n"


def test_a_checkpoint_of_a_run_whose_training_still_runs_is_refused_and_one_whose_process_is_gone_is_read(
        ckpt, tmp_path, capsys):
    """A live process holds the run's run.lock (this test's parent here): its checkpoints are
    half-trained, so predict refuses it in one line, as evaluate does; a lock left by a process that
    is gone does not stop it."""
    run_dir = tmp_path / "run"
    shutil.copytree(ckpt.parent.parent, run_dir)
    copy = run_dir / "checkpoints" / ckpt.name
    lock = run_dir / LOCK_NAME
    lock.write_text(json.dumps({"pid": os.getppid(), "host": socket.gethostname(), "since": "2026-01-01T00:00:00"}))
    assert refused(capsys, ["--ckpt", str(copy), "play adele"]) == (
        f"error: {run_dir} is still running: process {os.getppid()} on {socket.gethostname()} holds it (since "
        f"2026-01-01T00:00:00, {lock}); wait for it to end, or if that process is gone, remove the lock file\n")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    lock.write_text(json.dumps({"pid": gone.pid, "host": socket.gethostname()}))
    assert main(["--ckpt", str(copy), "play adele"]) == 0
    assert capsys.readouterr().out.startswith("intent: ")
