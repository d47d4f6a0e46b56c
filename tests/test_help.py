"""``--help`` of the Hydra apps (training, seqdrift, evaluate, noise) as a user meets it: what the
app does, examples that compose, the config groups of that app only (a group without a default
spelled with its +), every group and option as conf/ has them, where to read more, no config
dump and no "powered by Hydra". The help texts are conf/hydra/help/<app>.yaml; they list groups
and options as plain text, so these tests are what keeps them in step with conf/."""

from __future__ import annotations

import functools
import importlib.util
import re
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import OmegaConf, open_dict

from integration_helpers import CONF, REPO, run_cli
from robustnlu.config_schema import check_config
from robustnlu.seqdrift.__main__ import rewrite_flags
from test_usage_errors import HEAVY, imported


@dataclass(frozen=True)
class App:
    config: str  # conf/<config>.yaml
    description: str  # how its --help begins
    example_must_show: tuple[str, ...]  # arguments some example must use


APPS = {
    "robustnlu": App("config", "python -m robustnlu: train JointBERT (intent classification + slot filling)",
                     ("+experiment=snips_slot_context", "-m", "resume=true")),
    "robustnlu.seqdrift": App("seqdrift", "python -m robustnlu.seqdrift: make the SeqDrift split of a dataset",
                              ("--inspect", "--verify")),
    "robustnlu.evaluate": App("evaluate", "python -m robustnlu.evaluate: score a trained model on robustness suites",
                              ("ckpt=RUN/checkpoints/best-epoch002.ckpt", "suite=[noisy_nlu,synthetic]")),
    "robustnlu.noise": App("noise_dataset", "python -m robustnlu.noise: write a noised copy of a dataset",
                           ("out_dir=noisy/atis-misspelling", "noise=synonym")),
}
TRAINING = "robustnlu"
#: groups the training help lists beyond its defaults list: + groups, groups placed in the
#: method's node by the methods that have them, and Hydra's launcher (a sweep's jobs)
TRAINING_EXTRA_GROUPS = {"experiment", "grid", "groups@method.groups", "adversary@method.adversary", "hydra/launcher"}
WIDTH = 100  # longest line of prose (an example command may be longer: it is copied, not read)


@dataclass(frozen=True)
class Answer:
    returncode: int
    stdout: str
    stderr: str  # without the import lines
    modules: frozenset[str]  # the modules it imported


@functools.cache
def cli(module: str, *args: str) -> Answer:
    """``python -m <module> <args>`` in a fresh empty folder (so that nothing it might write lands
    in the repository), with ``-X importtime`` (as ``PYTHONPROFILEIMPORTTIME=1``) to tell what it
    imported."""
    with tempfile.TemporaryDirectory() as cwd:
        proc = run_cli(list(args), cwd=Path(cwd), env={"PYTHONPROFILEIMPORTTIME": "1"}, module=module)
        assert not any(Path(cwd).iterdir()), f"{module} {' '.join(args)} wrote files"
    stderr = "".join(line for line in proc.stderr.splitlines(keepends=True) if not line.startswith("import time:"))
    return Answer(proc.returncode, proc.stdout, stderr, frozenset(imported(proc.stderr)))


def help_text(module: str) -> str:
    proc = cli(module, "--help")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def section(text: str, title: str) -> list[str]:
    """The lines under ``== <title> ==`` up to the next ``== ... ==``."""
    lines = text.splitlines()
    start = lines.index(f"== {title} ==") + 1
    end = next((i for i in range(start, len(lines)) if re.fullmatch(r"== .+ ==", lines[i])), len(lines))
    return lines[start:end]


def examples(module: str) -> list[list[str]]:
    """The example commands of the Examples section, as the shell splits them."""
    return [shlex.split(line) for line in section(help_text(module), "Examples") if line.strip().startswith("python -m ")]


@dataclass(frozen=True)
class Row:
    plus: bool  # spelled +group
    group: str
    default: str | None  # as written after group= (None: no =)
    options: tuple[str, ...]


