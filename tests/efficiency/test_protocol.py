"""Stages 1-2 (robustnlu/efficiency/subsets.py, protocol.py, adapt.py) and the whole protocol through
``python -m robustnlu.efficiency`` on a small real TOPv2 cut (tiny encoder)."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from integration_helpers import FAST, REPO, cli_env, compose_config, enter_cli, file_bytes, write_topv2_cut
from robustnlu.config_schema import check_config
from robustnlu.data.readers import load_corpus
from robustnlu.paths import shipped_config
from robustnlu.efficiency.__main__ import PROTOCOL_FILE, main as efficiency_main, protocol_settings, training_overrides
from robustnlu.efficiency.subsets import efficiency_split, nested_subset
from robustnlu.errors import ConfigError
from robustnlu.rundir import RunDir
from robustnlu.sweep_state import sweep_status
from robustnlu.sweep_jobs import job_hash
from robustnlu.train import prepare

@pytest.fixture(scope="module")
def topv2_cut(tmp_path_factory):
    return write_topv2_cut(tmp_path_factory.mktemp("topv2"))


def dataset(folder: Path) -> dict:
    cfg = shipped_config("dataset", "topv2_weather")
    return {**cfg, "path": str(folder)}


def efficiency(**kw) -> dict:
    return {"percent": 100, "mode": "joint", "init_from": None, "sources": None, "source_limit": None,
            "valid": "same", "subset_seed": 0, **kw}


def test_subsets_are_nested_uniform_and_seeded(topv2_cut):
    utts = efficiency_split(dataset(topv2_cut), efficiency(sources=["alarm"]), REPO).corpus.test
    sizes = {p: nested_subset(utts, p, seed=3, stream="train") for p in (0, 7, 21, 60, 100)}
    assert [len(s) for s in sizes.values()] == [0, round(0.07 * len(utts)), round(0.21 * len(utts)), 36, len(utts)]
    for small, large in zip(list(sizes.values()), list(sizes.values())[1:]):
        assert set(small) <= set(large)  # nested
    assert nested_subset(utts, 21, seed=3, stream="train") == sizes[21]  # seeded
    assert nested_subset(utts, 21, seed=4, stream="train") != sizes[21]
    with pytest.raises(ConfigError, match="percentage"):
        nested_subset(utts, 120, seed=0, stream="train")


def test_joint_training_is_every_source_plus_the_subset_and_test_the_whole_target(topv2_cut):
    split = efficiency_split(dataset(topv2_cut), efficiency(percent=25, sources=["alarm", "timer"]), REPO)
    sources = {d: load_corpus({**dataset(topv2_cut), "name": f"topv2_{d}", "domain": d,
                               "files": {s: f"{d}_{f}.tsv" for s, f in (("train", "train"), ("valid", "eval"), ("test", "test"))}},
                              REPO) for d in ("alarm", "timer")}
    target = load_corpus(dataset(topv2_cut), REPO)  # the reader keeps the non-nested trees only
    train_domains = [u.uid.split("-")[0] for u in split.corpus.train]
    assert train_domains.count("topv2_weather") == round(0.25 * len(target.train)) == split.info["subset_size"]
    for d, corpus in sources.items():  # every source utterance
        assert train_domains.count(f"topv2_{d}") == len(corpus.train) == split.info["sources"][f"topv2_{d}"]
    assert [u.uid.split("-")[0] for u in split.corpus.valid].count("topv2_weather") == round(0.25 * len(target.valid))
    assert split.corpus.test == target.test
    assert split.source_test == [*sources["alarm"].test, *sources["timer"].test]
    # the label space covers every domain's whole training split, whatever the percentage
    full = efficiency_split(dataset(topv2_cut), efficiency(percent=100, sources=["alarm", "timer"]), REPO)
    none = efficiency_split(dataset(topv2_cut), efficiency(percent=0, sources=["alarm", "timer"]), REPO)
    assert split.vocab == full.vocab == none.vocab
    assert not {u.intent for u in none.corpus.train} & {u.intent for u in full.corpus.test}


def test_bad_efficiency_settings_are_config_errors(topv2_cut):
    with pytest.raises(ConfigError, match="TOPv2 domain"):
        efficiency_split({**dataset(topv2_cut), "domain": None, "name": "snips"}, efficiency(), REPO)
    with pytest.raises(ConfigError, match="other than the target"):
        efficiency_split(dataset(topv2_cut), efficiency(sources=["weather"]), REPO)
    with pytest.raises(ConfigError, match="init_from"):
        efficiency_split(dataset(topv2_cut), efficiency(mode="adapt"), REPO)


def protocol_overrides(topv2_cut, tmp_path) -> list[str]:
    """The overrides `protocol` gives: the cut, the tiny encoder, into ``<tmp_path>/sweep``."""
    return ["target=weather", f"dataset.path={topv2_cut}", "efficiency.sources=[alarm,timer]", "encoder=tiny",
            "~callbacks.progress_bar", "trainer.enable_progress_bar=false", "trainer.max_epochs=2", "optimizer.lr=5e-3",
            "data.batch_size=16", f"hydra.sweep.dir={tmp_path / 'sweep'}"]


def protocol(topv2_cut, tmp_path, *args, relative=False):
    """``python -m robustnlu.efficiency`` on the cut with the tiny encoder, into ``<tmp_path>/sweep``
    (``args``: its options and more overrides, before `protocol_overrides`; ``relative``: the sweep
    directory spelled relative to ``tmp_path``, the command's working directory)."""
    overrides = [("hydra.sweep.dir=sweep" if relative and o.startswith("hydra.sweep.dir=") else o)
                 for o in protocol_overrides(topv2_cut, tmp_path)]
    cmd = [sys.executable, "-m", "robustnlu.efficiency", *args, *overrides]
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=900, env=cli_env())


