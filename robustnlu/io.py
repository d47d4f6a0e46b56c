"""Atomic output: every file is written to a temporary sibling and renamed into place, so a
crash or a bad input never leaves a half-written result behind, and a set of files that belong
together replaces the old set only once every one of them is written (`atomic_write_files`), and a
new file takes a name no other process has taken, never replacing one (`atomic_create`);
`check_outputs` refuses, before any work, an output path that would overwrite one of a command's
inputs or cannot be written; `compute_once` makes concurrent processes (a Slurm array on a shared
filesystem) compute a cached result once. And the one way input data is opened, compressed or
not: `data_file`, `open_data`, `read_data`."""

from __future__ import annotations

import contextlib
import errno
import gzip
import itertools
import json
import logging
import lzma
import os
import socket
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any, BinaryIO, NamedTuple, TypeVar

from robustnlu.errors import ConfigError, DataError

T = TypeVar("T")
logger = logging.getLogger(__name__)

UMASK = os.umask(0)  # read once (os.umask can only be read by setting it) and restored at once
os.umask(UMASK)


class Codec(NamedTuple):
    """How a file whose name ends in a compression suffix is read and written."""

    open: Callable[..., IO]  # opens it, decompressing as it is read (`open_data`)
    compress: Callable[[bytes], bytes]  # its bytes from the data (`atomic_write_compressed`)


#: the compressed formats by suffix, in the order `data_file` looks for them. Both compressors
#: give the same bytes for the same data (gzip's header has mtime 0; xz's has no time); xz -9e is
#: about a quarter smaller than gzip -9 on a record's predictions
CODECS: dict[str, Codec] = {
    ".xz": Codec(lzma.open, lambda data: lzma.compress(data, preset=9 | lzma.PRESET_EXTREME)),
    ".gz": Codec(gzip.open, lambda data: gzip.compress(data, compresslevel=9, mtime=0)),
}
#: what reading a compressed file raises when it is corrupt or cut short (BadGzipFile is an OSError)
CORRUPT_STREAM = (EOFError, lzma.LZMAError, zlib.error, gzip.BadGzipFile)


def data_file(path: str | Path) -> Path:
    """The file that holds the data named ``path``: ``path`` itself where it exists, else the
    first of ``<path>.xz``, ``<path>.gz`` that exists, else ``path`` (whose reading then reports
    it missing). A config names a data file by its uncompressed name (``train.tsv``); the shipped
    corpora are ``train.tsv.xz``, and an uncompressed copy of the user's beside it is read instead."""
    path = Path(path)
    if path.exists():
        return path
    for suffix in CODECS:
        compressed = path.with_name(path.name + suffix)
        if compressed.is_file():
            return compressed
    return path


def open_data(path: str | Path, mode: str = "rb", encoding: str | None = None) -> IO:
    """``path`` opened for reading (``mode`` ``rb``, or ``rt`` with ``encoding``), decompressed on
    the fly when its name ends in ``.xz`` or ``.gz`` (`CODECS`); reading a corrupt or
    cut-short one raises one of `CORRUPT_STREAM`."""
    path = Path(path)
    opener = CODECS[path.suffix].open if path.suffix in CODECS else open
    return opener(path, mode, encoding=encoding)


def read_data(path: str | Path) -> bytes:
    """The bytes of the data file ``path``, decompressed (`open_data`). `DataError` naming the
    file when it is missing or unreadable, or compressed and corrupt or cut short."""
    try:
        with open_data(path) as file:
            return file.read()
    except FileNotFoundError:
        raise DataError(path, None, "file not found") from None
    except CORRUPT_STREAM as err:
        raise DataError(path, None, f"cannot decompress (corrupt or cut short?): {err}") from None
    except OSError as err:
        raise DataError(path, None, f"cannot read file: {err.strerror or err}") from None