def group_rows(module: str) -> list[Row]:
    """The table of the Config groups section: ``  group=default   opt, opt, ...`` rows (a row
    goes on in lines indented further), from the header row to the first blank line."""
    lines = section(help_text(module), "Config groups")
    start = next(i for i, line in enumerate(lines) if line.split() == ["group=default", "options"]) + 1
    specs: list[list[str]] = []
    for line in lines[start:]:
        if not line.strip():
            break
        if re.match(r"  \S", line):
            spec, options = line.split(None, 1)
            specs.append([spec, options])
        else:
            specs[-1][1] += " " + line.strip()
    rows = []
    for spec, options in specs:
        name, eq, default = spec.removeprefix("+").partition("=")
        rows.append(Row(spec.startswith("+"), name, default if eq else None,
                        tuple(o.strip() for o in options.split(","))))
    return rows


def defaults_list(config: str) -> dict[str, object]:
    """group -> default of conf/<config>.yaml's defaults list; left out: Hydra's own overrides and
    ``hydra`` (our settings of Hydra's node, conf/hydra/default.yaml, not a choice for the user)."""
    entries = yaml.safe_load((CONF / f"{config}.yaml").read_text())["defaults"]
    return {k: v for e in entries if isinstance(e, dict) for k, v in e.items()
            if k != "hydra" and not k.startswith("override ")}


def conf_options(group: str) -> list[str]:
    """The option files of a group (``groups@method.groups``: of conf/groups/)."""
    return sorted(p.stem for p in (CONF / group.split("@")[0]).glob("*.yaml"))


def composed(config: str, overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name=config, overrides=overrides, return_hydra_config=True)


def check_schema(config: str, overrides: list[str], tmp_path: Path) -> None:
    """The app's schema check (what `run_or_exit` does first) on the config the overrides compose,
    with ``${hydra:...}`` resolved as in a job."""
    cfg = composed(config, overrides)
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(tmp_path)
    hydra_config = HydraConfig.instance()
    previous, hydra_config.cfg = hydra_config.cfg, None
    try:
        hydra_config.set_config(cfg)
        check_config(cfg, config)
    finally:
        hydra_config.cfg = previous


def sweep_jobs(config: str, args: list[str]) -> list[list[str]]:
    """The overrides of each job of ``-m <args>`` with Hydra's basic sweeper: the sweeper's own
    ``hydra.sweeper.params`` (set by +grid) first, then the command line, as `BasicSweeper.sweep`."""
    parser = OverridesParser.create()
    fixed = [o.input_line for o in parser.parse_overrides(args) if not o.is_sweep_override()]
    params = OmegaConf.select(composed(config, fixed), "hydra.sweeper.params") or {}
    overrides = parser.parse_overrides([*(f"{k}={v}" for k, v in params.items()), *args])
    return [job for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]


@pytest.mark.parametrize("module", sorted(APPS))
def test_help_says_what_the_app_does_without_hydras_boilerplate(module):
    text = help_text(module)
    assert text.startswith(APPS[module].description + " ")
    assert "powered by hydra" not in text.lower()
    assert f"python -m {module} --cfg job" in text  # how to see the composed config instead
    dump = cli(module, "--cfg", "job")
    assert dump.returncode == 0, dump.stderr
    top_keys = {line for line in dump.stdout.splitlines() if line and not line.startswith(" ")}
    assert len(top_keys) >= 3
    assert not top_keys & set(text.splitlines()), "the help dumps the config"
    long = [line for line in text.splitlines() if len(line) > WIDTH and not line.startswith("  python -m ")]
    assert not long


@pytest.mark.parametrize("module", sorted(APPS))
def test_help_and_the_config_dump_are_answered_before_torch_is_imported(module):
    """As an argparse command's help (tests/test_usage_errors.py): neither ``--help`` nor ``--cfg
    job`` runs the app, so neither waits for the seconds of importing torch, Lightning or
    transformers (`HEAVY`) that its work needs."""
    for args in (("--help",), ("--cfg", "job")):
        answer = cli(module, *args)
        assert answer.returncode == 0, answer.stderr
        assert "robustnlu.cli" in answer.modules  # the import lines are there to read
        heavy = sorted({m.split(".")[0] for m in answer.modules} & HEAVY)
        assert heavy == [], f"{module} {' '.join(args)} imported {heavy}"


