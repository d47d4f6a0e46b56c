"""A command line that argparse refuses is reported as every user error is: one line on stderr,
``error: <prog>: <what is wrong> (see <prog> --help)``, exit status 2, nothing on stdout
(`robustnlu.errors.CommandLineParser`), and at once: no command imports torch, Lightning or
transformers (seconds of imports) before it has read its command line, so neither a refused one
nor ``--help`` waits for them (`HEAVY`, read from the imports Python reports with
``-X importtime``). The commands are found, not listed: every module of robustnlu/ that runs as
``python -m`` and builds a parser; a parser built from argparse's own class anywhere fails
`test_every_parser_is_the_one_line_parser`."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from integration_helpers import REPO, run_cli
from robustnlu.errors import USER_ERROR, CommandLineParser

PACKAGE = REPO / "robustnlu"
PARSER_CLASSES = {"ArgumentParser", "CommandLineParser"}


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__main__" else parts)


def parser_classes_called(tree: ast.Module) -> set[str]:
    """How the module's code names the parser classes it calls (``argparse.ArgumentParser``)."""
    return {ast.unparse(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)
            and (node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None))
            in PARSER_CLASSES}


def runs_as_main(path: Path, tree: ast.Module) -> bool:
    """A ``__main__.py``, or a module with ``if __name__ == "__main__":``."""
    return path.name == "__main__.py" or any(
        isinstance(node, ast.If) and ast.unparse(node.test) in ('__name__ == "__main__"', "__name__ == '__main__'")
        for node in tree.body)


TREES = {path: ast.parse(path.read_text(), str(path)) for path in sorted(PACKAGE.rglob("*.py"))}
COMMANDS = sorted(module_name(path) for path, tree in TREES.items()
                  if runs_as_main(path, tree) and parser_classes_called(tree))
#: (module, arguments, the parser that refuses them): an unknown option for every command, and
#: the parsers of subcommands
CASES = [*((module, ("--no-such-option",), f"python -m {module}") for module in COMMANDS),
         ("robustnlu.sweep", ("status", "--json"), "python -m robustnlu.sweep status"),  # no sweep_dir
         ("robustnlu.reproduce", ("report", "--no-such-option"), "python -m robustnlu.reproduce report")]
#: (module, arguments): every command's ``--help``, and its subcommands'
HELP = [*((module, ("--help",)) for module in COMMANDS),
        ("robustnlu.sweep", ("status", "--help")), ("robustnlu.reproduce", ("report", "--help"))]
#: (module, arguments) answered before the command's work: every refusal above and every help
ANSWERED = [*((module, arguments) for module, arguments, _ in CASES), *HELP]
#: the packages a command imports for its work only, after its command line is read
HEAVY = frozenset({"torch", "torchmetrics", "pytorch_lightning", "lightning", "lightning_fabric", "transformers"})
#: those but torch: what a training config's check does not import (it imports torch with the
#: method's class, which declares the method's hyper-parameters), so a value or a run directory it
#: refuses is refused before them (tests/test_config_schema.py, tests/test_run_dir_safety.py)
TRAINING_ONLY = HEAVY - {"torch"}


def test_the_commands_are_found():
    assert {"robustnlu.sweep", "robustnlu.predict", "robustnlu.efficiency", "robustnlu.reproduce",
            "robustnlu.seqdrift.canonical"} <= set(COMMANDS)
    assert "robustnlu" not in COMMANDS  # a Hydra app: Hydra parses its command line


def test_every_parser_is_the_one_line_parser():
    plain = {module_name(path) for path, tree in TREES.items() if parser_classes_called(tree) - {"CommandLineParser"}}
    assert plain == set()


@pytest.fixture(scope="module")
def refusals(tmp_path_factory) -> Iterator[dict[tuple, Future]]:
    """Every case run at once (a few at a time: most commands import torch), in an empty folder."""
    cwd = tmp_path_factory.mktemp("cwd")
    with ThreadPoolExecutor(max_workers=4) as pool:
        yield {case: pool.submit(run_cli, list(case[1]), cwd, module=case[0]) for case in CASES}
    assert not any(cwd.iterdir())