def run_protocol(topv2_cut, tmp_path, *args, relative=False):
    proc = protocol(topv2_cut, tmp_path, *args, relative=relative)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, tmp_path / "sweep"


def run_protocol_here(topv2_cut, folder: Path, *args) -> tuple[str, Path]:
    """`run_protocol` with the driver in this process (its multiruns are ``python -m robustnlu``
    subprocesses as ever, in `cli_env`'s environment), for the protocols whose results are checked
    rather than the command line's behaviour, which `protocol` checks: what the driver printed,
    and the sweep directory. Saves the driver's interpreter, whose composing imports Lightning."""
    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as monkeypatch, contextlib.redirect_stdout(printed):
        enter_cli(monkeypatch, folder)
        assert efficiency_main([*args, *protocol_overrides(topv2_cut, folder)]) == 0
    return printed.getvalue(), folder / "sweep"


@pytest.fixture(scope="module")
def joint_protocol(topv2_cut, tmp_path_factory) -> tuple[str, Path]:
    """The joint protocol at 4 percentages and 2 seeds, trained once for the tests that read it:
    `run_protocol_here`'s output and sweep directory."""
    return run_protocol_here(topv2_cut, tmp_path_factory.mktemp("joint"), "--percents", "0,10,30,100", "--seeds", "0,1")