@pytest.mark.parametrize("module", sorted(APPS))
def test_examples_are_this_apps_real_usage(module):
    found = examples(module)
    assert 2 <= len(found) <= 3
    for example in found:
        assert example[:3] == ["python", "-m", module]
    used = {arg for example in found for arg in example}
    assert set(APPS[module].example_must_show) <= used


@pytest.mark.parametrize("module", sorted(APPS))
def test_every_example_composes_and_passes_the_schema(module, tmp_path):
    config = APPS[module].config
    for example in examples(module):
        args = example[3:]
        jobs = sweep_jobs(config, [a for a in args if a != "-m"]) if "-m" in args else [args]
        if "-m" in args:
            assert len(jobs) > 1, f"{shlex.join(example)} is no sweep"
        for job in jobs:
            proc = cli(module, *job, "--cfg", "job")
            assert proc.returncode == 0, f"{shlex.join(example)}: {job}: {proc.stderr}"
            overrides = rewrite_flags(job) if module == "robustnlu.seqdrift" else job
            check_schema(config, overrides, tmp_path)


@pytest.mark.parametrize("module", sorted(APPS))
def test_listed_groups_and_options_are_conf_and_the_apps_own(module):
    app = APPS[module]
    rows = group_rows(module)
    defaults = defaults_list(app.config)
    expected = set(defaults) | (TRAINING_EXTRA_GROUPS if module == TRAINING else set())
    listed = [r.group for r in rows]
    assert len(set(listed)) == len(listed)
    assert not set(listed) - expected  # none of another app
    assert not expected - set(listed)  # and all of its own
    hydra_choices = composed(app.config, []).hydra.runtime.choices
    for row in rows:
        if row.group.startswith("hydra/"):  # Hydra's own default (basic) and our conf/hydra/<group>/
            assert not row.plus and row.default == hydra_choices[row.group]
            assert sorted(row.options) == sorted({*conf_options(row.group), row.default})
            continue
        assert sorted(row.options) == conf_options(row.group), \
            f"{row.group}: the options listed in conf/hydra/help/ are not the files of conf/{row.group.split('@')[0]}/"
        if row.group in defaults:
            assert not row.plus and row.default is not None, row.group
            assert yaml.safe_load(row.default) == defaults[row.group], row.group
        else:  # no default of its own: + (a method's node: no +, the method sets the default)
            assert row.default is None and row.plus == ("@" not in row.group), row.group


def test_groups_without_a_default_need_their_plus():
    for row in group_rows(TRAINING):
        if row.plus:
            with pytest.raises(HydraException):
                composed("config", [f"{row.group}={row.options[0]}"])
            for option in row.options:
                composed("config", [f"+{row.group}={option}"])
        elif row.default is None:  # a method's node: the methods that have one set its default
            group, _, package = row.group.partition("@")
            with pytest.raises(HydraException):
                composed("config", ["method=erm", f"{row.group}={row.options[0]}"])
            methods = [p.stem for p in sorted((CONF / "method").glob("*.yaml"))
                       if f"/{group}@{package.removeprefix('method.')}" in p.read_text()]
            assert methods, row.group
            for option in row.options:
                cfg = composed("config", [f"method={methods[0]}", f"{row.group}={option}"])
                assert cfg.hydra.runtime.choices[row.group] == option


@pytest.mark.parametrize("module", sorted(set(APPS) - {TRAINING}))
def test_no_training_only_group(module):
    training_only = {r.group for r in group_rows(TRAINING)} - set(defaults_list(APPS[module].config))
    listed = {r.group for r in group_rows(module)}
    assert {"method", "experiment", "trainer"} <= training_only
    assert not listed & training_only


@pytest.mark.parametrize("module", sorted(APPS))
def test_group_options_named_in_the_prose_exist(module):
    """``group=option`` and ``+group=option`` anywhere in the help (notes, descriptions), lists
    included, name options conf/ has."""
    text = help_text(module)
    groups = {p.parent.relative_to(CONF).as_posix() for p in CONF.rglob("*.yaml")}
    named = 0
    for plus, spec, value in re.findall(r"(?<![\w.@/-])(\+?)([a-z_/]+(?:@[a-z_.]+)?)=(\[[\w,]*\]|[\w]+)", text):
        group = spec.split("@")[0]
        if group not in groups or group == "hydra":
            continue
        options = value.strip("[]").split(",") if value.startswith("[") else [value]
        for option in filter(None, options):  # null: no option (a default of efficiency, hparams_search)
            named += 1
            assert option in [*conf_options(group), "null"] or (group, option) == ("hydra/launcher", "basic"), \
                f"{spec}={option}"
    assert named >= 3


