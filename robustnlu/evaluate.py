"""Score a trained model on robustness suites (Krone et al., paper 002, section 4 / Table 4):

    python -m robustnlu.evaluate ckpt=RUN/checkpoints/best-epoch002.ckpt suite=noisy_nlu
    python -m robustnlu.evaluate ckpt=... suite=[noisy_nlu,synthetic] suite.synthetic.split=valid

- ``noisy_nlu``: the released real-world noisy suite for ATIS and SNIPS (conf/suite/noisy_nlu.yaml,
  `robustnlu.noise.suite`), each treatment file against its recovered control utterances;
- ``synthetic``: every noise transform of conf/suite/synthetic.yaml applied to a split of the
  run's own dataset (any dataset), control = the utterances it changed, treatment = their
  noised versions.

For each (dataset, noise type) pair: intent accuracy, slot F1 and frame accuracy on control and
treatment and their difference, as `robustnlu.metrics.robustness.score_table` prints them.
Notes flag what makes a cell misleading: controls that are training or model-selection
utterances of this run (the released SNIPS allcaps / misspelling controls are SNIPS's dev
split), and casing noise under an uncased tokenizer (a no-op: the cell is reported with a
note and a warning, not as a meaningful zero).

Results go to ``<run>/robustness.json`` (merged with the suites already there) and
``<run>/robustness.md``, written atomically; ``python -m robustnlu suite=[...]`` does the same at
the end of training. A run whose training is still running (another process holds its
``run.lock``) is refused: its checkpoints are half-trained (`robustnlu.predictor.Predictor.from_checkpoint`).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from robustnlu.cli import hydra_app, run_or_exit
from robustnlu.data.readers import load_corpus
from robustnlu.data.utterance import Corpus, Utterance
from robustnlu.errors import ConfigError, DataError
from robustnlu.io import atomic_write_files, check_outputs, json_text
from robustnlu.metrics.registry import NOISE
from robustnlu.metrics.robustness import NoiseScore, read_suites, score_table
from robustnlu.noise.augment import build_transform
from robustnlu.noise.base import noise_all
from robustnlu.noise.casing import tokenizer_ignores_case
from robustnlu.noise.suite import NoisyPair, load_noisy_suite
from robustnlu.paths import data_dir, relocate_data
from robustnlu.rundir import RunDir
from robustnlu.seqdrift.pipeline import make_drift_split
from robustnlu.seqdrift.shipped import SHIPPED_DIR

if TYPE_CHECKING:
    from robustnlu.predictor import Predictor

logger = logging.getLogger(__name__)

UNCASED_NOTE = "no-op: the encoder's tokenizer is uncased, casing noise cannot change its input (use a cased encoder: encoder=hf)"


def score(predictor: Predictor, utterances: Sequence[Utterance], batch_size: int) -> dict[str, float]:
    """Intent accuracy, slot F1 and frame accuracy of the predictor on ``utterances``."""
    from robustnlu.metrics.slu import SLUMetrics  # torchmetrics: imported for the work only, as in `evaluate`

    predictions = predictor.predict_utterances(utterances, batch_size)
    metrics = SLUMetrics(intents=sorted({u.intent for u in utterances}))
    metrics.update([p[0] for p in predictions], [u.intent for u in utterances],
                   [p[1] for p in predictions], [list(u.tags) for u in utterances])
    with warnings.catch_warnings():  # a pair without any slot: slot F1 is 0 by convention
        warnings.simplefilter("ignore", UserWarning)
        computed = metrics.compute()
    return {m: computed[m] for m in NOISE}


def synthetic_pairs(suite_cfg: Mapping[str, Any], corpus: Corpus, seed: int) -> list[NoisyPair]:
    """One pair per configured noise type on ``corpus``'s ``suite_cfg.split``: the utterances
    the transform changed (control) and their noised versions (treatment)."""
    split = suite_cfg["split"]
    utterances = corpus.split(split)
    pairs = []
    for noise, noise_cfg in suite_cfg["noise"].items():
        transform = build_transform(noise_cfg, seed).fit(corpus.train)
        noised, stats = noise_all(transform, utterances)
        changed = [(u, v) for u, v in zip(utterances, noised, strict=True) if u.tokens != v.tokens]
        pairs.append(NoisyPair(
            dataset=corpus.name, noise=noise, source=f"synthetic:{split}",
            treatment=[v for _, v in changed], control=[u for u, _ in changed],
            control_splits=[split] * len(changed),
            report={"transform": transform.config(), "stats": stats.to_dict()},
        ))
    return pairs


def run_notes(pair: NoisyPair, run_corpus: Corpus, uncased: bool) -> list[str]:
    """What makes this pair's comparison misleading for this run."""
    notes = []
    for split, role in (("train", "training"), ("valid", "model-selection (valid)")):
        uids = {u.uid for u in run_corpus.split(split)}
        k = sum(c.uid in uids for c in pair.control)
        if k:
            notes.append(f"{k} of {len(pair.control)} controls are {role} utterances of this run")
    if pair.noise == "casing" and uncased:
        notes.append(UNCASED_NOTE)
    return notes


