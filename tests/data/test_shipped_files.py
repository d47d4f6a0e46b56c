"""The shipped data files are the originals, compressed: each corpus file ships as ``<file>.xz``
whose decompressed content has a SHA-256 its folder's SOURCE.md lists (data/README.md); WordNet's
zip and each of its members have the SHA-256 that data/nltk_data/SOURCE.md lists. Decompressed
with the standard library, independently of the readers."""

from __future__ import annotations

import hashlib
import lzma
import re
import zipfile

import pytest

from robustnlu.paths import DATA_DIR

#: corpus folder -> how many data files it ships (SOURCE.md's tables)
CORPORA = {"atis": 11, "snips": 11, "top": 3, "topv2": 24, "mit_movie": 2, "mit_restaurant": 2, "noisy_nlu": 13}
NOT_DATA = {"SOURCE.md", "LICENSE"}
SHA256 = re.compile(r"\b[0-9a-f]{64}\b")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("folder", sorted(CORPORA))
def test_every_corpus_file_ships_as_xz_of_the_original(folder):
    root = DATA_DIR / folder
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.name not in NOT_DATA)
    assert len(files) == CORPORA[folder] and all(p.suffix == ".xz" for p in files), [p.name for p in files]
    listed = set(SHA256.findall((root / "SOURCE.md").read_text(encoding="utf-8")))
    contents = {p.relative_to(root).as_posix(): sha256(lzma.decompress(p.read_bytes())) for p in files}
    assert {name for name, digest in contents.items() if digest not in listed} == set()
    assert len(set(contents.values())) == len(files)  # each a different listed file


def test_wordnet_zip_and_its_members_are_the_listed_ones():
    source = (DATA_DIR / "nltk_data" / "SOURCE.md").read_text(encoding="utf-8")
    path = DATA_DIR / "nltk_data" / "corpora" / "wordnet.zip"
    assert re.search(rf"`corpora/wordnet\.zip` \({path.stat().st_size:,} bytes\) \| {sha256(path.read_bytes())} \|", source)
    rows = dict(re.findall(r"^\| (wordnet/\S+)[^|]* \| ([0-9a-f]{64}) \|$", source, re.M))
    with zipfile.ZipFile(path) as archive:
        members = {i.filename: i for i in archive.infolist() if not i.is_dir()}
        assert set(members) == set(rows)
        for name, info in members.items():
            assert info.compress_type == zipfile.ZIP_BZIP2, name  # what SOURCE.md says
            assert sha256(archive.read(info)) == rows[name], name
