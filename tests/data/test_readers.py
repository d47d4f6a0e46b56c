"""Dataset readers: pinned counts of the shipped data, TOP flattening, seeded dev carving and
one test per kind of malformed input (each must name the file, the line and the problem)."""

from __future__ import annotations

import gzip
import json
import lzma
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from robustnlu.data.readers import load_corpus
from robustnlu.data.readers.top_tree import parse_tree
from robustnlu.data.bio import bio_problem
from robustnlu.data.utterance import Corpus, LabelVocab
from robustnlu.errors import ConfigError, DataError

TOPV2_DOMAINS = (
    "alarm", "event", "messaging", "music", "navigation", "reminder", "timer", "weather"
)
SHIPPED = ("snips", "atis", "top", "mit", *(f"topv2_{d}" for d in TOPV2_DOMAINS))
UID = re.compile(r"^[a-z0-9_]+-[a-z0-9_]+-\d{5,}$")

LoadShipped = Callable[[str], Corpus]
DatasetConfig = Callable[[str], dict]


def split_sizes(corpus: Corpus) -> tuple[int, int, int]:
    return len(corpus.train), len(corpus.valid), len(corpus.test)


def count_non_nested(path: Path, header: bool) -> int:
    """Independent of the reader: data rows of ``path`` (shipped as ``<path>.xz``, decompressed
    with the standard library) whose tree (last column) has exactly one "[IN:"."""
    text = lzma.decompress(path.with_name(path.name + ".xz").read_bytes()).decode("utf-8")
    rows = text.rstrip("\n").split("\n")[1 if header else 0 :]
    return sum(row.split("\t")[-1].count("[IN:") == 1 for row in rows)


# --- the shipped datasets ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "sizes"), [("snips", (13_084, 700, 700)), ("atis", (4_478, 500, 893))]
)
def test_bio_lines_counts(
    shipped_corpus: LoadShipped, name: str, sizes: tuple[int, int, int]
) -> None:
    corpus = shipped_corpus(name)
    assert corpus.name == name
    assert split_sizes(corpus) == sizes
    assert corpus.train[42].uid == f"{name}-train-00042"
    assert corpus.valid[0].uid == f"{name}-dev-00000"


def test_atis_total(shipped_corpus: LoadShipped) -> None:
    assert len(shipped_corpus("atis").all()) == 5_871


def test_top_keeps_only_non_nested_trees(shipped_corpus: LoadShipped, repo_root: Path) -> None:
    """TOP-NN (core paper section 5.1, Table 6): 29,104 non-nested utterances, 18 intents."""
    corpus = shipped_corpus("top")
    files = ("train.tsv", "eval.tsv", "test.tsv")
    expected = tuple(count_non_nested(repo_root / "data/top" / f, header=False) for f in files)
    assert split_sizes(corpus) == expected == (20_265, 2_955, 5_884)
    assert len(corpus.all()) == 29_104
    assert len(corpus.intents()) == 18
    assert all(u.domain is None for u in corpus.all())


def test_top_first_rows(shipped_corpus: LoadShipped) -> None:
    train = shipped_corpus("top").train
    assert train[0].intent == "GET_ESTIMATED_DURATION"
    assert " ".join(train[0].tokens) == "How long will it take to drive from Chicago to Mississippi"
    assert train[0].tags == ("O",) * 6 + ("B-METHOD_TRAVEL", "O", "B-SOURCE", "O", "B-DESTINATION")
    # rows 2-5 of train.tsv are nested and skipped: uids keep the file's row index
    assert [u.uid for u in train[:3]] == ["top-train-00000", "top-train-00001", "top-train-00006"]


@pytest.mark.parametrize("domain", TOPV2_DOMAINS)
def test_topv2_domain_loads(shipped_corpus: LoadShipped, repo_root: Path, domain: str) -> None:
    corpus = shipped_corpus(f"topv2_{domain}")
    files = (f"{domain}_{split}.tsv" for split in ("train", "eval", "test"))
    expected = tuple(count_non_nested(repo_root / "data/topv2" / f, header=True) for f in files)
    assert split_sizes(corpus) == expected
    assert {u.domain for u in corpus.all()} == {domain}
    assert corpus.train[0].uid.startswith(f"topv2_{domain}-{domain}_train-")


