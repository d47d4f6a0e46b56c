"""Atomic output (robustnlu/io.py): all or nothing, with the permissions of a plain open; a new file
that never replaces another's (`atomic_create`); outputs that would overwrite an input, or cannot be
written, refused before any work. Input data read the same
compressed or not (`data_file`, `read_data`, `open_data`)."""

from __future__ import annotations

import errno
import gzip
import lzma
import os
import re
import stat
from pathlib import Path

import pytest

from robustnlu.errors import ConfigError, DataError
from robustnlu.io import (atomic_create, atomic_write_compressed, atomic_write_files, atomic_write_json, atomic_write_text,
                          check_outputs, data_file, open_data, read_data, same_path)


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


def test_a_set_of_files_is_written_with_the_bytes_given(tmp_path):
    written = atomic_write_files({tmp_path / "a.txt": "tëxt\n", tmp_path / "b.bin": b"\x00\xff",
                                  str(tmp_path / "sub" / "c.dat"): lambda f: f.write(b"streamed")})
    assert written == [tmp_path / "a.txt", tmp_path / "b.bin", tmp_path / "sub" / "c.dat"]
    assert [p.read_bytes() for p in written] == ["tëxt\n".encode("utf-8"), b"\x00\xff", b"streamed"]
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a.txt", "b.bin", "c.dat", "sub"]  # no temporary


def test_a_set_whose_third_file_fails_replaces_none_and_leaves_no_temporary(tmp_path):
    old = {"a.jsonl": b"old a", "b.jsonl": b"old b", "c.jsonl": b"old c"}
    for name, data in old.items():
        (tmp_path / name).write_bytes(data)

    def disk_full(f):
        f.write(b"half of c")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        atomic_write_files({tmp_path / "a.jsonl": "new a", tmp_path / "b.jsonl": "new b", tmp_path / "c.jsonl": disk_full,
                            tmp_path / "stats.json": "{}"})
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == old


@pytest.mark.parametrize("links", ["hard links", "no hard links"])
def test_a_created_file_takes_the_first_free_name_and_replaces_none(tmp_path, monkeypatch, links):
    """The first name is another process's file: the content goes to the second, whole, the first
    is left as it was, no temporary stays; with every name taken, `FileExistsError`. A file system
    without hard links cannot be had here: ``os.link`` failing as on one (EPERM) stands in for it."""
    if links == "no hard links":
        def unsupported(src, dst):
            raise PermissionError(errno.EPERM, "Operation not permitted", src, None, dst)
        monkeypatch.setattr("robustnlu.io.os.link", unsupported)
    (tmp_path / "a.json").write_text("another's\n")
    assert atomic_create([tmp_path / "a.json", tmp_path / "a.2.json"], b"mine\n") == tmp_path / "a.2.json"
    assert (tmp_path / "a.json").read_text() == "another's\n" and (tmp_path / "a.2.json").read_text() == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.2.json", "a.json"]
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((tmp_path / "a.2.json").stat().st_mode) == 0o666 & ~umask  # a plain open's
    with pytest.raises(FileExistsError):
        atomic_create([tmp_path / "a.json", tmp_path / "a.2.json"], b"again\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.2.json", "a.json"]
    assert (tmp_path / "a.2.json").read_text() == "mine\n"


def test_an_output_that_is_an_input_however_spelled_is_refused(tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    train = data / "train.jsonl"
    train.write_text("{}\n")
    os.link(train, tmp_path / "hard.jsonl")
    (tmp_path / "soft").symlink_to(data)
    monkeypatch.chdir(tmp_path)
    spellings = [train, Path("data/train.jsonl"), data / ".." / "data" / "train.jsonl", tmp_path / "hard.jsonl",
                 tmp_path / "soft" / "train.jsonl"]
    for out in spellings:
        with pytest.raises(ConfigError) as info:
            check_outputs([data / "test.jsonl", out], [train], "out_dir")
        shown = "" if out == train else f" ({train})"
        assert str(info.value) == (f"out_dir: {out} is an input of this command{shown}; writing it would overwrite "
                                   "the input: choose another out_dir")
    check_outputs([data / "test.jsonl", tmp_path / "new" / "deeper" / "train.jsonl"], [train], "out_dir")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "hard.jsonl", "soft"]  # a check creates nothing


