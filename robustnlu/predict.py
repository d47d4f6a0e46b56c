"""Predict intents and slots with a trained checkpoint.

    python -m robustnlu.predict --ckpt RUN/checkpoints/best-epoch002.ckpt "play the latest album by adele"
    python -m robustnlu.predict --ckpt CKPT --file utterances.txt --out predictions.jsonl

A plain argparse CLI (a Hydra app would parse the utterance as a config override). Utterances
are split on white space, as the training data is tokenised. The checkpoint is read by
`robustnlu.checkpoint.read_checkpoint` (``weights_only=True``: no pickled code is executed; a
file that is not a robustnlu checkpoint is one ``error:`` line, exit 2).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from robustnlu.data.datamodule import Collator, encode_utterances
from robustnlu.data.readers.common import read_lines
from robustnlu.data.utterance import Utterance
from robustnlu.errors import entry_point
from robustnlu.io import atomic_write_jsonl
from robustnlu.data.bio import slot_spans
from robustnlu.model.encoders import load_tokenizer
from robustnlu.module import SLUModule


class Predictor:
    """Batched inference with a trained `SLUModule` (in eval mode, gradients off)."""

    def __init__(self, module: SLUModule, tokenizer):
        self.module = module.eval()
        self.tokenizer = tokenizer
        self.max_length = min(tokenizer.model_max_length, 512)
        self.collate = Collator(tokenizer.pad_token_id)

    @classmethod
    def from_checkpoint(cls, ckpt: str | Path, device: str = "cpu") -> Predictor:
        module = SLUModule.from_checkpoint(ckpt, device)
        return cls(module, load_tokenizer(module.hparams.encoder_spec))

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
        utts = [Utterance(f"input-{i}", tuple(t.split()), ("O",) * len(t.split()), "") for i, t in enumerate(texts)]
        rows = []
        for u, (intent, tags) in zip(utts, self.predict_utterances(utts, batch_size), strict=True):
            toks = list(u.tokens)
            slots = [{"slot": typ, "value": " ".join(toks[s:e]), "start": s, "end": e}
                     for typ, s, e in slot_spans(tags)]
            rows.append({"text": " ".join(toks), "tokens": toks, "intent": intent, "tags": tags, "slots": slots})
        return rows


def read_utterances(path: Path) -> list[str]:
    """The non-blank lines of ``path``, read strictly as UTF-8 like every dataset file."""
    return [line.strip() for line in read_lines(path) if line.strip()]


@entry_point
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m robustnlu.predict", description=__doc__.split("\n\n")[0])
    parser.add_argument("--ckpt", required=True, help="a checkpoint written by a training run")
    parser.add_argument("--file", type=Path, help="read one utterance per line (writes JSONL)")
    parser.add_argument("--out", type=Path, help="with --file: write the JSONL here instead of stdout")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("utterance", nargs="*", help="the utterance to parse (words separated by spaces)")
    args = parser.parse_args(argv)
    if bool(args.file) == bool(args.utterance):
        parser.error("give either an utterance or --file")
    texts = read_utterances(args.file) if args.file else [" ".join(args.utterance)]
    rows = Predictor.from_checkpoint(args.ckpt, args.device).predict(texts)
    if args.file:
        if args.out:
            atomic_write_jsonl(args.out, rows)
        else:
            sys.stdout.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        return 0
    row = rows[0]
    print(f"intent: {row['intent']}")
    print("slots:" + ("" if row["slots"] else " (none)"))
    for s in row["slots"]:
        print(f"  {s['slot']}: {s['value']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
