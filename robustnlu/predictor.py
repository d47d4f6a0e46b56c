"""Prediction with a trained model: `Predictor` (batched inference with a JointBERT, its label
vocabulary and tokenizer), the device to predict on (`inference_device`) and the refusal of an
utterance longer than the encoder reads (`check_lengths`). Read by the command line ``python -m
robustnlu.predict`` (`robustnlu.predict`, which imports this module once its arguments are read),
the robustness suites (`robustnlu.evaluate`) and the efficiency protocol's adaptation. It imports
no Lightning: a checkpoint is read by `robustnlu.model.trained.load_trained`, the inputs made by
`robustnlu.data.collate`, as in training."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

import torch

from robustnlu.data.bio import slot_spans
from robustnlu.data.collate import Collator, encode_utterances
from robustnlu.data.utterance import LabelVocab, Utterance
from robustnlu.errors import ConfigError, DataError
from robustnlu.model.encoders import load_tokenizer
from robustnlu.model.jointbert import JointBERT
from robustnlu.model.trained import load_trained
from robustnlu.rundir import RunDir
from robustnlu.runlock import check_not_running

#: the most sub-word tokens any input gets, whatever the tokenizer and encoder allow
MAX_TOKENS = 512


def inference_device(name: str, option: str) -> torch.device:
    """The device ``name`` (cpu, cuda, cuda:<index>, mps) if this machine has it; `ConfigError`
    naming ``option`` otherwise."""
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"{option}={name!r} is not a device: cpu, cuda, cuda:<index> or mps") from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if not count:
            raise ConfigError(f"{option}={name}: this machine has no CUDA device (torch {torch.__version__}); use cpu")
        if device.index is not None and device.index >= count:
            raise ConfigError(f"{option}={name}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}")
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"{option}={name}: MPS is not available on this machine; use cpu")
    elif device.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"{option}={name}: not a device to predict on: cpu, cuda, cuda:<index> or mps")
    return device


class Predictor:
    """Batched inference with a trained JointBERT (put in eval mode; gradients off)."""

    def __init__(self, model: JointBERT, vocab: LabelVocab, tokenizer):
        self.model = model.eval()
        self.vocab = vocab
        self.tokenizer = tokenizer
        #: sub-word tokens per input, the special ones included: what the tokenizer and the
        #: encoder's position embeddings both allow
        self.max_length = min(tokenizer.model_max_length, model.encoder.config.max_position_embeddings, MAX_TOKENS)
        self.collate = Collator(tokenizer.pad_token_id)

    @classmethod
    def from_checkpoint(cls, ckpt: str | Path, device: str | torch.device = "cpu") -> Predictor:
        """The model of ``ckpt``; `ConfigError` where its run (``RUN/checkpoints/<file>.ckpt``) is
        still training (another live process holds its lock: `robustnlu.runlock.check_not_running`),
        since what the checkpoint holds is half-trained. ``predict`` and ``evaluate`` load so."""
        check_not_running(RunDir.of_checkpoint(ckpt).path)
        trained = load_trained(ckpt, device)
        return cls(trained.model, trained.vocab, load_tokenizer(trained.encoder_spec))

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def words_read(self, utterances: Sequence[Utterance]) -> list[int]:
        """How many words of each utterance fit `max_length` (`encode_utterances`): the words
        after them are tagged ``O`` without being read."""
        with warnings.catch_warnings():  # encode_utterances warns about the cut ones: the caller decides
            warnings.simplefilter("ignore", UserWarning)
            encoded = encode_utterances(utterances, self.tokenizer, self.vocab, self.max_length)
        return [len(e.word_index) for e in encoded]

    @torch.no_grad()
    def predict_utterances(self, utterances: Sequence[Utterance], batch_size: int = 64) -> list[tuple[str, list[str]]]:
        """(predicted intent, one predicted tag per token) for each utterance, in their order;
        tokens past the encoder's length limit are tagged ``O``. The batches hold utterances of
        similar length (sorted by sub-word tokens), so that little padding is computed; padding
        is masked, so each answer is the one the utterance gets alone."""
        encoded = encode_utterances(utterances, self.tokenizer, self.vocab, self.max_length)
        by_length = sorted(range(len(encoded)), key=lambda i: len(encoded[i].input_ids))
        answers: dict[int, tuple[str, list[str]]] = {}
        for start in range(0, len(by_length), batch_size):
            items = [(i, encoded[i]) for i in by_length[start : start + batch_size]]
            batch = {k: v.to(self.device) for k, v in self.collate(items).items()}
            intent_ids, tag_ids = self.model.decode(self.model(batch), batch["word_mask"])
            for (i, _), intent, ids in zip(items, intent_ids, tag_ids, strict=True):
                unread = len(utterances[i].tokens) - len(ids)
                answers[i] = (self.vocab.intents[intent], [self.vocab.tags[t] for t in ids] + ["O"] * unread)
        return [answers[i] for i in range(len(utterances))]

    def predict(self, texts: Sequence[str], batch_size: int = 64) -> list[dict]:
        """Parse raw texts (split on white space): intent, tags and slot spans for each."""
        utts = text_utterances(texts)
        rows = []
        for u, (intent, tags) in zip(utts, self.predict_utterances(utts, batch_size), strict=True):
            toks = list(u.tokens)
            slots = [{"slot": typ, "value": " ".join(toks[s:e]), "start": s, "end": e}
                     for typ, s, e in slot_spans(tags)]
            rows.append({"text": " ".join(toks), "tokens": toks, "intent": intent, "tags": tags, "slots": slots})
        return rows


def text_utterances(texts: Sequence[str]) -> list[Utterance]:
    """Raw texts as utterances to predict: split on white space, no gold labels."""
    return [Utterance(f"input-{i}", tuple(t.split()), ("O",) * len(t.split()), "") for i, t in enumerate(texts)]


def check_lengths(predictor: Predictor, texts: dict[int, str], file: Path | None) -> None:
    """Refuse the first utterance (by line of ``file``; without a file, the one from the command
    line) that is longer than the encoder reads."""
    for (line, text), read in zip(texts.items(), predictor.words_read(text_utterances(list(texts.values()))),
                                  strict=True):
        words = len(text.split())
        if read < words:
            problem = (f"{words} words, longer than the model reads: its encoder takes {predictor.max_length} "
                       f"sub-word tokens, the first {read} words; shorten or split the utterance")
            raise DataError(file, line, problem) if file else ConfigError(f"the utterance has {problem}")
