"""Offline WordNet 3.0 for the synonym transform (paper 002, section 3 "Synonyms": candidates
"via word net").

The data ships with robustnlu as ``data/nltk_data/corpora/wordnet.zip`` (Debian's
``wordnet-base`` + ``wordnet-sense-index``, see ``data/nltk_data/SOURCE.md``): no PyPI package
ships WordNet and nothing may be downloaded at run time.

`load_wordnet` builds nltk's `WordNetCorpusReader` directly on the zip rather than going through
``nltk.corpus.wordnet`` (whose lazy loader searches every ``nltk.data.path`` entry and could pick
up another WordNet version). Its only global side effect: the data folder is added once to the
end of ``nltk.data.path``, because nltk >= 3.9 refuses to read corpus files outside it, lazily,
on every later lookup as well.
"""

from __future__ import annotations

import threading
import warnings
import zipfile
from pathlib import Path

from robustnlu.errors import DataError
from robustnlu.paths import DATA_DIR

ZIP_NAME = Path("corpora") / "wordnet.zip"

_CACHE: dict[Path, object] = {}
_LOCK = threading.Lock()


def default_data_dir() -> Path:
    """The shipped ``nltk_data`` (a checkout's ``data/nltk_data``)."""
    return DATA_DIR / "nltk_data"


def load_wordnet(data_dir: Path | None = None):
    """nltk's WordNet 3.0 reader over ``<data_dir>/corpora/wordnet.zip`` (default: the
    shipped ``data/nltk_data``, `default_data_dir`). Loading takes ~5 s; the reader is cached per process and
    per folder. Raises `DataError` when the zip is missing or unreadable."""
    root = Path(data_dir if data_dir is not None else default_data_dir()).expanduser().resolve()
    with _LOCK:
        if root in _CACHE:
            return _CACHE[root]
        zip_path = root / ZIP_NAME
        if not zip_path.is_file():
            raise DataError(zip_path, None, "WordNet data not found (see data/nltk_data/SOURCE.md; "
                            "the zip ships with robustnlu)")
        import nltk
        from nltk.corpus.reader.wordnet import WordNetCorpusReader
        from nltk.data import ZipFilePathPointer

        if not any(_same_path(p, root) for p in nltk.data.path):
            nltk.data.path.append(str(root))
        try:
            with warnings.catch_warnings():
                # "The multilingual functions are not available": we pass no OMW reader on purpose.
                warnings.filterwarnings("ignore", message="The multilingual functions")
                reader = WordNetCorpusReader(ZipFilePathPointer(str(zip_path), "wordnet/"), None)
        except (OSError, ValueError, KeyError, AssertionError, zipfile.BadZipFile) as err:
            raise DataError(zip_path, None, f"cannot read WordNet: {err}") from err
        _CACHE[root] = reader
        return reader


def _same_path(entry: object, root: Path) -> bool:
    try:
        return Path(str(getattr(entry, "path", entry))).expanduser().resolve() == root
    except (OSError, ValueError, RuntimeError):
        return False