@pytest.mark.parametrize("case", [pytest.param(case, id=" ".join((case[0], *case[1]))) for case in CASES])
def test_a_refused_command_line_is_one_error_line(refusals, case):
    proc = refusals[case].result()
    prog = case[2]
    assert (proc.returncode, proc.stdout) == (USER_ERROR, ""), proc.stderr
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith(f"error: {prog}: ") and proc.stderr.endswith(f" (see {prog} --help)\n"), proc.stderr


def imported(importtime: str) -> set[str]:
    """The modules a process imported, read from the ``-X importtime`` lines of its stderr
    (``import time: <self> | <cumulative> | <module, indented by depth>``)."""
    return {line.rsplit("|", 1)[1].strip() for line in importtime.splitlines() if line.startswith("import time:")}


def test_imported_reads_the_modules_of_importtime_lines():
    lines = ("import time: self [us] | cumulative | imported package\n"
             "import time:       120 |        300 |   torch._C\nerror: python -m x: bad\n"
             "import time:        80 |      95000 | torch\n")
    assert imported(lines) - {"imported package"} == {"torch._C", "torch"}


@pytest.fixture(scope="module")
def imports(tmp_path_factory) -> Iterator[dict[tuple, Future]]:
    """Every refusal and help of `ANSWERED`, run with ``-X importtime`` (as
    ``PYTHONPROFILEIMPORTTIME=1``), in an empty folder."""
    cwd = tmp_path_factory.mktemp("cwd")
    with ThreadPoolExecutor(max_workers=4) as pool:
        yield {case: pool.submit(run_cli, list(case[1]), cwd, {"PYTHONPROFILEIMPORTTIME": "1"}, case[0])
               for case in ANSWERED}
    assert not any(cwd.iterdir())


@pytest.mark.parametrize("case", [pytest.param(case, id=" ".join((case[0], *case[1]))) for case in ANSWERED])
def test_a_command_line_is_answered_before_torch_is_imported(imports, case):
    proc = imports[case].result()
    modules = imported(proc.stderr)
    assert proc.returncode == (0 if "--help" in case[1] else USER_ERROR), proc.stderr[-3000:]
    assert "robustnlu.errors" in modules  # the import lines are there to read
    heavy = sorted({m.split(".")[0] for m in modules} & HEAVY)
    assert heavy == [], f"imported with {sorted(m for m in modules if m.startswith('robustnlu'))}"


def parser_with_a_subcommand() -> CommandLineParser:
    parser = CommandLineParser(prog="tool", description="what tool does")
    parser.add_argument("--size", type=int, help="how big")
    parser.add_subparsers(dest="command", required=True).add_parser("show").add_argument("--limit", type=int)
    return parser


@pytest.mark.parametrize("argv, line", [
    (["--size", "x", "show"], "error: tool: argument --size: invalid int value: 'x' (see tool --help)\n"),
    (["shw"], "error: tool: argument command: invalid choice: 'shw' (choose from 'show') (see tool --help)\n"),
    (["show", "--limit", "x"], "error: tool show: argument --limit: invalid int value: 'x' (see tool show --help)\n"),
    (["show", "--lmit"], "error: tool: unrecognized arguments: --lmit (see tool --help)\n"),
])
def test_the_parser_and_its_subparsers_refuse_in_one_line(capsys, argv, line):
    with pytest.raises(SystemExit) as stop:
        parser_with_a_subcommand().parse_args(argv)
    assert stop.value.code == USER_ERROR
    assert capsys.readouterr() == ("", line)


@pytest.mark.parametrize("argv, start", [(["--help"], "usage: tool [-h] [--size SIZE] {show} ..."),
                                         (["show", "--help"], "usage: tool show [-h] [--limit LIMIT]")])
def test_help_is_still_the_full_help(capsys, argv, start):
    with pytest.raises(SystemExit) as stop:
        parser_with_a_subcommand().parse_args(argv)
    out, err = capsys.readouterr()
    assert (stop.value.code, err) == (0, "")
    assert out.startswith(start + "\n") and "options:" in out and ("how big" in out) == (argv == ["--help"])