def test_topv2_counts_pinned(shipped_corpus: LoadShipped) -> None:
    assert split_sizes(shipped_corpus("topv2_alarm")) == (16_921, 2_584, 6_121)
    assert split_sizes(shipped_corpus("topv2_music")) == (11_563, 1_573, 4_184)  # none nested


def test_topv2_empty_slot_is_dropped(shipped_corpus: LoadShipped) -> None:
    """alarm_train.tsv line 3071 (row 3069): `[SL:DATE_TIME for 30,32 ] [SL:DATE_TIME ] and`."""
    uid = "topv2_alarm-alarm_train-03069"
    [row] = [u for u in shipped_corpus("topv2_alarm").train if u.uid == uid]
    assert " ".join(row.tokens) == "set alarms for 30,32 and 35 minutes"
    assert row.tags == ("O", "O", "B-DATE_TIME", "I-DATE_TIME", "O", "B-DATE_TIME", "I-DATE_TIME")


def test_mit_joins_movie_and_restaurant(shipped_corpus: LoadShipped) -> None:
    corpus = shipped_corpus("mit")
    train_sizes = {"movie": 9_775, "restaurant": 7_660}
    joined_train = sum(train_sizes.values())
    assert len(corpus.all()) == 21_399
    assert len(corpus.test) == 2_443 + 1_521
    assert len(corpus.valid) == round(0.1 * joined_train)
    assert len(corpus.train) + len(corpus.valid) == joined_train
    train_uids, valid_uids = {u.uid for u in corpus.train}, {u.uid for u in corpus.valid}
    assert not train_uids & valid_uids
    assert train_uids | valid_uids == {
        f"mit-{c}_train-{i:05d}" for c, n in train_sizes.items() for i in range(n)
    }
    assert corpus.intents() == ["movie", "restaurant"]
    assert all(u.intent == u.domain for u in corpus.all())
    assert (corpus.test[0].uid, corpus.test[-1].uid) == (
        "mit-movie_test-00000", "mit-restaurant_test-01520"
    )


def test_mit_dev_depends_only_on_dev_seed(
    shipped_corpus: LoadShipped, dataset_config: DatasetConfig, repo_root: Path
) -> None:
    default = [u.uid for u in shipped_corpus("mit").valid]
    same = load_corpus(dataset_config("mit"), repo_root)
    other = load_corpus({**dataset_config("mit"), "dev_seed": 1}, repo_root)
    assert [u.uid for u in same.valid] == default
    assert [u.uid for u in other.valid] != default
    assert len(other.valid) == len(default)


@pytest.mark.parametrize("name", SHIPPED)
def test_uids_unique_and_tags_valid_bio(shipped_corpus: LoadShipped, name: str) -> None:
    utterances = shipped_corpus(name).all()
    uids = [u.uid for u in utterances]
    assert len(set(uids)) == len(uids)
    assert all(UID.match(uid) and uid.startswith(f"{name}-") for uid in uids)
    assert all(u.tokens and bio_problem(u.tags) is None for u in utterances)


def test_vocab_from_train_ignores_test_only_labels(shipped_corpus: LoadShipped) -> None:
    """ATIS test has intents and tags never seen in train (data/atis/SOURCE.md)."""
    corpus = shipped_corpus("atis")
    vocab = corpus.vocab()
    assert "atis_day_name" in {u.intent for u in corpus.test} - {u.intent for u in corpus.train}
    assert vocab.intent_id("atis_day_name") == LabelVocab.IGNORE == -100
    assert vocab.intent_id("atis_flight") >= 0
    assert vocab.tag_ids(["O", "B-booking_class"]) == [0, -100]
    assert "atis_day_name" in corpus.intents()


def test_dataset_configs_compose_under_hydra(repo_root: Path) -> None:
    """Every conf/dataset/*.yaml is a `dataset=` option named like its file."""
    names = sorted(p.stem for p in (repo_root / "conf/dataset").glob("*.yaml"))
    assert names == sorted([*SHIPPED, "jsonl"])
    with initialize_config_dir(str(repo_root / "conf"), version_base="1.3"):
        for name in names:
            cfg = compose(config_name="config", overrides=[f"dataset={name}"]).dataset
            assert cfg.name == name and cfg.format
        snips = load_corpus(compose(config_name="config").dataset)  # a DictConfig works too
    assert len(snips.train) == 13_084