def evaluate_suites(
    predictor: Predictor, suites: Mapping[str, Any], run_cfg: DictConfig, run_corpus: Corpus, batch_size: int = 64
) -> dict[str, dict[str, Any]]:
    """suite name → {"scores": [NoiseScore dicts], "pairs": [pair reports]} for every suite in
    ``suites`` (the composed ``suite`` config); ``run_corpus`` is the run's corpus (after its
    drift split, before augmentation)."""
    uncased = tokenizer_ignores_case(predictor.tokenizer)
    results = {}
    for name, suite_cfg in suites.items():
        if suite_cfg["kind"] == "released":
            original = load_corpus(run_cfg.dataset)
            pairs = load_noisy_suite(suite_cfg, Path(), {original.name: original})
            if not pairs:
                raise ConfigError(f"suite {name}: no noisy data for dataset {original.name!r} (the suite covers ATIS and SNIPS)")
        elif suite_cfg["kind"] == "synthetic":
            pairs = synthetic_pairs(suite_cfg, run_corpus, run_cfg.seed)
        else:
            raise ConfigError(f"suite.{name}.kind must be released or synthetic, got {suite_cfg['kind']!r}")
        scores = []
        for pair in pairs:
            notes = run_notes(pair, run_corpus, uncased)
            if UNCASED_NOTE in notes:
                warnings.warn(f"suite {name}, {pair.dataset} {pair.noise}: {UNCASED_NOTE}", stacklevel=2)
            if not pair.control:
                logger.warning("suite %s, %s %s: no utterance pair to score", name, pair.dataset, pair.noise)
                continue
            scores.append(NoiseScore(pair.dataset, pair.noise, len(pair.control), score(predictor, pair.control, batch_size),
                                     score(predictor, pair.treatment, batch_size), notes))
        results[name] = {"scores": [s.to_dict() for s in scores],
                         "pairs": [{"dataset": p.dataset, "noise": p.noise, "source": p.source, **p.report} for p in pairs]}
    return results


def earlier_suites(run_dir: Path) -> dict[str, dict[str, Any]]:
    """The suites ``<run_dir>/robustness.json`` already holds (`read_suites`: a file cut short is
    a `DataError`), {} if there is none."""
    path = RunDir(run_dir).robustness_file
    return read_suites(path) if path.is_file() else {}


def write_robustness(run_dir: Path, results: Mapping[str, dict[str, Any]], checkpoint: str | None,
                     earlier: Mapping[str, dict[str, Any]] | None = None) -> str:
    """``results`` merged into the suites ``<run_dir>/robustness.json`` holds (``earlier``, read
    by the caller before its work, else now: `earlier_suites`), robustness.md rewritten from them,
    both written as one step (`atomic_write_files`); the tables."""
    earlier = earlier_suites(run_dir) if earlier is None else earlier
    merged = {"suites": {**earlier, **{name: {**entry, "checkpoint": checkpoint} for name, entry in results.items()}}}
    tables = "\n\n".join(
        f"## {name} (checkpoint {entry['checkpoint']}; metrics in %)\n\n"
        f"{score_table([NoiseScore.from_dict(d) for d in entry['scores']])}"
        for name, entry in merged["suites"].items()
    )
    atomic_write_files({RunDir(run_dir).robustness_file: json_text(merged),
                        Path(run_dir) / "robustness.md": tables + "\n"})
    return tables


#: what evaluate reads from the run's config.yaml
RUN_CONFIG_KEYS = ("dataset", "drift", "validation", "seed", "paths.cache_dir")


def read_run_config(run: RunDir, ckpt: Path) -> DictConfig:
    """The run's ``config.yaml`` (next to ``RUN/checkpoints/``); `DataError` naming it if it is
    missing, not a YAML mapping, cut short (no line break at its end: `robustnlu.train` writes
    one) or without one of `RUN_CONFIG_KEYS`."""
    if not run.config_file.is_file():
        raise DataError(run.config_file, None, f"no run config next to checkpoint {ckpt} (expected RUN/checkpoints/<file>.ckpt)")
    cfg = run.config()
    for key in RUN_CONFIG_KEYS:
        if OmegaConf.select(cfg, key, default=KeyError) is KeyError:
            raise DataError(run.config_file, None, f"missing key {key!r}: not a whole run config (cut short?)")
    return cfg


def run_corpus_of(run_cfg: DictConfig, corpus: Corpus) -> Corpus:
    """The run's corpus as it trained on it: its dataset ``corpus`` re-split by its drift split (cached)."""
    return make_drift_split(
        corpus, run_cfg.drift, run_cfg.validation, run_cfg.paths.cache_dir, data_dir(run_cfg) / SHIPPED_DIR
    ).apply(corpus)


def evaluate(cfg: DictConfig) -> str:
    if not cfg.get("suite"):
        raise ConfigError("choose at least one suite: suite=noisy_nlu or suite=[noisy_nlu,synthetic]")
    # torch and Lightning, imported once the config is checked: `--help` and config errors stay fast
    from robustnlu.predictor import Predictor, inference_device

    device = inference_device(cfg.device, "device")
    ckpt = Path(cfg.ckpt)
    run = RunDir.of_checkpoint(ckpt)
    # a file that is not a checkpoint: DataError; a run still training: ConfigError
    predictor = Predictor.from_checkpoint(ckpt, device)
    # the run's datasets where it read them, or under this command's paths.data_dir when that folder is gone
    run_cfg = OmegaConf.create(relocate_data(OmegaConf.to_container(read_run_config(run, ckpt)), data_dir(cfg)))
    earlier = earlier_suites(run.path)  # read before the work: a file cut short stops it
    dataset = load_corpus(run_cfg.dataset)
    check_outputs([run.robustness_file, run.path / "robustness.md"], [ckpt, run.config_file, *dataset.files()], "ckpt")
    results = evaluate_suites(predictor, cfg.suite, run_cfg, run_corpus_of(run_cfg, dataset), cfg.batch_size)
    tables = write_robustness(run.path, results, str(ckpt.resolve().relative_to(run.path)), earlier)
    print(f"{tables}\n\nwritten: {run.robustness_file}, {run.path / 'robustness.md'}")
    return tables


@hydra_app("evaluate")
def main(cfg: DictConfig) -> None:
    run_or_exit(evaluate, cfg)


if __name__ == "__main__":
    main()
