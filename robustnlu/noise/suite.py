"""The released real-world noisy NLU test suite (Sengupta, Krone, Mansour 2021, the successor of
paper 002; digest A.2 / A.5; data/noisy_nlu/SOURCE.md): treatment files paired with the
original ("control") utterances they were written from.

Only treatment files are released, so `load_noisy_suite` recovers each row's control from our
original splits (paper 002 section 4 evaluates on parallel control / treatment splits). The
*source split* is ATIS's test split and SNIPS's **dev** split (our ``valid``): the release's
SNIPS "test" rows are our dev rows (checked by content, see SOURCE.md).

1. **by id**: a ``test-N`` id is row N of the source split. allcaps / misspellings always use
   it (the row counts as verified when it has the same intent and a token overlap of at least
   `VERIFY_RATIO`); punctuation, whose ids also have this form, uses it when it verifies.
2. **by content** (the other ids, e.g. ``62-2`` / ``62<SEP>1``, are sample numbers that do not
   point at rows): an utterance of any split with the same intent and the same (slot type,
   value) sequence, values compared lower-cased without punctuation (the human sets change
   only the carrier phrase, digest A.2). Among several: a source-split one first, then the
   highest token overlap (difflib ratio); ties by the id's number as a source-split row index,
   then split order test, valid, train, then row index.
3. **reordered** (counted as by content): the same slots in another order (a moved phrase),
   ranked the same way by the overlap of the sorted tokens.
4. otherwise the row is dropped and counted ``unmatched``.

Normalisation (``normalise: true``, digest A.5 alignment rules via `replace_tokens`): the SNIPS
release is raw text (``I'd``, ``playlist?``) while our SNIPS is preprocessed, so in SNIPS tokens
every ``. ? , ; ! '`` becomes a token break (``I'd`` → ``i d``, ``playlist.`` → ``playlist``, a
lone ``.`` disappears) and every treatment is lower-cased except casing (allcaps), where upper
case is the treatment. ATIS keeps its punctuation (``st.``, ``i'd`` as in our ATIS), and the ATIS
punctuation files are not normalised at all. Multi-intent labels ``a;b`` always become our
``a#b``.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from robustnlu.data.bio import slot_spans
from robustnlu.data.readers.noisy_tsv import NoisyRow, read_noisy_tsv
from robustnlu.data.utterance import SPLITS, Corpus, Utterance
from robustnlu.errors import ConfigError, DataError
from robustnlu.noise.base import replace_each

logger = logging.getLogger(__name__)

FOLDER_NOISE = {
    "abbreviations": "abbreviation",
    "allcaps": "casing",
    "misspellings": "misspelling",
    "morphological": "morphology",
    "paraphrase": "paraphrase",
    "synonyms": "synonym",
    "punctuation": "punctuation",
}
"""Released folder name → our noise name."""

DATASET_FOLDERS = {"atis": tuple(FOLDER_NOISE), "snips": tuple(f for f in FOLDER_NOISE if f != "punctuation")}
ID_PARALLEL = ("allcaps", "misspellings")
ID_SPLIT = {"atis": "test", "snips": "valid"}
"""The source split: the one the release's utterances come from and ``test-N`` ids index."""
SPLIT_ORDER = ("test", "valid", "train")
FILE_NAME = "treatment_test.tsv"
SNIPS_BREAKS = re.compile(r"[.?,;!']")
"""Characters our SNIPS preprocessing turned into token breaks (found by comparing the released
allcaps rows with our dev rows)."""
VERIFY_RATIO = 0.5
"""Least token overlap (difflib ratio, lower-cased) for an id row to count as the original."""
TEST_ID = re.compile(r"test-(\d+)")
ID_NUMBER = re.compile(r"(?:test-)?(\d+)(?:-\d+|<SEP>\d+)?")

SlotPairs = tuple[tuple[str, str], ...]
Candidate = tuple[str, int, Utterance]
"""(split, row index, utterance) of an original utterance."""


@dataclass
class NoisyPair:
    """One treatment file and its recovered controls (row-parallel lists)."""

    dataset: str
    noise: str
    source: str
    treatment: list[Utterance]
    control: list[Utterance]
    control_splits: list[str]
    report: dict = field(default_factory=dict)


@dataclass
class ControlIndex:
    """A corpus's utterances by (intent, slot pairs), in order and reordered, in split order."""

    corpus: Corpus
    exact: dict[tuple[str, SlotPairs], list[Candidate]]
    reordered: dict[tuple[str, SlotPairs], list[Candidate]]

    @classmethod
    def build(cls, corpus: Corpus) -> ControlIndex:
        exact: dict[tuple[str, SlotPairs], list[Candidate]] = defaultdict(list)
        reordered: dict[tuple[str, SlotPairs], list[Candidate]] = defaultdict(list)
        for split in SPLIT_ORDER:
            for index, u in enumerate(corpus.split(split)):
                pairs = slot_pairs(u)
                exact[(u.intent, pairs)].append((split, index, u))
                reordered[(u.intent, tuple(sorted(pairs)))].append((split, index, u))
        return cls(corpus, exact, reordered)


