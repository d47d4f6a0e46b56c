"""Predict intents and slots with a trained checkpoint.

    python -m robustnlu.predict --ckpt RUN/checkpoints/best-epoch002.ckpt "play the latest album by adele"
    python -m robustnlu.predict --ckpt CKPT --file utterances.txt --out predictions.jsonl

A plain argparse CLI (a Hydra app would parse the utterance as a config override); the
prediction itself, `robustnlu.predictor` (torch, transformers), is imported once the command line
is read, so that a refused one is answered at once. It loads the model alone, not the training
stack (neither Lightning nor the run's objective), so the method's package need not be importable. Utterances are split on white
space, as the training data is tokenised. The checkpoint is read by
`robustnlu.checkpoint.read_checkpoint` (``weights_only=True``: no pickled code is executed; a
file that is not a robustnlu checkpoint is one ``error:`` line, exit 2).

Every answer is the model's reading of the whole utterance, or there is none: an utterance
longer than the encoder reads (its positions, e.g. 128 sub-word tokens for ``encoder=tiny``,
512 for BERT) is refused, not cut, since the words past the limit would be tagged ``O`` unread
and the intent judged on a prefix; so is an utterance without words. With ``--file`` the error
names the file and line, and nothing is written. ``--out`` must not be an input (the
``--file`` or the checkpoint, however spelled), a directory, or unwritable; ``--device`` must
be a device this machine has (cpu, cuda, cuda:<index>, mps); a checkpoint of a run still training
(another live process holds its ``run.lock``) is half-trained, refused as ``evaluate`` refuses it
(`robustnlu.predictor.Predictor.from_checkpoint`). Each is refused before the model is loaded,
except the length, which needs the model's tokenizer.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from robustnlu.data.readers.common import read_lines
from robustnlu.errors import CommandLineParser, ConfigError, entry_point
from robustnlu.io import atomic_write_jsonl, check_outputs, writing


def read_utterances(path: Path) -> dict[int, str]:
    """Line number → utterance of the non-blank lines of ``path``, read strictly as UTF-8 like
    every dataset file."""
    return {n: line.strip() for n, line in enumerate(read_lines(path), start=1) if line.strip()}


@entry_point
def main(argv: Sequence[str] | None = None) -> int:
    parser = CommandLineParser(prog="python -m robustnlu.predict", description=__doc__.split("\n\n")[0])
    parser.add_argument("--ckpt", required=True, help="a checkpoint written by a training run")
    parser.add_argument("--file", type=Path, help="read one utterance per line (writes JSONL, a row per non-blank "
                                                  "line, with its line number)")
    parser.add_argument("--out", type=Path, help="with --file: write the JSONL here instead of stdout")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:<index> or mps")
    parser.add_argument("utterance", nargs="*", help="the utterance to parse (words separated by spaces)")
    args = parser.parse_args(argv)
    if bool(args.file) == bool(args.utterance):
        parser.error("give either an utterance or --file")
    if args.out and not args.file:
        raise ConfigError("--out needs --file (the answer for an utterance on the command line is printed)")
    if args.out:
        check_outputs([args.out], [args.file, args.ckpt], "--out")
    from robustnlu.predictor import Predictor, check_lengths, inference_device  # torch, transformers

    device = inference_device(args.device, "--device")
    if args.file:
        texts = read_utterances(args.file)  # a file of blank lines only: "empty file"
    elif text := " ".join(args.utterance).strip():
        texts = {0: text}
    else:
        raise ConfigError("the utterance is empty: there is nothing to parse")
    predictor = Predictor.from_checkpoint(args.ckpt, device)
    check_lengths(predictor, texts, args.file)
    rows = predictor.predict(list(texts.values()))
    if args.file:
        # blank lines get no row: each row names its line, so the answers can be matched to the input
        rows = [{"line": line, **row} for line, row in zip(texts, rows, strict=True)]
        if args.out:
            with writing("--out"):
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
