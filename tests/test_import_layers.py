"""Imports go one way, top to bottom: a module of robustnlu/ may import modules of its own layer
or of a lower one, never of a higher one. Every import counts, the ones inside
functions included (they are how a heavy or optional module is loaded late, not a way around
the order). Parsed with `ast`, nothing is imported.

The layers, bottom first (`LAYERS`; a module belongs to the layer of the longest name that
matches it, its own or a package's):

1. errors: the user errors every layer raises; and the build step (_build: setuptools copies
   conf/ and data/ into the wheel with it), which imports nothing of robustnlu's;
2. the plumbing every layer may use: file writing (io), optional extras, numeric precision,
   the hardware a run trains on, checkpoint files, the repository's paths, run directories
   (rundir), the scenario value, the table writer, the figure renderer (plotting), a sweep job's
   identity (sweep_jobs), what a config value may be (config_spec) and the hyper-parameters
   classes declare in its terms (hparams);
3. data (utterances, readers, the data module) and metrics;
4. what is computed from data alone: the model's networks, SeqDrift splits, noise transforms,
   model selection criteria, and the efficiency protocol's corpus step and curve fit;
5. what an objective builds on: group sources (groups), learned adversaries (adversary), the
   optimisers (optim: R-PDRO's adversary uses `weight_decay_groups`), DDP helpers;
6. the objectives (robust);
7. the LightningModule and prediction with a trained one;
8. the config schema, which reads the allowed values of every layer below, and what the Hydra
   apps share (cli: composing and checking configs, one-line user errors);
9. a training run (train), its console progress bar (progress) and what it logs for a dashboard
   (dashboard), the robustness suites (evaluate, also a library of train), resuming, and the
   efficiency protocol's run (its corpus, adaptation callback, source Fisher);
10. reading run directories back: analysis, the study report, the HPO driver, the efficiency
    study, its outputs and plot, a sweep's jobs' states (sweep_state), its status and relaunch
    (sweep), studies (a planned list of jobs run through the sweep machinery);
11. the studies this project runs on that machinery (studies.seqdrift_dro: the core paper's plan,
    its numbers and the reproduction report);
12. entry points: every ``__main__`` module, and the drivers that compose configs themselves
    (seqdrift.canonical) or run a study (reproduce).

cli sits below train and evaluate, not at the top, because they are Hydra apps that use its
`hydra_app` / `run_or_exit`. A module that is in no layer fails `test_every_module_has_a_layer`:
add it to `LAYERS` where its imports allow (new top-level modules and packages need a line;
a module inside a listed package inherits the package's layer). docs/architecture.md draws the
same layers (`test_the_architecture_doc_draws_these_layers`).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path


PACKAGE = Path(__file__).resolve().parents[1] / "robustnlu"

#: bottom first; a name is a module or a package (then every module inside it)
LAYERS: list[list[str]] = [
    ["errors", "_build"],
    ["io", "extras", "precision", "hardware", "checkpoint", "checkpoint_io", "paths", "rundir", "runlock", "scenario", "tables",
     "plotting", "sweep_jobs", "config_spec", "hparams"],
    ["data", "metrics"],
    ["model", "seqdrift", "noise", "selection", "efficiency"],  # efficiency: subsets, curve (the rest above)
    ["groups", "adversary", "optim", "distributed"],
    ["robust"],
    ["module", "predict", "predictor"],
    ["config_schema", "cli", "rundir_claim", "rundir_check"],
    ["train", "progress", "dashboard", "evaluate", "resume", "efficiency.protocol", "efficiency.adapt"],
    ["analysis", "report", "hpo", "efficiency.study", "efficiency.report", "efficiency.plot", "sweep_state", "sweep", "studies"],
    ["studies.seqdrift_dro"],
    ["seqdrift.canonical", "reproduce"],  # + every __main__ (`layer_of`)
]
TOP = len(LAYERS) - 1

def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer_of(module: str) -> int | None:
    """The layer of ``module`` (``robustnlu.x.y``): top for a ``__main__``, else the layer of
    the longest listed name that is the module or one of its packages; None if none is."""
    if module.rsplit(".", 1)[-1] == "__main__":
        return TOP
    name = module.removeprefix("robustnlu.")
    best: tuple[int, int] | None = None  # (length of the match, layer)
    for layer, names in enumerate(LAYERS):
        for listed in names:
            if (name == listed or name.startswith(listed + ".")) and (best is None or len(listed) > best[0]):
                best = (len(listed), layer)
    return best[1] if best else None


def imports_of(module: str, path: Path) -> set[str]:
    """The robustnlu modules ``module`` imports, anywhere in its file (``from robustnlu.x import
    y`` counts as ``robustnlu.x.y`` when that is a module)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package upwards
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
    return {name for name in found if name == "robustnlu" or name.startswith("robustnlu.")}