def checked_suite_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The suite config as a plain dict, every key checked."""
    cfg = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    where = "suite.noisy_nlu"
    if cfg.get("kind") != "released":
        raise ConfigError(f"{where}.kind must be 'released', got {cfg.get('kind')!r}")
    if not isinstance(cfg.get("path"), str) or not cfg["path"]:
        raise ConfigError(f"{where}.path must name the suite's folder (default: ${{paths.data_dir}}/noisy_nlu)")
    types = cfg.get("noise_types")
    if not isinstance(types, list) or not types or any(t not in FOLDER_NOISE for t in types):
        raise ConfigError(f"{where}.noise_types must be a non-empty list of {list(FOLDER_NOISE)}, got {types!r}")
    if cfg.get("on_malformed") not in ("skip", "error"):
        raise ConfigError(f"{where}.on_malformed must be skip or error, got {cfg.get('on_malformed')!r}")
    if not isinstance(cfg.get("normalise"), bool):
        raise ConfigError(f"{where}.normalise must be true or false, got {cfg.get('normalise')!r}")
    return cfg


def value_key(tokens: Sequence[str]) -> str:
    """A slot value for comparison: lower-cased, without punctuation or spaces."""
    return re.sub(r"[\W_]+", "", " ".join(tokens).lower())


def slot_pairs(u: Utterance) -> SlotPairs:
    """(type, `value_key`) of each slot, left to right; adjacent same-type spans count as one,
    as in the IO-labelled release."""
    return tuple((typ, value_key(u.tokens[start:end])) for typ, start, end in slot_spans(u.tags, "io"))


def overlap(treatment: Utterance, control: Utterance, ordered: bool = True) -> float:
    """difflib ratio of the lower-cased token sequences (of the sorted tokens when not
    ``ordered``, for a reordered phrase)."""
    a = [t.lower() for t in treatment.tokens]
    b = [t.lower() for t in control.tokens]
    if not ordered:
        a, b = sorted(a), sorted(b)
    return difflib.SequenceMatcher(a=a, b=b, autojunk=False).ratio()


def verifies(treatment: Utterance, control: Utterance) -> bool:
    """Whether ``control`` plausibly is ``treatment``'s original: the same intent and a token
    overlap of at least `VERIFY_RATIO` (slot labels are not compared: the release relabels a
    few rows, e.g. ``st . louis`` in ATIS punctuation)."""
    return treatment.intent == control.intent and overlap(treatment, control) >= VERIFY_RATIO


def normalise(u: Utterance, dataset: str, folder: str) -> Utterance:
    """``u`` in our preprocessing (module docstring): SNIPS punctuation breaks, lower case
    except for allcaps; ATIS punctuation files unchanged."""
    if dataset == "atis" and folder == "punctuation":
        return u
    if dataset == "snips":
        breaks = {i: SNIPS_BREAKS.sub(" ", t).split() for i, t in enumerate(u.tokens) if SNIPS_BREAKS.search(t)}
        u = replace_each(u, breaks)
    if folder != "allcaps":
        u = replace(u, tokens=tuple(t.lower() for t in u.tokens))
    return u


def id_number(u_id: str) -> int | None:
    """The number in ``test-N`` / ``N-k`` / ``N<SEP>k`` (None for other ids, e.g. the
    spreadsheet-mangled ``2-Jul``)."""
    m = ID_NUMBER.fullmatch(u_id)
    return int(m.group(1)) if m else None


def id_control(row: NoisyRow, dataset: str, corpus: Corpus) -> Candidate | None:
    """The ``test-N`` id's row of the source split, or None when the id has another form or N is
    out of range."""
    m = TEST_ID.fullmatch(row.u_id)
    rows = corpus.split(ID_SPLIT[dataset])
    if m is None or int(m.group(1)) >= len(rows):
        return None
    n = int(m.group(1))
    return ID_SPLIT[dataset], n, rows[n]


def best_candidate(
    candidates: Sequence[Candidate], u: Utterance, number: int | None, source: str, ordered: bool
) -> Candidate:
    """The candidate of the source split (else of any split) with the highest `overlap`; ties
    by the id's number as a row index, then split order test, valid, train, then row index."""
    def rank(c: Candidate) -> tuple:
        split, index, control = c
        return (split != source, -overlap(u, control, ordered), not (split == source and index == number),
                SPLIT_ORDER.index(split), index)

    return min(candidates, key=rank)


def find_control(
    row: NoisyRow, u: Utterance, dataset: str, folder: str, index: ControlIndex
) -> tuple[str, Candidate | None]:
    """(how it was found: ``id`` / ``content`` / ``reordered`` / ``none``, the control)."""
    by_id = id_control(row, dataset, index.corpus)
    if by_id is not None and (folder in ID_PARALLEL or verifies(u, by_id[2])):
        return "id", by_id
    pairs = slot_pairs(u)
    number, source = id_number(row.u_id), ID_SPLIT[dataset]
    if candidates := index.exact.get((u.intent, pairs)):
        return "content", best_candidate(candidates, u, number, source, ordered=True)
    if candidates := index.reordered.get((u.intent, tuple(sorted(pairs)))):
        return "reordered", best_candidate(candidates, u, number, source, ordered=False)
    return "none", None