def test_an_output_inside_a_run_directory_a_folder_or_unwritable_is_refused(tmp_path):
    run, runs = tmp_path / "run", tmp_path / "runs"  # "runs" starts with "run" but is not inside it
    run.mkdir()
    (tmp_path / "file").write_text("x")
    check_outputs([runs / "report.md"], [], "--out", within=[run])
    for out, problem in [
        (run / "report.md", f"{run / 'report.md'} lies inside {run}, a run directory this command reads"),
        (run / "a" / "report.md", f"{run / 'a' / 'report.md'} lies inside {run}, a run directory this command reads"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(problem) + ": choose another --out$"):
            check_outputs([out], [], "--out", within=[run])
    with pytest.raises(ConfigError, match=re.escape(f"--out: {run} is a directory, not a file") + "$"):
        check_outputs([run], [], "--out")
    with pytest.raises(ConfigError, match=re.escape(f"--out: cannot write {tmp_path / 'file' / 'x' / 'o.jsonl'}: "
                                                    f"{tmp_path / 'file'} is not a directory") + "$"):
        check_outputs([tmp_path / "file" / "x" / "o.jsonl"], [], "--out")


def test_same_path_compares_files_and_paths_not_yet_written(tmp_path):
    (tmp_path / "a").write_text("x")
    assert same_path(tmp_path / "a", tmp_path / "." / "a")
    assert same_path(tmp_path / "new" / ".." / "b", tmp_path / "b")  # neither exists: the resolved paths
    assert not same_path(tmp_path / "a", tmp_path / "b")


TEXT = "".join(f"play song {i}\tPlayMusic\n" for i in range(500))


def test_a_data_file_is_the_named_file_else_its_xz_else_its_gz(tmp_path):
    named = tmp_path / "train.tsv"
    assert data_file(named) == named  # nothing there: the name, whose reading says it is missing
    (tmp_path / "train.tsv.gz").write_bytes(gzip.compress(b"gz"))
    assert data_file(named) == tmp_path / "train.tsv.gz"
    (tmp_path / "train.tsv.xz").write_bytes(lzma.compress(b"xz"))
    assert data_file(named) == tmp_path / "train.tsv.xz"
    named.write_text("plain")
    assert data_file(named) == named and data_file(str(named)) == named
    assert data_file(tmp_path / "train.tsv.xz") == tmp_path / "train.tsv.xz"  # named with its suffix: as is


@pytest.mark.parametrize(("suffix", "compress"), [("", bytes), (".xz", lzma.compress), (".gz", gzip.compress)])
def test_read_data_and_open_data_decompress_by_suffix(tmp_path, suffix, compress):
    path = tmp_path / f"train.tsv{suffix}"
    path.write_bytes(compress(TEXT.encode()))
    assert read_data(path) == TEXT.encode()
    with open_data(path, "rt", encoding="utf-8") as handle:
        assert list(handle) == TEXT.splitlines(keepends=True)


@pytest.mark.parametrize(("suffix", "decompress"), [(".xz", lzma.decompress), (".gz", gzip.decompress)])
def test_a_compressed_write_follows_the_suffix_gives_the_same_bytes_and_reads_back(tmp_path, suffix, decompress):
    """A record's predictions (``.xz``) and a shipped clustering (``.gz``) are committed: the same
    data must give the same bytes, so an unchanged record is no change to git."""
    data = TEXT.encode() * 50
    first = atomic_write_compressed(tmp_path / f"a.jsonl{suffix}", data).read_bytes()
    assert decompress(first) == data == read_data(tmp_path / f"a.jsonl{suffix}")
    assert atomic_write_compressed(tmp_path / f"b.jsonl{suffix}", data).read_bytes() == first
    assert len(first) < len(data)
    with pytest.raises(ValueError, match=r"a\.jsonl\.bz2: a compressed file's name ends in one of \['\.gz', '\.xz'\]"):
        atomic_write_compressed(tmp_path / "a.jsonl.bz2", data)
    assert not (tmp_path / "a.jsonl.bz2").exists()


@pytest.mark.parametrize("suffix", [".xz", ".gz"])
def test_a_corrupt_cut_short_or_missing_data_file_is_a_data_error_naming_it(tmp_path, suffix):
    compress = {".xz": lzma.compress, ".gz": gzip.compress}[suffix]
    path = tmp_path / f"train.tsv{suffix}"
    path.write_bytes(compress(TEXT.encode())[:-30])  # cut short
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}: cannot decompress \(corrupt or cut short\?\): "):
        read_data(path)
    path.write_bytes(b"plain text under a compressed name\n")
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}: cannot decompress"):
        read_data(path)
    path.unlink()
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}: file not found$"):
        read_data(path)
    with pytest.raises(DataError, match=rf"^{re.escape(str(tmp_path))}: cannot read file: "):
        read_data(tmp_path)  # a folder
