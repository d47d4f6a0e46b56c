"""Build step (setuptools, ``[tool.setuptools] cmdclass`` in pyproject.toml), never imported at
run time: the wheel carries the checkout's top-level ``conf/`` and ``data/`` as
``robustnlu/_shipped/conf`` and ``robustnlu/_shipped/data`` (where `robustnlu.paths` looks for
them first), and the sdist carries them at its top level, so that a wheel built from it has
them too.

Loaded by setuptools from this file alone, before the package's dependencies exist in the build
environment: it imports nothing of robustnlu's."""

from __future__ import annotations

import os
from pathlib import Path

from setuptools.command.build_py import build_py

#: top-level folder -> the package folder it is shipped as (robustnlu.paths.SHIPPED)
SHIPPED_FOLDERS = {"conf": "robustnlu/_shipped/conf", "data": "robustnlu/_shipped/data"}
#: never shipped: caches and editor / OS droppings
LEFT_OUT_DIRS = {"__pycache__", ".ipynb_checkpoints"}


def shipped_files(folder: Path) -> list[str]:
    """The files under ``folder`` (relative, sorted), without hidden files and caches."""
    names = []
    for path in sorted(folder.rglob("*")):
        parts = path.relative_to(folder).parts
        if path.is_file() and not any(p.startswith(".") or p in LEFT_OUT_DIRS for p in parts):
            names.append(path.relative_to(folder).as_posix())
    return names


class BuildPy(build_py):
    """setuptools' ``build_py`` with `SHIPPED_FOLDERS` as package data. An editable install
    (``pip install -e .``) runs from the checkout, which has them at the top level already."""

    def _get_data_files(self):
        return super()._get_data_files() + self.shipped_data_files()

    def get_data_files_without_manifest(self):  # what the sdist's file list is made from
        return super().get_data_files_without_manifest() + self.shipped_data_files()

    def shipped_data_files(self) -> list[tuple[str, str, str, list[str]]]:
        """(package, source folder, build folder, files) of each of `SHIPPED_FOLDERS`."""
        if getattr(self, "editable_mode", False):
            return []
        entries = []
        for source, target in SHIPPED_FOLDERS.items():
            if not Path(source).is_dir():
                raise FileNotFoundError(f"{source}/ is missing: robustnlu is built from a checkout or its sdist, "
                                        "both of which hold conf/ and data/")
            build_dir = os.path.join(self.build_lib, *target.split("/"))
            entries.append((target.replace("/", "."), source, build_dir, shipped_files(Path(source))))
        return entries