def treatment_of(row: NoisyRow, dataset: str, folder: str, normalise_text: bool) -> Utterance:
    """The row's utterance with our multi-intent separator (``a#b``), `normalise`d when asked.
    Raises ValueError when normalisation leaves no token."""
    u = replace(row.utterance, intent=row.utterance.intent.replace(";", "#"))
    return normalise(u, dataset, folder) if normalise_text else u


def read_treatments(
    cfg: Mapping[str, Any], root: Path, source: str, dataset: str, folder: str
) -> tuple[list[tuple[NoisyRow, Utterance]], list[str]]:
    """The file's usable rows with their treatment utterances, and its malformed rows as
    ``file:line: problem`` (logged; raised as DataError under ``on_malformed: error``)."""
    rows, problems = read_noisy_tsv(root / source, f"noisy_nlu/{dataset}/{folder}")
    treatments = []
    for row in rows:
        try:
            treatments.append((row, treatment_of(row, dataset, folder, cfg["normalise"])))
        except ValueError:
            problems.append(DataError(source, row.line, "no token left after normalisation"))
    problems.sort(key=lambda e: e.line or 0)
    if problems and cfg["on_malformed"] == "error":
        raise DataError(source, problems[0].line, problems[0].problem)
    malformed = [f"{source}:{e.line}: {e.problem}" for e in problems]
    for problem in malformed:
        logger.warning("noisy suite: skipped malformed row %s", problem)
    return treatments, malformed


def load_file(cfg: Mapping[str, Any], root: Path, dataset: str, folder: str, index: ControlIndex) -> NoisyPair:
    """One treatment file with its controls and report."""
    source = f"{cfg['path']}/{dataset}/{folder}/{FILE_NAME}"
    treatments, malformed = read_treatments(cfg, root, source, dataset, folder)
    pair = NoisyPair(dataset, FOLDER_NOISE[folder], source, [], [], [])
    found: Counter[str] = Counter()
    verified = 0
    unmatched = []
    for row, u in treatments:
        how, control = find_control(row, u, dataset, folder, index)
        found[how] += 1
        if control is None:
            slots = " ".join(f"{typ}={value}" for typ, value in slot_pairs(u))
            unmatched.append(f"line {row.line} (u_id {row.u_id}): no original with intent {u.intent} and slots {slots}")
            continue
        verified += how == "id" and verifies(u, control[2])
        pair.treatment.append(u)
        pair.control.append(control[2])
        pair.control_splits.append(control[0])
    pair.report = {
        "rows_read": len(treatments) + len(malformed),
        "malformed": malformed,
        "skipped": len(malformed),
        "matched_by_id": found["id"],
        "id_verified": verified,
        "matched_by_content": found["content"] + found["reordered"],
        "unmatched": found["none"],
        "normalised_rows": sum(row.utterance.tokens != u.tokens for row, u in treatments),
        "control_split_counts": {s: pair.control_splits.count(s) for s in SPLITS},
        "notes": file_notes(dataset, folder, found, verified, treatments) + unmatched,
    }
    return pair


def file_notes(
    dataset: str, folder: str, found: Counter[str], verified: int, treatments: Sequence[tuple[NoisyRow, Utterance]]
) -> list[str]:
    """The report's general notes for one file."""
    notes = []
    if found["id"]:
        rule = "" if folder in ID_PARALLEL else " (used when it verifies)"
        notes.append(f"{found['id']} controls by test-N id = row N of {dataset} {ID_SPLIT[dataset]}{rule}; "
                     f"{verified} verified (same intent, token overlap >= {VERIFY_RATIO})")
    if found["reordered"]:
        notes.append(f"{found['reordered']} controls matched with the same slots in another order")
    if intents := sum(";" in row.utterance.intent for row, _ in treatments):
        notes.append(f"{intents} multi-intent labels a;b written a#b as in our corpus")
    return notes


def load_noisy_suite(cfg: Mapping[str, Any], root: Path, corpora: Mapping[str, Corpus]) -> list[NoisyPair]:
    """One `NoisyPair` per released file of the datasets in ``corpora`` (``atis`` / ``snips``;
    other names are ignored) and the configured noise types. Malformed rows are skipped and
    reported, or raise DataError (``on_malformed: error``)."""
    cfg = checked_suite_config(cfg)
    pairs = []
    for dataset, folders in DATASET_FOLDERS.items():
        if dataset not in corpora:
            continue
        index = ControlIndex.build(corpora[dataset])
        for folder in cfg["noise_types"]:
            if folder in folders:
                pairs.append(load_file(cfg, Path(root), dataset, folder, index))
    return pairs
