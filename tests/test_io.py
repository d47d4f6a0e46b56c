"""Atomic output (robustnlu/io.py): all or nothing, with the permissions of a plain open."""

from __future__ import annotations

import os
import stat

import pytest

from robustnlu.io import atomic_write_json, atomic_write_text


def test_an_atomic_write_gets_the_permissions_of_a_plain_open(tmp_path):
    (tmp_path / "plain.txt").write_text("x")
    atomic_write_text(tmp_path / "atomic.txt", "x")
    mode = lambda name: stat.S_IMODE((tmp_path / name).stat().st_mode)  # noqa: E731
    assert mode("atomic.txt") == mode("plain.txt")
    umask = os.umask(0)
    os.umask(umask)
    assert mode("atomic.txt") == 0o666 & ~umask  # not mkstemp's 0600


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "results.json"
    atomic_write_json(target, {"a": 1})
    with pytest.raises(TypeError):
        atomic_write_json(target, {"a": object()})  # not JSON-serialisable
    assert target.read_text() == '{\n  "a": 1\n}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]
