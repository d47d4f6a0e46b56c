"""The training CLI as a user meets it: bad input gives one line naming file and line, exit
code != 0, no traceback and no output; secrets never reach the run directory."""

from __future__ import annotations

import json
import lzma
import subprocess
import sys
from pathlib import Path

import pytest

from integration_helpers import FAST, jsonl_overrides, run_cli, write_snips_sample_jsonl


@pytest.fixture
def sample(tmp_path):
    return write_snips_sample_jsonl(tmp_path / "data", n_train=48, n_eval=16)


BAD_LINES = {
    "tag count": (json.dumps({"tokens": ["play", "adele"], "tags": ["O"], "intent": "PlayMusic"}), "tag"),
    "invalid BIO": (json.dumps({"tokens": ["play", "adele"], "tags": ["O", "I-artist"], "intent": "PlayMusic"}), "I-"),
    "not JSON": ('{"tokens": ["play"', "JSON"),
}


@pytest.mark.parametrize("kind", sorted(BAD_LINES))
def test_malformed_input_one_line_error_no_output(sample, tmp_path, kind):
    line, needle = BAD_LINES[kind]
    lines = sample["train"].read_text().splitlines()
    lines.insert(4, line)  # becomes line 5
    sample["train"].write_text("\n".join(lines) + "\n")
    run_dir = tmp_path / "outputs" / "run"
    proc = run_cli([*FAST, *jsonl_overrides(sample), f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert proc.returncode == 2
    err_lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert err_lines[-1].startswith(f"error: {sample['train']}:5: ")
    assert needle in err_lines[-1]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "outputs").exists()  # Hydra's run dir was removed with its parents


#: W&B and HF tokens, in the environment of `wandb_run`
SECRETS = {"WANDB_API_KEY": "wandbsecret" + "0123456789abcdef0123456789abcdef01",
           "HF_TOKEN": "hf_secretTOKEN0123456789", "HUGGING_FACE_HUB_TOKEN": "hf_otherSECRET98765"}


@pytest.fixture(scope="module")
def wandb_run(tmp_path_factory):
    """One epoch with ``logger=wandb`` (offline by default: no WANDB_MODE) and `SECRETS` in the
    environment: its run directory, read by the test of its secrets and the test of its W&B run."""
    root = tmp_path_factory.mktemp("wandb_run")
    sample = write_snips_sample_jsonl(root / "data", n_train=48, n_eval=16)
    run_dir = root / "run"
    proc = run_cli([*FAST, "trainer.max_epochs=1", *jsonl_overrides(sample), "logger=wandb", "seed=3",
                    f"hydra.run.dir={run_dir}"], cwd=root, env=SECRETS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir


def test_secrets_never_reach_the_run_directory(wandb_run):
    """W&B (offline, real run files) and HF tokens in the environment are not written anywhere
    under the run directory: results, config, logs, checkpoints, wandb files."""
    run_dir = wandb_run
    wandb_files = list((run_dir / "wandb").rglob("*.wandb"))
    assert wandb_files, "a real offline W&B run file was written"
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert any(p.suffix == ".ckpt" for p in files) and (run_dir / "results.json").is_file()
    for path in files:
        data = path.read_bytes()
        for value in SECRETS.values():
            assert value.encode() not in data, f"{value[:6]}… found in {path}"


def _bio_lines_dataset(folder, bad_seq_in: bytes):
    ok = (b"play adele\n", b"O B-artist\n", b"PlayMusic\n")
    for split in ("train", "dev", "test"):
        d = folder / split
        d.mkdir(parents=True)
        n = 3
        seq_in = ok[0] * n if split != "train" else ok[0] + bad_seq_in + ok[0]
        (d / "seq.in").write_bytes(seq_in)
        (d / "seq.out").write_bytes(ok[1] * n)
        (d / "label").write_bytes(ok[2] * n)
    return ["dataset=snips", f"dataset.path={folder}"], folder / "train" / "seq.in"


def _top_dataset(folder, bad_tree: str):
    folder.mkdir(parents=True)
    good = "play adele\tplay adele\t[IN:PLAY_MUSIC play [SL:ARTIST adele ] ]\n"
    for name in ("train", "eval", "test"):
        rows = good * 3 if name != "train" else good + f"play adele\tplay adele\t{bad_tree}\n" + good
        (folder / f"{name}.tsv").write_text(rows)
    return ["dataset=top", f"dataset.path={folder}"], folder / "train.tsv"


def _conll_dataset(folder, bad_line: str):
    overrides = ["dataset=mit"]
    for corpus in ("movie", "restaurant"):
        d = folder / corpus
        d.mkdir(parents=True)
        good = "O\tplay\nB-ACTOR\tadele\n\n"
        (d / "train.bio").write_text(good * 20 if corpus == "restaurant" else "O\tplay\n" + bad_line + "\n\n" + good * 19)
        (d / "test.bio").write_text(good * 3)
        overrides.append(f"dataset.corpora.{corpus}={d}")
    return overrides, folder / "movie" / "train.bio"


OTHER_FORMATS = {
    "bio_lines bad UTF-8": (lambda f: _bio_lines_dataset(f, b"play \xff adele\n"), 2, "UTF-8"),
    "TOP unbalanced brackets": (lambda f: _top_dataset(f, "[IN:PLAY_MUSIC play [SL:ARTIST adele ]"), 2, "bracket"),
    "CoNLL missing column": (lambda f: _conll_dataset(f, "B-ACTOR"), 2, "TAG<TAB>word"),
}


@pytest.mark.parametrize("kind", sorted(OTHER_FORMATS))
def test_malformed_input_in_every_format(tmp_path, kind):
    make, line, needle = OTHER_FORMATS[kind]
    overrides, bad_file = make(tmp_path / "data")
    proc = run_cli([*FAST, *overrides, f"hydra.run.dir={tmp_path / 'outputs' / 'run'}"], cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {bad_file}:{line}: "), last
    assert needle.lower() in last.lower()
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "outputs").exists()


def test_a_corrupt_compressed_dataset_file_is_one_error_line(tmp_path):
    """The shipped corpora are .xz (read where a config names the uncompressed file): a damaged
    one stops the run with one line naming it, exit 2, no output."""
    overrides, train = _top_dataset(tmp_path / "data", "[IN:PLAY_MUSIC play [SL:ARTIST adele ] ]")
    for path in sorted(train.parent.iterdir()):
        path.with_name(path.name + ".xz").write_bytes(lzma.compress(path.read_bytes()))
        path.unlink()
    bad = train.with_name("train.tsv.xz")
    bad.write_bytes(bad.read_bytes()[:-24])
    proc = run_cli([*FAST, *overrides, f"hydra.run.dir={tmp_path / 'outputs' / 'run'}"], cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {bad}: cannot decompress (corrupt or cut short?): Compressed file ended before the "
                      "end-of-stream marker was reached"], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "outputs").exists()


def test_predict_file_with_bad_utf8_names_file_and_line(tmp_path):
    texts = tmp_path / "in.txt"
    texts.write_bytes(b"play adele\nplay \xff jazz\n")
    proc = run_cli(["--ckpt", str(tmp_path / "unused.ckpt"), "--file", str(texts)], cwd=tmp_path, module="robustnlu.predict")
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith(f"error: {texts}:2: not valid UTF-8")
    assert "Traceback" not in proc.stderr


def read_wandb_records(path):
    """The records of an offline W&B run file, as wandb's own CLI prints them (one JSON each)."""
    proc = subprocess.run([str(Path(sys.executable).parent / "wandb"), "leet", "inspect", "--json", str(path)],
                          capture_output=True, text=True, timeout=120, check=True)
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def test_wandb_run_is_grouped_by_scenario_with_final_metrics_in_its_summary(wandb_run):
    run_dir = wandb_run
    (run_file,) = (run_dir / "wandb").rglob("offline-run-*/*.wandb")  # offline by default
    records = read_wandb_records(run_file)
    run = next(r["run"] for r in records if "run" in r)
    assert run["run_group"] == "jsonl" and run["job_type"] == "erm"
    assert set(run["tags"]) == {"jsonl", "drift=none", "partial=False", "validation=iid", "method=erm", "seed=3"}
    summary = {}
    for r in records:
        summary.update(r.get("summary", {}).get("update", {}))
    results = json.loads((run_dir / "results.json").read_text())
    assert summary["final"]["test"]["slot_f1"] == pytest.approx(results["metrics"]["test"]["slot_f1"])
    assert summary["sizes"] == results["sizes"] and summary["drift"]["kind"] == "none"


def test_a_sweeps_runs_share_one_wandb_folder(sample, tmp_path):
    """`-m ... logger=wandb`: every job's W&B run (real offline files) lands in <sweep dir>/wandb/,
    where `wandb leet` and `wandb sync` find them together, named as their folders; each job dir
    records its run in wandb.json and holds no W&B folder of its own."""
    sweep = tmp_path / "sweep"
    proc = run_cli(["-m", *FAST, "trainer.max_epochs=1", *jsonl_overrides(sample), "logger=wandb", "seed=1,2",
                    f"hydra.sweep.dir={sweep}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    folders = sorted((sweep / "wandb").glob("offline-run-*"))
    assert len(folders) == 2 and all(len(list(f.glob("*.wandb"))) == 1 for f in folders)
    names = set()
    for folder in folders:
        (run,) = [r["run"] for r in read_wandb_records(next(folder.glob("*.wandb"))) if "run" in r]
        names.add(run["display_name"])
        assert folder.name.endswith(run["run_id"])
    job_dirs = sorted(p.parent for p in sweep.glob("*/results.json"))
    assert len(job_dirs) == 2 and names == {d.name for d in job_dirs}
    assert {d.name.rsplit("-", 1)[0] for d in job_dirs} == {"jsonl-erm-seed1", "jsonl-erm-seed2"}
    recorded = {json.loads((d / "wandb.json").read_text())["dir"] for d in job_dirs}
    assert {Path(r).resolve() for r in recorded} == {f.resolve() for f in folders}
    assert not any((d / "wandb").exists() for d in job_dirs)


def test_an_exception_is_put_on_one_line_with_its_class_alone_when_it_has_no_message():
    """The line a crashed or interrupted job's status.json records (`first_line`): Lightning's
    SIGTERMException, raised without a message, is its class, not ``SIGTERMException:``."""
    from pytorch_lightning.utilities.exceptions import SIGTERMException

    from robustnlu.errors import first_line

    assert first_line(ValueError("  first\nsecond  ")) == "ValueError: first"
    assert first_line(SIGTERMException()) == "SIGTERMException"
    assert first_line(KeyboardInterrupt()) == "KeyboardInterrupt"
    assert first_line(SystemExit(-1)) == "SystemExit: -1"
