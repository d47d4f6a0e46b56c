"""Prediction with a trained model: `Predictor` (batched inference with an `SLUModule` and its
tokenizer), the device to predict on (`inference_device`) and the refusal of an utterance longer
than the encoder reads (`check_lengths`). Read by the command line ``python -m robustnlu.predict``
(`robustnlu.predict`, which imports this module once its arguments are read), the robustness
suites (`robustnlu.evaluate`) and the efficiency protocol's adaptation."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

import torch

from robustnlu.data.bio import slot_spans
from robustnlu.data.datamodule import Collator, encode_utterances
from robustnlu.data.utterance import Utterance
from robustnlu.errors import ConfigError, DataError
from robustnlu.model.encoders import load_tokenizer
from robustnlu.module import SLUModule
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
    """Batched inference with a trained `SLUModule` (in eval mode, gradients off)."""

    def __init__(self, module: SLUModule, tokenizer):
        self.module = module.eval()
        self.tokenizer = tokenizer
        #: sub-word tokens per input, the special ones included: what the tokenizer and the
        #: encoder's position embeddings both allow
        self.max_length = min(tokenizer.model_max_length, module.model.encoder.config.max_position_embeddings,
                              MAX_TOKENS)
        self.collate = Collator(tokenizer.pad_token_id)

    @classmethod
    def from_checkpoint(cls, ckpt: str | Path, device: str | torch.device = "cpu") -> Predictor:
        """The model of ``ckpt``; `ConfigError` where its run (``RUN/checkpoints/<file>.ckpt``) is
        still training (another live process holds its lock: `robustnlu.runlock.check_not_running`),
        since what the checkpoint holds is half-trained. ``predict`` and ``evaluate`` load so."""
        check_not_running(RunDir.of_checkpoint(ckpt).path)
        module = SLUModule.from_checkpoint(ckpt, device)
        return cls(module, load_tokenizer(module.hparams.encoder_spec))

    def words_read(self, utterances: Sequence[Utterance]) -> list[int]:
        """How many words of each utterance fit `max_length` (`encode_utterances`): the words
        after them are tagged ``O`` without being read."""
        with warnings.catch_warnings():  # encode_utterances warns about the cut ones: the caller decides
            warnings.simplefilter("ignore", UserWarning)
            encoded = encode_utterances(utterances, self.tokenizer, self.module.vocab, self.max_length)
        return [len(e.word_index) for e in encoded]

    @torch.no_grad()
    def predict_utterances(self, utterances: Sequence[Utterance], batch_size: int = 64) -> list[tuple[str, list[str]]]:
        """(predicted intent, one predicted tag per token) for each utterance; tokens past the
        encoder's length limit are tagged ``O``."""
        vocab = self.module.vocab
        out = []
        for start in range(0, len(utterances), batch_size):
            chunk = utterances[start : start + batch_size]
            items = list(enumerate(encode_utterances(chunk, self.tokenizer, vocab, self.max_length)))
            batch = {k: v.to(self.module.device) for k, v in self.collate(items).items()}
            output = self.module.model(batch)
            intent_ids, tag_ids = self.module.model.decode(output, batch["word_mask"])
            for u, i, ids in zip(chunk, intent_ids, tag_ids, strict=True):
                out.append((vocab.intents[i], [vocab.tags[t] for t in ids] + ["O"] * (len(u.tokens) - len(ids))))
        return out

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