def test_jsonl_config_requires_paths(dataset_config: DatasetConfig, repo_root: Path) -> None:
    with pytest.raises(ConfigError, match=r"dataset\.train must be set"):
        load_corpus(dataset_config("jsonl"), repo_root)


def test_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown format 'csv'"):
        load_corpus({"name": "x", "format": "csv"}, tmp_path)


# --- TOP trees --------------------------------------------------------------------------------


def test_flatten_hand_written_tree() -> None:
    tree = parse_tree(
        "[IN:GET_EVENT [SL:CATEGORY_EVENT Art fairs ] [SL:DATE_TIME this weekend ] in "
        "[SL:LOCATION Detroit ] ]"
    )
    assert (tree.intent, tree.n_intents) == ("GET_EVENT", 1)
    assert tree.tokens == ["Art", "fairs", "this", "weekend", "in", "Detroit"]
    assert tree.tags == [
        "B-CATEGORY_EVENT", "I-CATEGORY_EVENT", "B-DATE_TIME", "I-DATE_TIME", "O", "B-LOCATION"
    ]


def test_nested_tree_counts_every_intent() -> None:
    tree = parse_tree("[IN:A go to [SL:DEST [IN:B [SL:C the beach ] ] ] now ]")
    assert tree.n_intents == 2
    assert tree.tokens == ["go", "to", "the", "beach", "now"]


# --- small datasets written to tmp_path -------------------------------------------------------

BIO_FOLDERS = {"train": "train", "valid": "dev", "test": "test"}
GOOD_BIO_ROWS = [("play some jazz", "O O B-genre", "PlayMusic"), ("hi there", "O O", "Greet")]
GOOD_TREE = "[IN:GET_EVENT [SL:CATEGORY_EVENT Art fairs ] in [SL:LOCATION Detroit ] ]"
TOPV2_HEADER = "domain\tutterance\tsemantic_parse"


def bio_lines_config() -> dict:
    return {"name": "toy", "format": "bio_lines", "path": "toy", "folders": BIO_FOLDERS}


def write_bio_lines(root: Path, rows: list[tuple[str, str, str]]) -> Path:
    """The same (seq.in, seq.out, label) rows in each of toy/{train,dev,test}; returns toy/."""
    for folder in BIO_FOLDERS.values():
        (root / "toy" / folder).mkdir(parents=True)
        for i, name in enumerate(("seq.in", "seq.out", "label")):
            (root / "toy" / folder / name).write_text("".join(row[i] + "\n" for row in rows))
    return root / "toy"


def top_config(
    header: list[str] | None = None, columns: tuple[str, ...] = ("raw", "tokenized", "tree")
) -> dict:
    files = {"train": "train.tsv", "valid": "eval.tsv", "test": "test.tsv"}
    return {
        "name": "toptoy", "format": "top_tree", "path": "top", "files": files,
        "header": header, "columns": list(columns),
    }


def topv2_config() -> dict:
    return {**top_config(header=TOPV2_HEADER.split("\t"), columns=("domain", "utterance", "tree")), "domain": "event"}


def write_top(root: Path, rows: list[str]) -> Path:
    """The same TSV rows in top/{train,eval,test}.tsv; returns top/train.tsv."""
    (root / "top").mkdir()
    for split in ("train", "eval", "test"):
        (root / "top" / f"{split}.tsv").write_text("".join(f"{row}\n" for row in rows))
    return root / "top" / "train.tsv"


def top_row(tree: str) -> str:
    """A TOP v1 row whose raw and tokenized columns are the tree's words."""
    words = " ".join(t for t in tree.split() if not t.startswith("[") and t != "]")
    return f"{words}\t{words}\t{tree}"


def conll_config() -> dict:
    return {
        "name": "mitty", "format": "conll_bio", "corpora": {"movie": "movie", "food": "food"},
        "files": {"train": "train.bio", "test": "test.bio"}, "dev_fraction": 0.25, "dev_seed": 0,
    }