@pytest.mark.parametrize("module", sorted(APPS))
def test_where_to_read_more_exists(module):
    more = " ".join(line.strip() for line in section(help_text(module), "More"))
    headings = {re.sub(r"^#+\s*", "", line).strip() for line in (REPO / "README.md").read_text().splitlines()
                if line.startswith("#")}
    readme = re.sub(r"\([^)]*\)", "", more.split("README.md:", 1)[1].split(";", 1)[0])
    sections = [name.strip() for name in readme.split(",")]
    assert sections and all(name in headings for name in sections), sections
    assert "docs/architecture.md" in more and (REPO / "docs" / "architecture.md").is_file()
    for path in re.findall(r"(?<![\w/])((?:conf|data|docs)/[\w./]*)", more):
        assert (REPO / path).exists(), path
    for name in re.findall(r"\brobustnlu(?:\.\w+)+", more):
        spec = importlib.util.find_spec(name)
        assert spec is not None and (spec.submodule_search_locations is None
                                     or importlib.util.find_spec(f"{name}.__main__") is not None), name


def test_help_lists_the_options_the_users_config_folders_add(tmp_path):
    """~5 s: a method and a group source of the user's (hydra.searchpath, as README's recipe adds a
    method), listed below the shipped groups; a file named as a shipped one adds nothing (Hydra reads
    robustnlu's), a folder that is not there neither; without a search path the help is as before."""
    (tmp_path / "mine" / "method").mkdir(parents=True)
    (tmp_path / "mine" / "method" / "batch_cvar.yaml").write_text("_target_: mine.BatchCVaR\nname: batch_cvar\n")
    (tmp_path / "mine" / "method" / "topk.yaml").write_text((CONF / "method" / "topk.yaml").read_text())
    (tmp_path / "mine" / "groups" / "sub").mkdir(parents=True)
    (tmp_path / "mine" / "groups" / "sub" / "by_length.yaml").write_text("_target_: mine.ByLength\n")
    proc = run_cli([f"hydra.searchpath=[file://{tmp_path}/mine,file://{tmp_path}/nowhere]", "--help"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    start = lines.index("Added by your config folders (hydra.searchpath):")
    assert lines[start - 2].startswith("  hydra/launcher=basic ")  # below the shipped groups' table
    assert lines[start + 1:start + 4] == [f"  {'groups/sub':<28}by_length", f"  {'method':<28}batch_cvar", ""]
    assert "Added by your config folders" not in help_text(TRAINING)


@pytest.mark.parametrize("module", sorted(APPS))
def test_help_lists_only_the_options_the_users_folders_add_to_this_apps_groups(module, tmp_path):
    """A user's folder with an option in every group robustnlu has (and a sub-group of each): an
    app's --help (its template as Hydra resolves it, in-process) lists those of the groups of its
    table and their sub-groups, and no group another app uses (the user's methods are no option of
    robustnlu.seqdrift)."""
    mine = tmp_path / "mine"
    groups = sorted({p.parent.relative_to(CONF).as_posix() for p in CONF.rglob("*/*.yaml")})
    for group in groups:
        for folder in (mine / group, mine / group / "sub"):
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "mine_option.yaml").write_text("{}\n")
    template = composed(APPS[module].config, [f"hydra.searchpath=[file://{mine}]"]).hydra.help.template
    lines = template.splitlines()
    start = lines.index("Added by your config folders (hydra.searchpath):") + 1
    end = lines.index("", start)
    listed = [line.split() for line in lines[start:end]]
    own = {row.group.split("@")[0] for row in group_rows(module)}
    expected = sorted(name for group in groups if group in own for name in (group, f"{group}/sub"))
    assert listed == [[name, "mine_option"] for name in expected]
    assert (module == TRAINING) == ("method" in own)