def test_the_protocol_writes_points_fit_queries_and_plot(joint_protocol):
    printed, sweep = joint_protocol
    runs = [json.loads(p.read_text()) for p in sweep.glob("*/results.json")]
    assert sorted((r["efficiency"]["percent"], r["seed"]) for r in runs) == [
        (p, s) for p in (0, 10, 30, 100) for s in (0, 1)]
    assert {r["efficiency"]["subset_size"] for r in runs} == {0, 16, 48, 160}
    out = json.loads((sweep / "efficiency" / "efficiency.json").read_text())
    (curve,) = out["curves"]
    points = {(p["percent"], p["seed"]): p["metric"] for p in curve["points"]}
    for r in runs:  # the points are the runs' test exact match, in %
        assert points[(r["efficiency"]["percent"], r["seed"])] == pytest.approx(100 * r["metrics"]["test"]["frame_acc"])
    assert set(curve["fit"]) >= {"a", "b", "c"} and [q["kind"] for q in curve["queries"]] == ["percent_for_metric"] * 2 + ["metric_at_percent"] * 2
    png = (sweep / "efficiency" / "efficiency.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert "exact match" in printed and "efficiency.md" in printed


#: the adapt protocol's options, and its overrides: the co-natural optimiser, whose state (the
#: Fisher) a finished run keeps in last.ckpt with keep_last_checkpoint=true
ADAPT = ("--mode", "adapt", "--percents", "25", "--seeds", "0")
CONATURAL = ("optimizer=conatural", "optimizer.fisher_samples=50", "optimizer.lr=0.05", "keep_last_checkpoint=true")


@pytest.fixture(scope="module")
def adapt_protocol(topv2_cut, tmp_path_factory) -> tuple[Path, Path]:
    """The adapt protocol (`ADAPT`, `CONATURAL`) run whole, once: the folder whose ``sweep`` it
    trained into, and a copy of that sweep directory as the protocol left it. The runs' records
    name the source checkpoint by its absolute path (init_from, part of the adapt jobs' identity),
    so the test that stops and continues the protocol does so in the folder itself; the others
    read the copy, whatever ran before them."""
    folder = tmp_path_factory.mktemp("adapt")
    run_protocol_here(topv2_cut, folder, *ADAPT, *CONATURAL)
    whole = tmp_path_factory.mktemp("adapt-whole") / "sweep"
    shutil.copytree(folder / "sweep", whole)
    return folder, whole


def test_adapting_a_source_model_records_the_source_forgetting(adapt_protocol):
    _, sweep = adapt_protocol
    (source,) = [json.loads(p.read_text()) for p in (sweep / "source").glob("*/results.json")]
    (adapted,) = [json.loads(p.read_text()) for p in (sweep / "adapt").glob("*/*/results.json")]
    assert source["efficiency"]["percent"] == 0 and adapted["efficiency"]["mode"] == "adapt"
    assert adapted["sizes"]["train"] == 40  # the subset alone
    forgetting = adapted["efficiency"]["forgetting"]
    for key, before in forgetting["before"].items():
        assert forgetting["drop"][key] == pytest.approx(before - forgetting["after"][key])
    assert forgetting["before"]["frame_acc"] > 0  # the source model knows its domains
    source_ckpt = torch.load(Path(adapted["efficiency"]["init_from"]), weights_only=True)
    (adapted_dir,) = [p.parent for p in (sweep / "adapt").glob("*/*/results.json")]
    adapted_ckpt = torch.load(adapted_dir / adapted["best_checkpoint"], weights_only=True)
    assert adapted_ckpt["hyper_parameters"]["vocab"] == source_ckpt["hyper_parameters"]["vocab"]
    assert adapted_ckpt["hyper_parameters"]["optimizer"]["name"] == "conatural"
    # the preconditioner is the rolling Fisher after the source task: 0.9 F_S + 0.1 (α/0.9),
    # with F_S normalised to sum to the encoder's parameter count (α = damping = 10)
    adapted_last = torch.load(adapted_dir / "checkpoints" / "last.ckpt", weights_only=True)
    fisher = [v["fisher"] for v in adapted_last["optimizer_states"][0]["state"].values() if "fisher" in v]
    n = sum(f.numel() for f in fisher)
    assert n == sum(v.numel() for k, v in adapted_ckpt["state_dict"].items() if k.startswith("model.encoder."))
    assert sum(float(f.double().sum()) for f in fisher) == pytest.approx(n * (0.9 + 0.1 * 10 / 0.9), rel=1e-4)


def job_folders(sweep: Path) -> dict[tuple[float, int], str]:
    """The percentage and seed of each finished run of ``sweep`` -> the name of its folder, which
    ends with the hash of the overrides it records."""
    found = {}
    for results in sweep.glob("*/results.json"):
        run = RunDir(results.parent)
        assert run.path.name.endswith(f"-{job_hash(run.overrides())}")
        found[(run.results()["efficiency"]["percent"], run.results()["seed"])] = run.path.name
    return found


def test_the_protocols_runs_are_named_by_their_jobs_so_status_and_relaunch_find_them(joint_protocol, topv2_cut,
                                                                                    tmp_path):
    """~1 min (three tiny trainings): the protocol at 0, 10, 30 and 100%, seeds 0 and 1
    (`joint_protocol`), then in another sweep directory at 100% and 0%, seed 0: each run's folder
    is named by its job (mode, percentage, seed, hash), the same in both (numbered by position,
    100% seed 0 would be the last but one job of the first and the first of the second).
    python -m robustnlu.sweep reads the second sweep: both jobs finished; with one run's folder
    removed, relaunch trains that job alone, into a folder of the same name, and leaves the
    other's run as it was."""
    _, first = joint_protocol
    _, swapped = run_protocol_here(topv2_cut, tmp_path, "--percents", "100,0", "--seeds", "0")
    names = job_folders(first)
    assert {job: name.rsplit("-", 1)[0] for job, name in names.items()} == {
        (p, s): f"joint-{p}pct-seed{s}" for p in (0, 10, 30, 100) for s in (0, 1)}
    assert job_folders(swapped) == {job: names[job] for job in ((0, 0), (100, 0))}
    _, jobs = sweep_status(swapped)
    assert [(j.state, j.folder.name) for j in jobs] == [("finished", names[(100, 0)]), ("finished", names[(0, 0)])]

    kept = (swapped / names[(0, 0)] / "results.json").read_bytes()
    shutil.rmtree(swapped / names[(100, 0)])
    proc = subprocess.run([sys.executable, "-m", "robustnlu.sweep", "relaunch", str(swapped)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600, env=cli_env())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "2 jobs, 1 finished, 0 running, 0 queued (left alone), 1 to run again" in proc.stdout
    assert job_folders(swapped) == {job: names[job] for job in ((0, 0), (100, 0))}
    assert (swapped / names[(0, 0)] / "results.json").read_bytes() == kept


def test_conatural_without_a_source_model_is_a_config_error(tmp_path):
    """Checked with the config without the protocol, by the protocol before it reads any data
    under mode=joint (the co-natural optimiser has a Fisher only under mode=adapt)."""
    cfg = compose_config([*FAST, "optimizer=conatural"], tmp_path / "run")
    with pytest.raises(ConfigError, match=r"^optimizer\.name: .*efficiency\.mode=adapt .*\(got conatural\)$"):
        check_config(cfg, "config")
    cfg = compose_config([*FAST, "dataset=topv2_weather", "dataset.path=/nonexistent", "efficiency=topv2",
                          "optimizer=conatural"], tmp_path / "run")
    check_config(cfg, "config")
    with pytest.raises(ConfigError, match=r"^optimizer=conatural .* efficiency\.mode=adapt$"):
        prepare(cfg)


@pytest.mark.parametrize("args, message", [
    (["--at", "-5"], "--at -5: h(x) = a/x^b + c is defined for x > 0 only"),
    (["--at", "10,0"], "--at 0: h(x) = a/x^b + c is defined for x > 0 only"),
    (["--reach", "inf"], "--reach inf: not a finite number"),
    (["--percents", "0,50,150"], "--percents 150: a subset percentage lies in [0, 100]"),
    (["--percents", "0,50,50"], "--percents and --seeds must not repeat a value"),
    (["--percents", "0,ten"], "python -m robustnlu.efficiency: argument --percents: expected comma-separated numbers, "
                              "got '0,ten' (see python -m robustnlu.efficiency --help)"),
    (["--mode", "adapt", "--percents", "0"], "--mode adapt adapts the source models to the subsets above 0%: "
                                             "give --percents at least one of them"),
    (["--seeds", "0,-1"], "--seeds: must be in [0, 4294967295] (got -1)"),
    (["--seeds", "1.5"], "python -m robustnlu.efficiency: argument --seeds: expected comma-separated integers, "
                         "got '1.5' (see python -m robustnlu.efficiency --help)"),
])
def test_a_query_or_subset_out_of_range_is_refused_before_the_protocol_trains(topv2_cut, tmp_path, args, message):
    """Before the fix, --at -5 was refused by the study after every run had trained."""
    proc = protocol(topv2_cut, tmp_path, "--percents", "0,100", *args)
    assert proc.returncode == 2
    assert proc.stderr == f"error: {message}\n"
    assert not (tmp_path / "sweep").exists()


def test_a_sweep_directory_that_holds_runs_is_refused(topv2_cut, tmp_path):
    """The study reads every run below the sweep directory: earlier runs there would be pooled with
    this protocol's, whatever their settings."""
    earlier = tmp_path / "sweep" / "joint-100pct-seed0-0123abcd"
    earlier.mkdir(parents=True)
    (earlier / "results.json").write_text('{"seed": 0}')
    proc = protocol(topv2_cut, tmp_path, "--percents", "0,100")
    assert proc.returncode == 2
    assert proc.stderr == (f"error: hydra.sweep.dir {tmp_path / 'sweep'} already holds 1 run(s) (e.g. {earlier}): the "
                           "study would pool them with this protocol's; choose a new sweep directory\n")
    assert file_bytes(tmp_path / "sweep") == {"joint-100pct-seed0-0123abcd/results.json": b'{"seed": 0}'}


def finished_files(sweep: Path) -> dict[str, tuple[bytes, int]]:
    """Each finished run's results.json and checkpoints under ``sweep``: bytes and mtime."""
    files = [p for results in sorted(sweep.rglob("results.json"))
             for p in (results, *sorted((results.parent / "checkpoints").iterdir()))]
    return {str(p.relative_to(sweep)): (p.read_bytes(), p.stat().st_mtime_ns) for p in files}


def test_a_protocol_stopped_after_its_source_stage_is_continued_with_resume_true(adapt_protocol, topv2_cut):
    """~1 min (one tiny training): ``--mode adapt`` has run whole (`adapt_protocol`, in its folder);
    its adapt stage and answers are then removed, which leaves the sweep directory as a protocol
    stopped between its two stages leaves it (protocol.json and the finished source run). The same
    command refuses it; with resume=true it continues: the source run returns its stored result
    (its files untouched), the adapt stage trains, into the folders it had (though the sweep
    directory is spelled relative to the working directory now, absolute before), and the report
    is the uninterrupted protocol's."""
    folder, _ = adapt_protocol  # the folder the protocol ran in: the commands' working directory
    args = (*ADAPT, *CONATURAL)
    sweep = folder / "sweep"
    report = {name: (sweep / "efficiency" / name).read_bytes() for name in ("efficiency.json", "efficiency.md")}
    adapted = sorted(p.relative_to(sweep) for p in (sweep / "adapt").glob("*/*/results.json"))
    assert len(adapted) == 1
    source = finished_files(sweep / "source")
    assert len(source) >= 2 and json.loads((sweep / PROTOCOL_FILE).read_text()) == protocol_settings(
        "adapt", [25], [0], training_overrides([*CONATURAL, *protocol_overrides(topv2_cut, folder)]))
    shutil.rmtree(sweep / "adapt")
    shutil.rmtree(sweep / "efficiency")
    stopped = file_bytes(sweep)

    refused = protocol(topv2_cut, folder, *args)
    assert refused.returncode == 2 and refused.stderr == (
        f"error: hydra.sweep.dir {sweep} holds a protocol started earlier ({sweep / PROTOCOL_FILE}, 1 run(s)): "
        "continue it with resume=true, or choose a new sweep directory\n")
    assert file_bytes(sweep) == stopped

    proc, _ = run_protocol(topv2_cut, folder, *args, "resume=true", relative=True)
    assert proc.stdout.count("has finished; its stored results.json is the result") == 1  # the source run
    assert finished_files(sweep / "source") == source
    assert sorted(p.relative_to(sweep) for p in (sweep / "adapt").glob("*/*/results.json")) == adapted
    assert {name: (sweep / "efficiency" / name).read_bytes() for name in report} == report
    # the protocol's folder holds sweeps, not jobs: status reads each of them
    status = subprocess.run([sys.executable, "-m", "robustnlu.sweep", "status", "--json", str(sweep)],
                            capture_output=True, text=True, timeout=120, env=cli_env())
    assert status.returncode == 0, status.stderr
    jobs = [json.loads(line) for line in status.stdout.splitlines()]
    assert [(Path(j["sweep"]).relative_to(sweep).as_posix(), j["state"]) for j in jobs] == [
        ("adapt/seed0", "finished"), ("source", "finished")]
    assert Path(jobs[0]["folder"]).relative_to(sweep) == adapted[0].parent
    again = subprocess.run([sys.executable, "-m", "robustnlu.sweep", "relaunch", str(sweep)],
                           capture_output=True, text=True, timeout=120, env=cli_env())
    assert again.returncode == 2 and again.stderr == (
        f"error: {sweep}: holds sweeps, not jobs (adapt/seed0, source): relaunch one of them, or run the command that "
        "made them again with resume=true and hydra.sweep.dir=<this folder> (the efficiency protocol continues so)\n")


def test_resume_true_refuses_a_protocol_with_other_settings_or_runs_it_has_no_record_of(topv2_cut, tmp_path):
    """Before anything is written: the sweep directory's protocol.json records the joint protocol
    at --percents 0,100; resume=true with --percents 0,50 and efficiency.valid=full (or --mode
    adapt and another seed) is refused, naming each difference; a sweep directory with a run but
    no protocol.json is refused under resume=true too."""
    sweep = tmp_path / "sweep"
    run = sweep / "joint-100pct-seed0-0123abcd"
    run.mkdir(parents=True)
    (run / "results.json").write_text('{"seed": 0}')
    refused = protocol(topv2_cut, tmp_path, "--percents", "0,100", "resume=true")
    assert refused.returncode == 2 and refused.stderr == (
        f"error: hydra.sweep.dir {sweep} holds 1 run(s) (e.g. {run}) but no {PROTOCOL_FILE}, so they are not known "
        "to be this protocol's: resume=true continues a protocol in the sweep directory it started; choose a new "
        "sweep directory\n")
    settings = protocol_settings("joint", [100, 0], [0], training_overrides(protocol_overrides(topv2_cut, tmp_path)))
    (sweep / PROTOCOL_FILE).write_text(json.dumps(settings))
    before = file_bytes(sweep)
    refused = protocol(topv2_cut, tmp_path, "--percents", "50,0", "resume=true", "efficiency.valid=full")
    assert refused.returncode == 2 and refused.stderr == (
        f"error: hydra.sweep.dir {sweep} holds a protocol with other settings (--percents 0,100 there, 0,50 now; "
        'overrides (none) there, efficiency.valid="full" now; '
        f"{sweep / PROTOCOL_FILE}): resume=true continues it only with the settings it started with; choose a new "
        "sweep directory for these\n")
    refused = protocol(topv2_cut, tmp_path, "--mode", "adapt", "--percents", "0,100", "--seeds", "1", "resume=true")
    assert refused.returncode == 2 and "(--mode joint there, adapt now; --percents 0,100 there, 100 now; " \
        "--seeds 0 there, 1 now; " in refused.stderr and refused.stderr.count("\n") == 1
    assert file_bytes(sweep) == before