def write_conll(root: Path, text: str | None = None) -> Path:
    """``text`` (default: 4 sentences) as {movie,food}/{train,test}.bio; returns
    movie/train.bio."""
    text = text or "".join(f"O\tshow\nB-GENRE\tfilm{i}\nI-GENRE\tnoir\n\n" for i in range(4))
    for corpus in ("movie", "food"):
        (root / corpus).mkdir()
        for name in ("train.bio", "test.bio"):
            (root / corpus / name).write_text(text)
    return root / "movie" / "train.bio"


def jsonl_record(i: int, **fields: object) -> str:
    record = {"tokens": ["wake", "me", f"at{i}"], "tags": ["O", "O", "B-time"], "intent": "alarm"}
    return json.dumps({**record, **fields})


def write_jsonl(root: Path, train: list[str], valid: list[str] | None, test: list[str]) -> dict:
    """{split}.jsonl files and their config (``valid=None``: no file, carve it from train)."""
    for split, lines in (("train", train), ("valid", valid), ("test", test)):
        if lines is not None:
            (root / f"{split}.jsonl").write_text("".join(f"{x}\n" for x in lines))
    return {
        "name": "mine", "format": "jsonl", "train": "train.jsonl", "test": "test.jsonl",
        "valid": None if valid is None else "valid.jsonl", "dev_fraction": 0.25, "dev_seed": 0,
    }


@contextmanager
def raises_data_error(path: Path, line: int | None, problem: str) -> Iterator[None]:
    """Expect DataError ``"<path>:<line>: ..."`` whose problem contains ``problem``."""
    with pytest.raises(DataError) as info:
        yield
    where = str(path) if line is None else f"{path}:{line}"
    message = str(info.value)
    assert message.startswith(f"{where}: ") and info.value.line == line, message
    assert problem in info.value.problem, message