def upward_imports() -> set[tuple[str, str]]:
    edges = set()
    for module, path in MODULES.items():
        for imported in imports_of(module, path):
            low, high = layer_of(module), layer_of(imported)
            if low is not None and high is not None and high > low:
                edges.add((module, imported))
    return edges


def test_every_module_has_a_layer():
    missing = sorted(m for m in MODULES if m != "robustnlu" and layer_of(m) is None)
    assert not missing, (f"{', '.join(missing)}: in no layer; add it (or its package) to LAYERS in "
                         f"tests/test_import_layers.py where its imports allow")


def test_no_module_imports_a_higher_layer():
    upward = sorted(upward_imports())
    lines = [f"{a} (layer {layer_of(a) + 1}) imports {b} (layer {layer_of(b) + 1})" for a, b in upward]
    assert not upward, "imports that run up:\n" + "\n".join(lines)


def test_the_checker_sees_function_level_and_relative_imports(tmp_path):
    """The parser on a hand-made module: a function-level import and ``from . import x``."""
    source = tmp_path / "robustnlu" / "model" / "fake.py"
    source.parent.mkdir(parents=True)
    source.write_text("def f():\n    from robustnlu.train import run\n    from . import jointbert\n")
    assert imports_of("robustnlu.model.fake", source) >= {"robustnlu.train", "robustnlu.model.jointbert"}
    assert layer_of("robustnlu.train") > layer_of("robustnlu.model.fake")
    assert layer_of("robustnlu.seqdrift.__main__") == TOP and layer_of("robustnlu.nonexistent") is None


def doc_layers(text: str) -> dict[str, int]:
    """The layer picture of docs/architecture.md (its first code block): each module or package
    it names (``io.py``, ``config_schema/``, ``efficiency/{subsets,curve}.py``, ``studies/runner.py``,
    ``seqdrift.canonical``; words in parentheses are descriptions) → its layer number."""
    block = text.split("```")[1]
    layers, layer = {}, None
    for line in block.splitlines():
        if m := re.match(r"\s*(\d+)\s{2}\S.*?\s{2,}(.*)", line):  # " 11  entry points     <names>"
            layer, names = int(m[1]), m[2]
        elif line.strip():
            names = line
        else:
            continue
        layers.setdefault(layer, []).append(names)
    found = {}
    for layer, lines in layers.items():
        names = " ".join(lines)
        while re.search(r"\([^()]*\)", names):
            names = re.sub(r"\([^()]*\)", "", names)
        for token in re.findall(r"(?:\w+/)+\{[\w,]+\}\.py|(?:\w+/)*\w+(?:\.\w+)?/?", names):
            if m := re.fullmatch(r"((?:\w+/)+)\{([\w,]+)\}\.py", token):
                found.update({f"{m[1].replace('/', '.')}{name}": layer for name in m[2].split(",")})
            elif m := re.fullmatch(r"((?:\w+/)*\w+)(?:\.py|/)|(\w+\.\w+)", token):
                found[m[1].replace("/", ".") if m[1] else m[2]] = layer
    found.pop("__main__", None)
    return found


def test_the_architecture_doc_draws_these_layers():
    """Every module or package the picture names exists and sits in the layer drawn (a module
    drawn inside a listed package: in the package's), and every name of `LAYERS` is drawn."""
    drawn = doc_layers((PACKAGE.parent / "docs" / "architecture.md").read_text())
    assert {name for name in drawn if f"robustnlu.{name}" not in MODULES} == set()
    assert {name: layer for name, layer in drawn.items() if layer_of(f"robustnlu.{name}") + 1 != layer} == {}
    listed = {name for names in LAYERS for name in names}
    assert {n for n in listed if n not in drawn and not any(d.startswith(f"{n}.") for d in drawn)} == set()


def test_the_doc_reader_reads_names_and_skips_descriptions():
    picture = "```\n  2  plumbing         io.py, x/{a,b}.py (the io/ of c.py)\n                      pkg/, m.n, p/q.py, p/r/\n```"
    assert doc_layers(picture) == {"io": 2, "x.a": 2, "x.b": 2, "pkg": 2, "m.n": 2, "p.q": 2, "p.r": 2}
