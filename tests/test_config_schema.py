"""Config values are checked before a run writes anything (`robustnlu.config_schema`), and every
entry point reports a user error the same way: one line ``error: ...``, exit status 2, no
traceback, nothing on disk. Through the real CLIs as a user meets them, plus the schema's
rules on hand-made values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hydra import compose, initialize_config_dir

from integration_helpers import CONF, FAST, SMALL_DRIFT, jsonl_overrides, run_cli, write_snips_sample_jsonl
from robustnlu.cli import compose_run_config, group_value_problem
from robustnlu.config_schema import check_config, schema
from robustnlu.config_spec import MISSING, Interval, Node, Rule, Seq, choice, integer, number, text
from robustnlu.errors import ConfigError
from test_usage_errors import TRAINING_ONLY, imported


def error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith("import time:")]


def files_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*")) if folder.exists() else []


# ---------------------------------------------------------------------------- training CLI
#: (overrides, the one line expected): out-of-range values, an unknown key, Hydra's own errors
BAD_VALUES = {
    "negative lr": (["optimizer.lr=-1e-4"], "error: optimizer.lr: must be > 0 (got -0.0001)"),
    "zero batch": (["data.batch_size=0"], "error: data.batch_size: must be >= 1 (got 0)"),
    "seed not int": (["seed=abc"], "error: seed: must be an integer (got abc)"),
    "negative epochs": (["trainer.max_epochs=-3"], "error: trainer.max_epochs: must be >= 1 (got -3)"),
    "unknown key": (["+optimizer.momentum=0.9"],
                    "error: optimizer.momentum: unknown key (optimizer has _partial_, _target_, betas, eps, fused, lr, name, "
                    "warmup_steps, weight_decay) (got 0.9)"),
    "fused not a choice": (["optimizer.fused=fast"], "error: optimizer.fused: must be one of auto, true, false (got fast)"),
    "at an open end": (["method=group_dro", "method.decay=0"], "error: method.decay: must be in (0, 1] (got 0)"),
    # TopK over more than the batch would train ERM under TopK's name (FAST's batch: 16)
    "k beyond the batch": (["method=topk", "method.k=100000"],
                           "error: method.k: must be < data.batch_size (16): with k >= the batch, top-k keeps every "
                           "loss and selects nothing (got 100000)"),
    # a key the config does not have, without its +: the schema's line where the schema does not know
    # it either (Hydra's hint, +method.kk=3, would only lead to it), with the keys closest to it
    "mistyped key": (["method=topk", "method.kk=3"],
                     "error: method.kk: unknown key (method has _target_, k, name; the closest: k) (got 3)"),
    # Hydra's own errors (the config cannot be composed) end the same way, on one line; its hint is
    # right for a key the schema allows (a Trainer argument) that the config does not have
    "key without +": (["trainer.limit_train_batches=3"],
                      "error: Could not override 'trainer.limit_train_batches'; To append to your config use "
                      "+trainer.limit_train_batches=3; Key 'limit_train_batches' is not in struct"),
    "no such option": (["optimizer=sgd"],
                       "error: In 'config': Could not find 'optimizer/sgd'; Available options in 'optimizer': "
                       "adamw, conatural"),
    # a group given no option's name: Hydra's ValueError was a traceback
    "group set to null": (["hparams_search=null"],
                          "error: hparams_search=null: Config group override must be a string or a list. Got NoneType; "
                          "a config group takes the name of one of its options"),
    # the former top-level group source: the line names its spelling inside the method's node
    "old group source spelling": (["method=topk_group", "adversary=lda_topics"],
                                  "error: Could not override 'adversary'. No match in the defaults list; To append "
                                  "to your default list use +adversary=lda_topics; a method's group source is chosen "
                                  "with groups@method.groups=<name> (conf/groups/: seqdrift_clusters, lda_topics, "
                                  "autoencoder), its learned adversary with adversary@method.adversary=<name> "
                                  "(conf/adversary/: ratio_net, generative_lm)"),
}


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
def test_a_bad_config_value_is_one_line_exit_2_and_nothing_on_disk(tmp_path, case):
    """~5 s each: the whole process, from Hydra's command line to the check before the run."""
    overrides, expected = BAD_VALUES[case]
    proc = run_cli([*FAST, *overrides, f"hydra.run.dir={tmp_path}/outputs/run"], cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert error_lines(proc.stderr) == [expected]
    assert files_under(tmp_path) == []  # no run dir, no Hydra log, no split cache (outputs/cache)


@pytest.mark.parametrize("command_line, job, failing", [
    (["seed=1", "hparams_search=null"], None, "hparams_search=null"),
    (["hydra/launcher=1"], None, "hydra/launcher=1"),
    (["~optimizer=1"], None, "~optimizer=1"),
    (["seed=0,1", "optimizer=adamw,null"], ["seed=1", "optimizer=null"], "optimizer=null"),  # a sweep's job
    (["hydra.searchpath=[file://{mine}]", "scorer=null"], None, "scorer=null"),  # a group of the user's folder
])
def test_a_group_given_no_options_name_is_found_on_the_command_line(tmp_path, command_line, job, failing):
    """In-process, on Hydra's ValueError without its traceback: the override is found from the
    command line and the groups on the config search path, not from Hydra's frames."""
    (tmp_path / "mine" / "scorer").mkdir(parents=True)
    (tmp_path / "mine" / "scorer" / "plain.yaml").write_text("{}\n")
    command_line = [o.format(mine=tmp_path / "mine") for o in command_line]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"), pytest.raises(ValueError) as caught:
        compose(config_name="config", overrides=job or command_line)
    err = caught.value.with_traceback(None)
    assert group_value_problem(err, command_line, "config") == \
        f"{failing}: {err}; a config group takes the name of one of its options"
    assert group_value_problem(err, ["seed=null", "optimizer=adamw", "+scorer=null"], "config") is None  # no group's


def test_the_drivers_composing_the_config_name_a_group_given_no_options_name():
    """robustnlu.hpo and robustnlu.efficiency compose the config themselves (`compose_run_config`):
    the same one line as training, not Hydra's ValueError."""
    with pytest.raises(ConfigError) as err:
        compose_run_config(["method=null"])
    assert str(err.value) == ("method=null: Config group override must be a string or a list. Got NoneType; "
                              "a config group takes the name of one of its options")


@pytest.mark.parametrize("text, problem", [
    (b"name: mine\n\tk: 1\n", "mine.yaml:3: not valid YAML: found character '\\t' that cannot start any token"),
    (b"name: mine # \xe9t\xe9 (Latin-1)\n", "mine.yaml: not valid UTF-8: invalid continuation byte at byte 48"),  # 35 + 13
])
def test_a_config_file_that_is_not_yaml_is_one_line_naming_it(tmp_path, text, problem):
    """~5 s each: a method file of the user's config folder with a tab where YAML allows none, or
    in Latin-1; the drivers that compose the config themselves (robustnlu.hpo) say the same."""
    (tmp_path / "myconf" / "method").mkdir(parents=True)
    (tmp_path / "myconf" / "method" / "mine.yaml").write_bytes(b"_target_: robustnlu.robust.erm.ERM\n" + text)
    overrides = [f"hydra.searchpath=[file://{tmp_path}/myconf]", "method=mine"]
    expected = f"{tmp_path}/myconf/method/{problem}"
    proc = run_cli([*FAST, *overrides, f"hydra.run.dir={tmp_path}/outputs/run"], cwd=tmp_path)
    assert (proc.returncode, error_lines(proc.stderr)) == (2, ["error: " + expected])
    assert not (tmp_path / "outputs").exists()
    with pytest.raises(ConfigError) as err:
        compose_run_config([*FAST, *overrides])
    assert str(err.value) == expected


#: the other kinds of check, in-process (the same check `run_or_exit` makes): (overrides, message)
MORE_BAD_VALUES = {
    "bad choice": (["method=group_dro", "method.sampling=balanced"],
                   "method.sampling: must be one of shuffle, group_balanced (got balanced)"),
    "not a flag": (["model.crf=yes"], "model.crf: must be true or false (got yes)"),
    "not a split's metric": (["optimized_metric=combined"], "optimized_metric: must match (valid|test)/\\w+ (got combined)"),
    "bad group source key": (["method=topic_cvar", "method.groups.n_topics=0"], "method.groups.n_topics: must be >= 1 (got 0)"),
    "across groups": ([*SMALL_DRIFT, "drift.test_fraction=0.5", "validation.hold_out_both=true", "drift.valid_fraction=0.25"],
                      "drift.test_fraction: test + validation fractions (validation twice with "
                      "validation.hold_out_both) must be < 1 (got 0.5)"),
    "unimportable callback": (["+callbacks.mine._target_=no.such.Callback"],
                              "callbacks.mine._target_: cannot be imported (No module named 'no') (got no.such.Callback)"),
    # FAST deletes the bar: put the shipped one back
    "bar refreshed in negative time": (["+callbacks.progress_bar._target_=robustnlu.progress.LossProgressBar",
                                        "+callbacks.progress_bar.refresh_s=-1"],
                                       "callbacks.progress_bar.refresh_s: must be >= 0 (got -1)"),
    "not set": (["dataset=jsonl", "dataset.train=x.jsonl"], "dataset.test: must be set (got ???)"),
    "longer than the positions": (["data.max_length=200"], "data.max_length: must be <= encoder.max_position_embeddings (got 200)"),
    # each parametric method's own kind of adversary: the other's would fail in the run's setup
    "the other method's adversary": (["method=rpdro", "adversary@method.adversary=generative_lm"],
                                     "method.adversary._target_: must be a subclass of robustnlu.adversary.ratio."
                                     "RatioAdversary (got robustnlu.adversary.generative_lm.GenerativeLM)"),
    # a run's folder is named with them: a / would nest a sweep's job where status and compare do not look
    "method name with a /": (["method=topk", "method.name=topk/k8"],
                             "method.name: must be usable as a folder name (no /, not . or ..) (got topk/k8)"),
    "dataset name ..": (["dataset.name=.."], "dataset.name: must be usable as a folder name (no /, not . or ..) (got ..)"),
    "no edit": (["augment=misspelling", "augment.noise.edit_probs={insertion:0,deletion:0,substitution:0,transposition:0}"],
                "augment.noise.edit_probs: must have a positive sum (got {insertion:0,deletion:0,substitution:0,transposition:0})"),
}


@pytest.mark.parametrize("case", sorted(MORE_BAD_VALUES))
def test_each_kind_of_bad_value_is_named_with_its_key(case):
    overrides, expected = MORE_BAD_VALUES[case]
    with pytest.raises(ConfigError) as err:
        compose_run_config([*FAST, *overrides])
    assert str(err.value) == expected


def test_a_mistyped_key_in_a_multirun_is_the_schemas_line(tmp_path):
    """~5 s: the key is read in the sweep's first job (method=erm), the one Hydra composes first."""
    proc = run_cli(["-m", *FAST, "method=erm,topk", "method.k=3", f"hydra.sweep.dir={tmp_path}/sweep"], cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert error_lines(proc.stderr) == ["error: method.k: unknown key (method has _target_, name) (got 3)"]


def test_a_bad_value_in_a_multirun_fails_its_job_only(tmp_path):
    """~15 s: two jobs, the first with a negative learning rate; the second trains."""
    data = write_snips_sample_jsonl(tmp_path / "data", n_train=48, n_eval=16)
    sweep = tmp_path / "sweep"
    proc = run_cli(["-m", *FAST, "trainer.max_epochs=1", *jsonl_overrides(data), "optimizer.lr=-1e-4,5e-3",
                    f"hydra.sweep.dir={sweep}", "hydra.sweep.subdir=job${hydra.job.num}"], cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert sorted(p.name for p in sweep.iterdir()) == ["job0", "job1", "multirun.yaml"]
    assert [p.name for p in (sweep / "job0").iterdir()] == ["status.json"]  # job0 left its record only
    assert json.loads((sweep / "job1" / "results.json").read_text())["config"]["optimizer"]["lr"] == 5e-3
    error = "error: optimizer.lr: must be > 0 (got -0.0001)"
    lines = error_lines(proc.stderr)
    assert lines.count(error) == 2  # when job 0 failed, and in Hydra's summary at the end
    assert lines[lines.index(error, lines.index(error) + 1) - 1].startswith("Error executing job with overrides:")
    assert "Traceback" not in proc.stderr


# ---------------------------------------------------------------------------- the other entry points
OTHER_ENTRY_POINTS = {
    "seqdrift": ("robustnlu.seqdrift", ["drift.n_clusters=1"], "error: drift.n_clusters: must be >= 2 (got 1)"),
    "seqdrift unknown key": ("robustnlu.seqdrift", ["+drift.clusterz=auto"],
                             "error: drift.clusterz: unknown key"),
    "seqdrift key without +": ("robustnlu.seqdrift", ["drift.n_cluster=3"],
                               "error: drift.n_cluster: unknown key (drift has affinity, clusters, kind, "),
    "noise": ("robustnlu.noise", ["noise.rate=1.5", "out_dir=noisy"], "error: noise.rate: must be in [0, 1] (got 1.5)"),
    "noise out_dir": ("robustnlu.noise", [], "error: out_dir: must be set (got ???)"),
    "evaluate": ("robustnlu.evaluate", ["ckpt=x.ckpt", "batch_size=0"], "error: batch_size: must be >= 1 (got 0)"),
    "hpo": ("robustnlu.hpo", ["--no-search", "+experiment=snips"],
            "error: give exactly one method=<name> (or hparams_search=<name>)"),
    "hpo bad value": ("robustnlu.hpo", ["--no-search", "method=topk", "method.k=0"], "error: method.k: must be >= 1 (got 0)"),
    "efficiency": ("robustnlu.efficiency", ["encoder=tiny"], "error: name the target domain: "
                                                             "target=<alarm|event|messaging|music|navigation|reminder|timer|weather>"),
    "efficiency bad value": ("robustnlu.efficiency", ["target=alarm", "efficiency.percent=120"],
                             "error: efficiency.percent: must be in [0, 100] (got 120)"),
    # Hydra's own flags: argparse's usage lines, or a ValueError's traceback for two modes at once
    "hydra flag": ("robustnlu", ["--cfg", "jobb"], "error: python -m robustnlu: argument --cfg/-c: invalid choice: "
                                                  "'jobb' (choose from 'job', 'hydra', 'all') (see python -m robustnlu --help)"),
    "two hydra modes": ("robustnlu.seqdrift", ["-m", "--cfg", "job"],
                        "error: python -m robustnlu.seqdrift: only one of --run, --multirun, --cfg, --info and "
                        "--shell-completion can be given (got --multirun --cfg; see python -m robustnlu.seqdrift --help)"),
    "compare": ("robustnlu.analysis.compare", ["empty"], "error: empty: neither a run directory"),
    "robustness": ("robustnlu.analysis.robustness", ["empty"], "error: empty: neither a run directory"),
    "report": ("robustnlu.report", ["empty", "--out", "report"], "error: "),
    "efficiency study": ("robustnlu.efficiency.study", ["empty", "--out", "eff"], "error: "),
}

#: cases refused before the imports of training (`TRAINING_ONLY`), read from the imports Python
#: reports with ``-X importtime``
BEFORE_TRAINING_IMPORTS = {"efficiency bad value"}


@pytest.mark.parametrize("case", sorted(OTHER_ENTRY_POINTS))
def test_every_entry_point_reports_a_user_error_on_one_line_with_exit_2(tmp_path, case):
    module, args, expected = OTHER_ENTRY_POINTS[case]
    (tmp_path / "empty").mkdir()
    watched = case in BEFORE_TRAINING_IMPORTS
    proc = run_cli(args, cwd=tmp_path, env={"PYTHONPROFILEIMPORTTIME": "1"} if watched else None, module=module)
    assert proc.returncode == 2, proc.stderr[-3000:]
    if watched:
        modules = imported(proc.stderr)
        assert "robustnlu.config_schema" in modules  # the import lines are there to read
        assert sorted({m.split(".")[0] for m in modules} & TRAINING_ONLY) == []
    (line,) = error_lines(proc.stderr)
    assert line.startswith(expected)
    assert files_under(tmp_path) == [tmp_path / "empty"]


def test_the_drivers_check_the_config_before_launching_anything():
    with pytest.raises(ConfigError, match=r"^optimizer\.lr: must be > 0 \(got 0\)$"):
        compose_run_config(["optimizer.lr=0"])
    with pytest.raises(ConfigError, match=r"^Could not override 'trainer\.limit_train_batches'"):
        compose_run_config(["trainer.limit_train_batches=1"])
    with pytest.raises(ConfigError, match=r"^trainer\.foo: unknown key \(trainer has "):
        compose_run_config(["trainer.foo=1"])


# ---------------------------------------------------------------------------- every shipped config is valid
def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


SHIPPED = [
    [],
    *([f"+experiment={e}"] for e in _options("experiment")),
    *([f"method={m}", "drift=slot_value", "selection=greedy_minmax"] for m in _options("method")),
    *([f"hparams_search={o}", "method=topk", "drift=slot_context"] for o in _options("hparams_search")),
    *([f"{group}={o}"] for group in ("optimizer", "encoder", "augment", "selection") for o in _options(group)
      if o != "conatural"),
    ["optimizer=conatural", "dataset=topv2_alarm", "efficiency=topv2", "efficiency.mode=adapt",
     "efficiency.init_from=source.ckpt"],
    *(["method=topk_group", "drift=slot_value", f"groups@method.groups={o}"] for o in ("seqdrift_clusters", "lda_topics")),
    *(["method=topic_cvar", f"groups@method.groups={o}"] for o in ("seqdrift_clusters", "lda_topics")),
    ["dataset=jsonl", "dataset.train=a.jsonl", "dataset.test=b.jsonl"],
    ["dataset=topv2_alarm", "efficiency=topv2", "suite=[noisy_nlu,synthetic]", "logger=wandb", "trainer=ddp",
     "validation=ood", "data.pad_to=128"],
]


@pytest.mark.parametrize("overrides", SHIPPED, ids=" ".join)
def test_every_shipped_config_option_passes_the_schema(overrides):
    """A default outside its own range, or a YAML key the schema does not know, fails here."""
    compose_run_config(overrides)


# ---------------------------------------------------------------------------- the schema's rules by hand
def test_intervals_say_what_they_allow():
    assert [x in Interval.parse("(0, 1]") for x in (0, 1e-9, 1, 1.01)] == [False, True, True, False]
    assert Interval.parse("(0, 1]").describe() == "must be in (0, 1]"
    assert Interval.parse("[1, inf)").describe() == "must be >= 1"
    assert Interval.parse("(0, inf)").describe() == "must be > 0"


@pytest.mark.parametrize("spec, value, problem", [
    (integer("[1, inf)"), 2.0, "must be an integer (got 2.0)"),
    (integer("[1, inf)"), True, "must be an integer (got true)"),
    (number("(0, 1)"), float("nan"), "must be a finite number (got nan)"),
    (number("(0, 1)"), "0.5", "must be a number (got 0.5)"),
    (choice("a", "b"), "c", "must be one of a, b (got c)"),
    (text(), "", "must be a non-empty string (got )"),
    (text(), None, "must be set (got null)"),
    (Seq(number("[0, 1)"), length=2), [0.9], "must be a list of 2 (got [0.9])"),
    (Node({"a": integer()}), {"a": 1, "b": 2}, "unknown key (k has a) (got 2)"),
    (Node({"a": integer()}), {"a": MISSING}, "must be set (got ???)"),
])
def test_each_kind_of_spec_names_the_key_the_problem_and_the_value(spec, value, problem):
    with pytest.raises(ConfigError) as err:
        spec.check("k", value, {})
    key = "k.b" if "unknown" in problem else "k.a" if isinstance(spec, Node) else "k"
    assert str(err.value) == f"{key}: {problem}"
    assert integer("[1, inf)").check("k", 3, {}) is None


def test_a_rule_across_keys_names_the_first_key():
    node = Node({"lo": integer(), "hi": integer()}, rules=(Rule("lo", lambda d, _: d["lo"] <= d["hi"], "must be <= hi"),))
    node.check("r", {"lo": 1, "hi": 1}, {})
    with pytest.raises(ConfigError, match=r"^r\.lo: must be <= hi \(got 2\)$"):
        node.check("r", {"lo": 2, "hi": 1}, {})


def test_an_interpolation_that_cannot_be_resolved_is_a_config_error():
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"inspect": "${nowhere}", "inspect_examples": 5})
    with pytest.raises(ConfigError, match=r"^inspect: cannot be resolved"):
        check_config(cfg, "seqdrift")
    assert set(schema("seqdrift").keys) == {"dataset", "drift", "validation", "paths", "inspect", "inspect_examples", "verify"}