def files_under(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_bio_lines_small_and_read_only(tmp_path: Path) -> None:
    write_bio_lines(tmp_path, GOOD_BIO_ROWS)
    before = files_under(tmp_path)
    corpus = load_corpus(bio_lines_config(), tmp_path)
    assert files_under(tmp_path) == before
    assert corpus.name == "toy"
    assert [u.uid for u in corpus.valid] == ["toy-dev-00000", "toy-dev-00001"]
    assert corpus.train[0].tokens == ("play", "some", "jazz")
    assert corpus.train[0].tags == ("O", "O", "B-genre")


def test_top_small_skips_nested_and_logs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    nested = "[IN:A go to [SL:DEST [IN:B [SL:C the beach ] ] ] ]"
    write_top(tmp_path, [top_row(GOOD_TREE), top_row(nested), top_row(GOOD_TREE)])
    with caplog.at_level("INFO"):
        corpus = load_corpus(top_config(), tmp_path)
    assert [u.uid for u in corpus.valid] == ["toptoy-eval-00000", "toptoy-eval-00002"]
    assert corpus.train[0].intent == "GET_EVENT"
    assert "skipped 1 nested" in caplog.text


def test_conll_small_carves_dev_from_joined_train(tmp_path: Path) -> None:
    write_conll(tmp_path)
    corpus = load_corpus(conll_config(), tmp_path)
    assert split_sizes(corpus) == (6, 2, 8)
    assert corpus.test[0].tokens == ("show", "film0", "noir")
    assert corpus.test[4].uid == "mitty-food_test-00000"
    assert {u.intent for u in corpus.all()} == {"movie", "food"}


def test_jsonl_small(tmp_path: Path) -> None:
    config = write_jsonl(
        tmp_path,
        train=[jsonl_record(0, uid="u0", domain="home"), "", jsonl_record(2)],
        valid=[jsonl_record(0, uid="v0")],
        test=[jsonl_record(0)],
    )
    corpus = load_corpus(config, tmp_path)
    assert [u.uid for u in corpus.all()] == ["u0", "mine-train-00002", "v0", "mine-test-00000"]
    assert [u.domain for u in corpus.train] == ["home", None]
    assert corpus.train[1].tags == ("O", "O", "B-time")


def test_jsonl_without_valid_carves_seeded_dev(tmp_path: Path) -> None:
    train = [jsonl_record(i) for i in range(8)]
    config = write_jsonl(tmp_path, train=train, valid=None, test=[jsonl_record(0, uid="t")])
    corpus = load_corpus(config, tmp_path)
    assert split_sizes(corpus) == (6, 2, 1)
    carved = {u.uid for u in corpus.train} | {u.uid for u in corpus.valid}
    assert carved == {f"mine-train-{i:05d}" for i in range(8)}
    assert [u.uid for u in load_corpus(config, tmp_path).valid] == [u.uid for u in corpus.valid]


def compress_every_file(root: Path, suffix: str) -> None:
    """Replace each file under ``root`` by ``<name><suffix>`` (``.xz`` or ``.gz``), as data ships."""
    compress = {".xz": lzma.compress, ".gz": gzip.compress}[suffix]
    for path in [p for p in root.rglob("*") if p.is_file()]:
        path.with_name(path.name + suffix).write_bytes(compress(path.read_bytes()))
        path.unlink()


def utterances(corpus: Corpus) -> list[tuple]:
    return [(s, u.uid, u.tokens, u.tags, u.intent, u.domain) for s in ("train", "valid", "test") for u in corpus.split(s)]


def write_each_format(fmt: str, root: Path) -> dict:
    """A small dataset of format ``fmt`` under ``root`` (every split 2+ rows); returns its config."""
    if fmt == "bio_lines":
        write_bio_lines(root, GOOD_BIO_ROWS)
        return bio_lines_config()
    if fmt == "top_tree":
        write_top(root, [top_row(GOOD_TREE)] * 2)
        return top_config()
    if fmt == "conll_bio":
        write_conll(root)
        return conll_config()
    return write_jsonl(root, [jsonl_record(0), jsonl_record(1)], [jsonl_record(2)] * 2, [jsonl_record(3)] * 2)


@pytest.mark.parametrize("suffix", [".xz", ".gz"])
@pytest.mark.parametrize("fmt", ["bio_lines", "top_tree", "conll_bio", "jsonl"])
def test_compressed_files_read_as_the_files_they_hold(tmp_path: Path, fmt: str, suffix: str) -> None:
    """The config names ``train.tsv``; only ``train.tsv.xz`` (or ``.gz``) is there: the same
    utterances and uids, each read from (its source naming) the compressed file."""
    plain, packed = tmp_path / "plain", tmp_path / "packed"
    for root in (plain, packed):
        root.mkdir()
        config = write_each_format(fmt, root)
    compress_every_file(packed, suffix)
    expected, corpus = load_corpus(config, plain), load_corpus(config, packed)
    assert utterances(corpus) == utterances(expected) and len(corpus.all()) >= 6
    assert all(f.name.endswith(suffix) and f.is_file() for f in corpus.files())
    assert {f.relative_to(packed).with_suffix("") for f in corpus.files()} == {f.relative_to(plain) for f in expected.files()}


def test_an_uncompressed_file_beside_the_compressed_one_is_read(tmp_path: Path) -> None:
    """The user's own ``train.tsv`` wins over a shipped ``train.tsv.xz`` (data_file's order)."""
    train = write_top(tmp_path, [top_row(GOOD_TREE)] * 3)
    compress_every_file(tmp_path / "top", ".xz")
    assert len(load_corpus(top_config(), tmp_path).train) == 3
    train.write_text(top_row(GOOD_TREE) + "\n")
    corpus = load_corpus(top_config(), tmp_path)
    assert len(corpus.train) == 1 and corpus.train[0].source == f"{train}:1"
    assert len(corpus.test) == 3 and corpus.test[0].source.endswith("test.tsv.xz:1")


def test_error_in_a_compressed_file_names_it_and_the_decompressed_line(tmp_path: Path) -> None:
    train = write_top(tmp_path, [top_row(GOOD_TREE), "only\ttwo columns"])
    compress_every_file(tmp_path / "top", ".xz")
    with raises_data_error(train.with_name("train.tsv.xz"), 2, "expected 3 tab-separated columns"):
        load_corpus(top_config(), tmp_path)


@pytest.mark.parametrize("suffix", [".xz", ".gz"])
def test_error_corrupt_or_cut_short_compressed_file(tmp_path: Path, suffix: str) -> None:
    toy = write_bio_lines(tmp_path, GOOD_BIO_ROWS * 50)
    compress_every_file(toy, suffix)
    cut = toy / "dev" / f"label{suffix}"
    cut.write_bytes(cut.read_bytes()[:-20])
    with raises_data_error(cut, None, "cannot decompress (corrupt or cut short?)"):
        load_corpus(bio_lines_config(), tmp_path)
    cut.write_bytes(b"not compressed at all\n")
    with raises_data_error(cut, None, "cannot decompress (corrupt or cut short?)"):
        load_corpus(bio_lines_config(), tmp_path)


# --- malformed input: one test per kind -------------------------------------------------------


def test_error_token_tag_count_mismatch(tmp_path: Path) -> None:
    toy = write_bio_lines(tmp_path, [GOOD_BIO_ROWS[0], ("hi there", "O", "Greet")])
    with raises_data_error(toy / "train" / "seq.out", 2, "1 tags for 2 tokens"):
        load_corpus(bio_lines_config(), tmp_path)


def test_error_invalid_bio(tmp_path: Path) -> None:
    toy = write_bio_lines(tmp_path, [GOOD_BIO_ROWS[0], ("play jazz", "O I-genre", "PlayMusic")])
    problem = "invalid BIO: tag 2 'I-genre' follows 'O'"
    with raises_data_error(toy / "train" / "seq.out", 2, problem):
        load_corpus(bio_lines_config(), tmp_path)


def test_error_line_count_mismatch(tmp_path: Path) -> None:
    toy = write_bio_lines(tmp_path, GOOD_BIO_ROWS)
    (toy / "dev" / "label").write_text("PlayMusic\n")
    problem = "line-count mismatch: 1 lines but seq.in has 2"
    with raises_data_error(toy / "dev" / "label", 2, problem):
        load_corpus(bio_lines_config(), tmp_path)


def test_error_empty_file(tmp_path: Path) -> None:
    toy = write_bio_lines(tmp_path, GOOD_BIO_ROWS)
    (toy / "test" / "seq.in").write_text("\n")
    with raises_data_error(toy / "test" / "seq.in", 1, "empty file"):
        load_corpus(bio_lines_config(), tmp_path)


def test_error_bad_utf8_names_the_line(tmp_path: Path) -> None:
    toy = write_bio_lines(tmp_path, GOOD_BIO_ROWS)
    (toy / "train" / "seq.in").write_bytes(b"play some jazz\nhi th\xffere\n")
    problem = "not valid UTF-8: byte 0xff at byte 6 of the line"
    with raises_data_error(toy / "train" / "seq.in", 2, problem):
        load_corpus(bio_lines_config(), tmp_path)


def test_error_missing_file(tmp_path: Path) -> None:
    toy = write_bio_lines(tmp_path, GOOD_BIO_ROWS)
    (toy / "dev" / "seq.out").unlink()
    with raises_data_error(toy / "dev" / "seq.out", None, "file not found"):
        load_corpus(bio_lines_config(), tmp_path)


@pytest.mark.parametrize(
    ("tree", "problem"),
    [
        ("[IN:GET_EVENT [SL:LOCATION Detroit ]", "unbalanced brackets: 1 '[' not closed"),
        ("[IN:GET_EVENT Detroit ] ]", "unbalanced brackets: ']' without a matching '['"),
        ("[IN: Detroit ]", "label token '[IN:' has no name"),
        ("[IN:GET_EVENT [SL: Detroit ] ]", "label token '[SL:' has no name"),
        ("events [IN:GET_EVENT Detroit ]", "word 'events' outside the root intent"),
        ("[IN:GET_EVENT Detroit ] now", "word 'now' outside the root intent"),
        ("[IN:GET_EVENT Detroit ] [IN:GET_EVENT now ]", "'[IN:GET_EVENT' outside the root"),
        ("[IN:GET_EVENT [XX:LOCATION Detroit ] ]", "'[XX:LOCATION': '[' must open [IN:"),
        ("[IN:GET_EVENT [LOCATION Detroit ] ]", "'[LOCATION': '[' must open [IN:"),
        ("[SL:LOCATION Detroit ]", "the root must be an intent"),
        ("[IN:GET_EVENT [SL:A [SL:B Detroit ] ] ]", "'[SL:B' directly inside [SL:A"),
        ("", "empty tree"),
        ("[IN:GET_EVENT ]", "empty utterance"),
    ],
)
def test_error_unparsable_top_tree(tmp_path: Path, tree: str, problem: str) -> None:
    train = write_top(tmp_path, [top_row(GOOD_TREE), top_row(tree)])
    with raises_data_error(train, 2, problem):
        load_corpus(top_config(), tmp_path)


def test_error_top_wrong_column_count(tmp_path: Path) -> None:
    train = write_top(tmp_path, [top_row(GOOD_TREE), f"Art fairs in Detroit\t{GOOD_TREE}"])
    problem = "expected 3 tab-separated columns (raw, tokenized, tree), got 2"
    with raises_data_error(train, 2, problem):
        load_corpus(top_config(), tmp_path)


def test_error_top_leaves_differ_from_tokenized_column(tmp_path: Path) -> None:
    train = write_top(tmp_path, [f"Art fairs in Detroit\tArt fairs in Detroit MI\t{GOOD_TREE}"])
    with raises_data_error(train, 1, "differ from the tokenized column"):
        load_corpus(top_config(), tmp_path)


def test_error_topv2_domain_column(tmp_path: Path) -> None:
    rows = [f"{domain}\tArt fairs in Detroit\t{GOOD_TREE}" for domain in ("event", "music")]
    train = write_top(tmp_path, [TOPV2_HEADER, *rows])
    with raises_data_error(train, 3, "domain column is 'music', expected 'event'"):
        load_corpus(topv2_config(), tmp_path)


def test_error_topv2_header_only(tmp_path: Path) -> None:
    train = write_top(tmp_path, [TOPV2_HEADER])
    with raises_data_error(train, 2, "no data rows after the header"):
        load_corpus(topv2_config(), tmp_path)


def test_error_top_all_nested(tmp_path: Path) -> None:
    train = write_top(tmp_path, [top_row("[IN:A go to [SL:DEST [IN:B the beach ] ] ]")])
    with raises_data_error(train, None, "all 1 trees are nested"):
        load_corpus(top_config(), tmp_path)


def test_error_conll_missing_column(tmp_path: Path) -> None:
    train = write_conll(tmp_path, text="O\tshow\nB-GENRE film\n\n")
    with raises_data_error(train, 2, "expected TAG<TAB>word, got 'B-GENRE film'"):
        load_corpus(conll_config(), tmp_path)


def test_error_conll_invalid_bio_names_the_tokens_line(tmp_path: Path) -> None:
    train = write_conll(tmp_path, text="O\tshow\n\nO\tplay\nO\tsome\nI-GENRE\tjazz\n\n")
    with raises_data_error(train, 5, "invalid BIO in the sentence starting at line 3: tag 3 'I-GENRE' follows 'O'"):
        load_corpus(conll_config(), tmp_path)


def test_error_conll_word_with_white_space(tmp_path: Path) -> None:
    train = write_conll(tmp_path, text="O\tplay\nB-GENRE\tsmooth\u00a0jazz\n\n")
    with raises_data_error(train, 2, "the word 'smooth\\xa0jazz' holds white space"):
        load_corpus(conll_config(), tmp_path)


@pytest.mark.parametrize(("file", "rows", "problem"), [
    ("seq.in", [("play\tsome jazz", "O O B-genre", "PlayMusic")],
     "tokens: U+0009 ('\\t') at character 5: tokens are separated by plain spaces only"),
    ("seq.out", [("play some jazz", "O O\u00a0B-genre", "PlayMusic")], "tags: NO-BREAK SPACE ('\\xa0') at character 4"),
])
def test_error_bio_lines_non_space_white_space(tmp_path: Path, file: str, rows, problem: str) -> None:
    folder = write_bio_lines(tmp_path, [GOOD_BIO_ROWS[0], *rows])
    with raises_data_error(folder / "train" / file, 2, problem):
        load_corpus(bio_lines_config(), tmp_path)


def test_error_top_tree_non_space_white_space(tmp_path: Path) -> None:
    row = top_row(GOOD_TREE)
    bad = row.rsplit("\t", 1)[0] + "\t" + GOOD_TREE.replace("in [SL", "in\u2003[SL")
    train = write_top(tmp_path, [row, bad])
    with raises_data_error(train, 2, "tree column: EM SPACE"):
        load_corpus(top_config(), tmp_path)


def test_error_topv2_header_is_checked(tmp_path: Path) -> None:
    row = f"event\tArt fairs in Detroit\t{GOOD_TREE}"
    train = write_top(tmp_path, ["domain\tutterance\tparse", row])
    with raises_data_error(train, 1, "header 'domain|utterance|parse', expected 'domain|utterance|semantic_parse'"):
        load_corpus(topv2_config(), tmp_path)


def test_error_topv2_missing_header_row(tmp_path: Path) -> None:
    row = f"event\tArt fairs in Detroit\t{GOOD_TREE}"
    train = write_top(tmp_path, [row, row])  # the first data row is not skipped as a header
    with raises_data_error(train, 1, "header 'event|Art fairs in Detroit|"):
        load_corpus(topv2_config(), tmp_path)


def test_error_header_config_without_names(tmp_path: Path) -> None:
    write_top(tmp_path, [TOPV2_HEADER])
    with pytest.raises(ConfigError, match=r"^dataset.header: the 3 column names of the files' header row, or false "
                                          r"\(got True\)$"):
        load_corpus({**topv2_config(), "header": True}, tmp_path)


def test_error_utterance_past_the_word_limit(tmp_path: Path) -> None:
    long = {"tokens": ["la"] * 513, "tags": ["O"] * 513, "intent": "sing"}
    config = write_jsonl(tmp_path, [jsonl_record(0), json.dumps(long)], valid=[jsonl_record(3)], test=[jsonl_record(1)])
    with raises_data_error(tmp_path / "train.jsonl", 2, "513 words: more than 512, the most an utterance may have"):
        load_corpus(config, tmp_path)
    at_limit = {**long, "tokens": ["la"] * 512, "tags": ["O"] * 512}
    config = write_jsonl(tmp_path, [jsonl_record(0), json.dumps(at_limit)], valid=[jsonl_record(3)],
                         test=[jsonl_record(1)])
    corpus = load_corpus(config, tmp_path)
    assert len(corpus.train[1].tokens) == 512
    assert corpus.train[1].source == f"{tmp_path / 'train.jsonl'}:2"  # for messages about it (not equality)


@pytest.mark.parametrize(
    ("record", "problem"),
    [
        ('{"tokens": ["hi"], "tags": ["O"], "intent": ', "invalid JSON"),
        ('["hi"]', "expected a JSON object, got list"),
        ('{"tokens": ["hi"], "tags": ["O"]}', "missing key 'intent'"),
        ('{"tokens": ["hi", "you"], "tags": ["O"], "intent": "greet"}', "1 tags for 2 tokens"),
        ('{"tokens": ["hi"], "tags": ["I-x"], "intent": "greet"}', "invalid BIO"),
        ('{"tokens": [], "tags": [], "intent": "greet"}', "empty utterance"),
        ('{"tokens": ["hi there"], "tags": ["O"], "intent": "greet"}', "without whitespace"),
        ('{"tokens": ["hi"], "tags": ["O"], "intent": ""}', "'intent' must be a non-empty"),
        ('{"tokens": ["hi"], "tags": ["O"], "intent": "greet", "uid": 7}', "'uid' must be"),
    ],
)
def test_error_jsonl_record(tmp_path: Path, record: str, problem: str) -> None:
    config = write_jsonl(tmp_path, [jsonl_record(0), record], valid=None, test=[jsonl_record(0)])
    with raises_data_error(tmp_path / "train.jsonl", 2, problem):
        load_corpus(config, tmp_path)


def test_error_duplicate_uid(tmp_path: Path) -> None:
    config = write_jsonl(
        tmp_path,
        train=[jsonl_record(0, uid="a"), jsonl_record(1, uid="b")],
        valid=[jsonl_record(0)],
        test=[jsonl_record(0, uid="c"), jsonl_record(0, uid="b")],
    )
    with pytest.raises(DataError) as info:
        load_corpus(config, tmp_path)
    assert str(info.value) == f"{tmp_path / 'test.jsonl'}:2: duplicate uid 'b' (first at {tmp_path / 'train.jsonl'}:2)"