def same_path(a: str | Path, b: str | Path) -> bool:
    """Whether ``a`` and ``b`` name the same file or folder, however spelled: the same device and
    inode where both exist (symbolic and hard links, ``..``, relative paths), else the same
    resolved path."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet)
        return Path(a).resolve() == Path(b).resolve()


def _nearest_existing(path: Path) -> Path:
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_outputs(outputs: Iterable[str | Path], inputs: Iterable[str | Path], option: str,
                  within: Iterable[str | Path] = ()) -> None:
    """Refuse, before a command does any work, an output file it would write: one that is one of
    its ``inputs`` (`same_path`), lies inside one of the folders ``within`` (a run directory it
    reads), is an existing folder, or cannot be created (the nearest existing path above it is
    not a writable folder). `ConfigError` naming ``option``, the option that chose the path."""
    sources = [Path(p) for p in inputs]
    folders = [Path(p).resolve() for p in within]
    for out in map(Path, outputs):
        if clash := next((p for p in sources if same_path(out, p)), None):
            shown = "" if str(clash) == str(out) else f" ({clash})"
            raise ConfigError(f"{option}: {out} is an input of this command{shown}; writing it would overwrite "
                              f"the input: choose another {option}")
        resolved = out.resolve()
        if run := next((d for d in folders if d == resolved or d in resolved.parents), None):
            raise ConfigError(f"{option}: {out} lies inside {run}, a run directory this command reads: choose "
                              f"another {option}")
        if out.is_dir():
            raise ConfigError(f"{option}: {out} is a directory, not a file")
        parent = _nearest_existing(out.parent)
        if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
            why = "not a directory" if not parent.is_dir() else "not writable"
            raise ConfigError(f"{option}: cannot write {out}: {parent} is {why}")


@contextlib.contextmanager
def writing(option: str) -> Iterator[None]:
    """Around a command's writes: an `OSError` (a path `check_outputs` could not foresee, a full
    disk) becomes a `ConfigError` naming ``option`` and the path."""
    try:
        yield
    except OSError as err:
        where = f" {err.filename}" if err.filename else ""
        raise ConfigError(f"{option}: cannot write{where}: {err.strerror or err}") from None


#: what `atomic_write_files` writes into a file: text (as UTF-8), bytes, or ``write(file)``, a
#: function that writes into the file it is given (opened in binary mode)
Content = str | bytes | Callable[[BinaryIO], object]


def _temporary_sibling(path: Path, content: Content) -> Path:
    """A new temporary file beside ``path`` holding ``content``, flushed to disk, with the
    permissions of a plain ``open`` (0666 minus the umask); removed again if writing it fails."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            if callable(content):
                content(f)
            else:
                f.write(content.encode("utf-8") if isinstance(content, str) else content)
            f.flush()
            os.fchmod(f.fileno(), 0o666 & ~UMASK)  # mkstemp's 0600 would hide results from colleagues
            os.fsync(f.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def atomic_write_files(files: Mapping[str | Path, Content]) -> list[Path]:
    """Write several files that belong together as one step: every file's content to a temporary
    sibling first, then each temporary ``os.replace``-d into place. If writing any content fails
    (a full disk, a serializer that raises), every temporary is removed and no file is touched:
    the old files stay as they were, none of the new ones appears. (The renames come last; they are
    not one atomic step, but they write no data.) Returns the paths, in order."""
    paths = [Path(path) for path in files]
    temporaries: list[Path] = []
    try:
        for path, content in zip(paths, files.values()):
            temporaries.append(_temporary_sibling(path, content))
        for tmp, path in zip(temporaries, paths):
            os.replace(tmp, path)
    except BaseException:
        for tmp in temporaries:
            tmp.unlink(missing_ok=True)
        raise
    return paths


#: what ``link`` fails with on a file system without hard links (FAT, some FUSE and SMB mounts)
LINKS_UNSUPPORTED = frozenset({errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS})


def atomic_create(names: Iterable[str | Path], content: Content) -> Path:
    """Write ``content`` as a new file under the first of ``names`` (in one folder) that is free,
    never replacing another's file: the content goes to a temporary sibling first, which is then
    hard-linked to each name in turn until a link succeeds (``link`` fails where the name exists,
    atomically, on network file systems too). Where the file system has no hard links
    (`LINKS_UNSUPPORTED`), a name is claimed by creating it exclusively (``O_EXCL``) and the
    content renamed onto it: a reader may see it empty for that moment. Of two processes that
    create at once, each gets a name of its own and a complete file. Returns the name taken;
    `FileExistsError` where every name is taken."""
    names = iter(names)
    first = Path(next(names))
    tmp = _temporary_sibling(first, content)
    try:
        for name in itertools.chain([first], names):
            try:
                os.link(tmp, name)
            except FileExistsError:
                continue
            except OSError as err:
                if err.errno not in LINKS_UNSUPPORTED:
                    raise
                try:  # no hard links here: the name claimed as an empty file, then the content renamed onto it
                    os.close(os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
                except FileExistsError:
                    continue
                os.replace(tmp, name)
            return Path(name)
        raise FileExistsError(f"{first.parent}: every name for the new file is taken")
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_with(path: str | Path, write: Callable[[BinaryIO], object]) -> Path:
    """Call ``write(file)`` on a temporary sibling of ``path`` opened in binary mode, then
    ``os.replace`` it into place (the temporary file is removed if ``write`` fails). The file
    gets the permissions of a plain ``open`` (0666 minus the umask)."""
    return atomic_write_files({path: write})[0]


def atomic_write_compressed(path: str | Path, data: bytes) -> Path:
    """``data`` compressed as the suffix of ``path`` says (`CODECS`: ``.xz`` or ``.gz``),
    written atomically; the same data gives the same bytes each time. `open_data` reads it back."""
    path = Path(path)
    if path.suffix not in CODECS:
        raise ValueError(f"{path}: a compressed file's name ends in one of {sorted(CODECS)}")
    compressed = CODECS[path.suffix].compress(data)
    return atomic_write_with(path, lambda f: f.write(compressed))


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` via a temporary file in the same folder and ``os.replace``."""
    return atomic_write_files({path: text})[0]


def json_text(obj: Any) -> str:
    """``obj`` as the JSON files of robustnlu are written: indented, sorted keys, UTF-8 as is."""
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def atomic_write_json(path: str | Path, obj: Any) -> Path:
    return atomic_write_text(path, json_text(obj))


def jsonl_text(rows: Iterable[dict]) -> str:
    """``rows`` as the JSONL files of robustnlu are written: one compact object a line, UTF-8 as is."""
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def atomic_write_jsonl(path: str | Path, rows: Iterable[dict]) -> Path:
    return atomic_write_text(path, jsonl_text(rows))


CLAIM_HEARTBEAT_S = 15.0  # a claim's owner touches it this often while it computes
CLAIM_STALE_S = 120.0  # a claim not touched for this long is a dead owner's: taken over
CLAIM_POLL_S = 0.5  # how often a waiting process looks for the result
_HELD: set[Path] = set()  # the claims this process holds


def compute_once(
    result: str | Path,
    load: Callable[[], T | None],
    compute: Callable[[], T],
    *,
    stale_s: float = CLAIM_STALE_S,
    heartbeat_s: float = CLAIM_HEARTBEAT_S,
    poll_s: float = CLAIM_POLL_S,
) -> T:
    """``load()`` if it finds the result, else ``compute()`` in exactly one of the processes that
    ask at the same time (on one machine or on a shared filesystem), the others waiting for it.

    The claim is the file ``<result>.claim``, created with ``O_CREAT | O_EXCL`` (atomic, also on
    NFS v3+) and holding the owner's host and pid (``"<host> <pid>"``); its owner touches it
    every ``heartbeat_s`` while ``compute()`` runs (which must write the result atomically
    before it returns). A claim whose owner is dead is taken over, with a warning: at once when
    the owner ran on this host and its pid is gone (`dead_owner`), else once the claim has not
    been touched for ``stale_s``. A live owner is waited for (logged once). If ``compute()``
    fails, the claim is released and a waiting process takes over.
    """
    claim = Path(f"{result}.claim")
    claim.parent.mkdir(parents=True, exist_ok=True)
    waiting = False
    while True:
        found = load()
        if found is not None:
            return found
        try:
            fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666 & ~UMASK)
        except FileExistsError:
            try:
                text = claim.read_text(encoding="utf-8", errors="replace")
                idle = time.time() - claim.stat().st_mtime
            except FileNotFoundError:
                continue  # released meanwhile
            why = dead_owner(claim, text) or (f"not touched for {idle:.0f} s" if idle > stale_s else None)
            if why:
                logger.warning("taking over the claim %s on %s: %s", claim, result, why)
                take_over(claim, text)
                continue
            if not waiting:
                logger.info("waiting for %s, which is computing %s (claim %s)", text.strip() or "another process", result, claim)
                waiting = True
            time.sleep(poll_s)
            continue
        _HELD.add(claim)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(f"{socket.gethostname()} {os.getpid()}\n")
            found = load()  # written between our look and our claim
            if found is not None:
                return found
            done = threading.Event()

            def heartbeat() -> None:
                while not done.wait(heartbeat_s):
                    with contextlib.suppress(OSError):
                        os.utime(claim)

            beat = threading.Thread(target=heartbeat, daemon=True)
            beat.start()
            try:
                return compute()
            finally:
                done.set()
                beat.join()
        finally:
            claim.unlink(missing_ok=True)
            _HELD.discard(claim)


def dead_owner(claim: Path, text: str) -> str | None:
    """Why the owner of ``claim``, which reads ``text``, is certainly dead (it ran on this host
    and its pid is gone, or is this process's pid while this process does not hold the claim),
    or None: alive, on another host (only the heartbeat tells), or the claim is being written."""
    host, _, pid = text.strip().rpartition(" ")
    if host != socket.gethostname() or not pid.isdigit():
        return None
    if int(pid) == os.getpid():
        return None if claim in _HELD else f"process {pid} of this host held it and has ended (its pid is this process's now)"
    return None if pid_alive(int(pid)) else f"process {pid} of this host held it and has ended"


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host exists (signal 0 checks without sending)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def take_over(claim: Path, seen: str) -> None:
    """Remove ``claim`` if it still reads ``seen``. Several waiters may find the same dead claim:
    each renames it to a name of its own first, and puts back what it renamed if that is no longer
    the dead claim but a new owner's, so that a new owner's claim is not removed by a late waiter."""
    mine = claim.with_name(f"{claim.name}.{socket.gethostname()}.{os.getpid()}.taken")
    try:
        os.rename(claim, mine)
    except FileNotFoundError:
        return
    try:
        if mine.read_text(encoding="utf-8", errors="replace") != seen:
            with contextlib.suppress(OSError):  # FileExistsError: yet another owner claimed it meanwhile
                os.link(mine, claim)
    finally:
        mine.unlink(missing_ok=True)
