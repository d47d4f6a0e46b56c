"""robustnlu as a user installs it: the sdist built from a copy of this checkout, the wheel
built from that sdist (as ``python -m build`` does), installed into a fresh virtual environment
and run from a folder outside the checkout: ``robustnlu --help``, a composed config, a
one-epoch training run on the shipped SNIPS with its shipped SeqDrift clustering, and one with a
method of the user's own (its module in the user's folder, its YAML in their config folder).

Offline and fast: the build uses this environment's setuptools (no build isolation), and the
fresh venv (without system site-packages, without pip) reaches the already installed
dependencies through a ``.pth`` file naming this environment's site-packages; robustnlu itself
comes only from the wheel (no PYTHONPATH, no editable install: a ``.pth`` line adds a folder
without running the ``.pth`` files in it). Marked ``wheel``: not in ``make test``, run by
``make test-wheel`` (CI runs it, .ci/run) and by ``make test-slow``."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from integration_helpers import REPO
from test_user_method import METHOD

pytestmark = pytest.mark.wheel

#: not part of a source tree: build outputs, caches, environments, run outputs (.gitignore)
NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", "venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
                                    "outputs", "multirun", "lightning_logs", "wandb", ".cache", "results")
#: what the wheel may weigh: the datasets (13 MB on disk, the corpora xz-compressed) make it about 14 MB
MAX_WHEEL_MB = 16
BUILD = "import sys; from setuptools import build_meta as b; print(getattr(b, sys.argv[1])(sys.argv[2]))"


@dataclass
class Installed:
    wheel: Path
    sdist: Path
    venv: Path
    work: Path  # a folder outside the checkout, where the commands run

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def site_packages(self) -> Path:
        return next((self.venv / "lib").glob("python3*/site-packages"))

    def run(self, *cmd: str | Path, timeout: int = 300) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", VIRTUAL_ENV=str(self.venv),
                   PATH=f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
        return subprocess.run([str(c) for c in cmd], cwd=self.work, env=env, capture_output=True, text=True,
                              timeout=timeout)


def checked(cmd: list[str | Path], cwd: Path) -> str:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{cmd}: exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    base = tmp_path_factory.mktemp("wheel")
    assert REPO not in base.parents
    source = base / "source"
    shutil.copytree(REPO, source, ignore=NOT_SOURCE, symlinks=True)
    checked([sys.executable, "-c", BUILD, "build_sdist", base / "sdist"], source)
    (sdist,) = (base / "sdist").glob("robustnlu-*.tar.gz")
    with tarfile.open(sdist) as archive:
        archive.extractall(base / "unpacked", **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    (unpacked,) = (base / "unpacked").iterdir()
    checked([sys.executable, "-c", BUILD, "build_wheel", base / "dist"], unpacked)
    (wheel,) = (base / "dist").glob("robustnlu-*.whl")

    venv = base / "venv"
    checked([sys.executable, "-m", "venv", "--without-pip", venv], base)
    installed = Installed(wheel, sdist, venv, base / "elsewhere")
    (installed.site_packages / "dependencies-of-the-test-environment.pth").write_text(
        "".join(f"{p}\n" for p in site.getsitepackages()))
    checked([sys.executable, "-m", "pip", "--python", installed.python, "install", "-q", "--no-deps", "--no-index",
             wheel], base)
    installed.work.mkdir()
    return installed


def test_the_wheel_carries_the_configs_the_datasets_and_every_package(installed):
    assert installed.wheel.stat().st_size < MAX_WHEEL_MB * 1e6, f"{installed.wheel.stat().st_size / 1e6:.1f} MB"
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    shipped = "robustnlu/_shipped/"
    assert {f"{shipped}conf/{p.relative_to(REPO / 'conf').as_posix()}" for p in (REPO / "conf").rglob("*.yaml")} <= names
    for data_file in ("README.md", "snips/train/seq.in.xz", "snips/SOURCE.md", "seqdrift/MANIFEST.json",
                      "noisy_nlu/LICENSE", "nltk_data/corpora/wordnet.zip", "topv2/weather_train.tsv.xz"):
        assert f"{shipped}data/{data_file}" in names
    from setuptools import find_packages  # here: collecting `make test` needs no setuptools

    packages = [*find_packages(str(REPO), include=["robustnlu*"]), "hydra_plugins.robustnlu_plugins"]
    assert len(packages) > 10 and {p for p in packages if f"{p.replace('.', '/')}/__init__.py" not in names} == set()
    assert any(n.startswith("robustnlu/noise/resources/") and n.endswith(".tsv") for n in names)
    assert not any(n.startswith(("tests/", "bench/", "docs/", "conf/", "data/")) for n in names)
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    scripts = zipfile.ZipFile(installed.wheel).read(entry_points).decode()
    assert "robustnlu = robustnlu.__main__:main" in scripts and "robustnlu-predict = robustnlu.predict:main" in scripts
    with tarfile.open(installed.sdist) as archive:  # the sdist keeps the checkout's layout
        members = {m.split("/", 1)[1] for m in archive.getnames() if "/" in m}
    assert {"conf/config.yaml", "data/snips/train/seq.in.xz", "robustnlu/_build.py", "pyproject.toml"} <= members


def test_robustnlu_comes_from_the_wheel(installed):
    proc = installed.run(installed.python, "-c", "import robustnlu.paths as p; print(p.CONF_DIR); print(p.DATA_DIR)")
    assert proc.returncode == 0, proc.stderr[-3000:]
    conf, data = proc.stdout.split()
    assert conf == str(installed.site_packages / "robustnlu" / "_shipped" / "conf")
    assert data == str(installed.site_packages / "robustnlu" / "_shipped" / "data")


def test_the_console_command_prints_its_help(installed):
    proc = installed.run(installed.venv / "bin" / "robustnlu", "--help")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("python -m robustnlu: train JointBERT")  # the shipped help template
    groups = next(line for line in proc.stdout.splitlines() if line.strip().startswith("dataset=snips"))
    assert "atis" in groups and "jsonl" in groups
    assert "Traceback" not in proc.stderr


def test_a_preset_composes_with_the_shipped_data(installed):
    proc = installed.run(installed.python, "-m", "robustnlu", "+experiment=snips_slot_context", "method=topk_ae",
                         "--cfg", "job")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "  path: ${paths.data_dir}/snips" in proc.stdout and "  kind: slot_context" in proc.stdout
    assert "  name: topk_ae_${.assignment}" in proc.stdout
    resolved = installed.run(installed.python, "-m", "robustnlu", "+experiment=snips_slot_context", "method=topk_ae",
                             "--cfg", "job", "--resolve", "--package", "dataset")
    assert resolved.returncode == 0, resolved.stderr[-3000:]
    assert f"path: {installed.site_packages / 'robustnlu' / '_shipped' / 'data' / 'snips'}" in resolved.stdout


def test_a_tiny_training_run_from_another_folder(installed):
    proc = installed.run(
        installed.venv / "bin" / "robustnlu", "+experiment=snips_slot_context", "encoder=tiny", "trainer.max_epochs=1",
        "+trainer.limit_train_batches=3", "+trainer.limit_val_batches=2", "data.batch_size=16",
        "~callbacks.progress_bar", "trainer.enable_progress_bar=false", "trainer.accelerator=cpu",
        "trainer.precision=32-true", "hydra.run.dir=outputs/tiny")
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert "using the shipped clustering snips-slot_context.clusters.json.gz" in proc.stdout + proc.stderr
    run_dir = installed.work / "outputs" / "tiny"
    assert (run_dir / "results.json").is_file() and list((run_dir / "checkpoints").glob("best-*.ckpt"))
    config = (run_dir / "config.yaml").read_text()
    assert f"path: {installed.site_packages / 'robustnlu' / '_shipped' / 'data' / 'snips'}\n" in config
    assert (installed.work / "outputs" / "cache").is_dir()  # relative paths: from the folder the command runs in
    assert not list(installed.site_packages.rglob("outputs"))


def test_a_method_of_the_users_own_trains_with_the_installed_package(installed):
    """docs/architecture.md's recipe without a checkout: the class in a module of the user's (in
    the folder they run ``python -m robustnlu`` in), its YAML found with ``hydra.searchpath``."""
    (installed.work / "mymethods.py").write_text(textwrap.dedent(METHOD))
    (installed.work / "myconf" / "method").mkdir(parents=True)
    (installed.work / "myconf" / "method" / "batch_cvar.yaml").write_text(
        "_target_: mymethods.BatchCVaR\nname: batch_cvar\nalpha: 0.25\n")
    args = [installed.python, "-m", "robustnlu", "+experiment=snips_slot_context", "method=batch_cvar",
            f"hydra.searchpath=[file://{installed.work / 'myconf'}]", "encoder=tiny", "trainer.max_epochs=1",
            "+trainer.limit_train_batches=3", "+trainer.limit_val_batches=2", "data.batch_size=16",
            "~callbacks.progress_bar", "trainer.enable_progress_bar=false", "trainer.accelerator=cpu",
            "trainer.precision=32-true"]
    proc = installed.run(*args, "hydra.run.dir=outputs/mine")
    assert proc.returncode == 0, proc.stderr[-5000:]
    results = json.loads((installed.work / "outputs" / "mine" / "results.json").read_text())
    assert results["method"] == "batch_cvar" and results["config"]["method"]["alpha"] == 0.25
    refused = installed.run(*args, "method.alpha=2", "hydra.run.dir=outputs/refused")
    assert refused.returncode == 2
    assert refused.stderr.strip() == "error: method.alpha: must be in (0, 1] (got 2)"
