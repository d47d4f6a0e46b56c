"""Building blocks for objective tests: hand-made `TaskLosses` batches and a real set-up
`SLUDataModule` over synthetic utterances with chosen SeqDrift groups."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from robustnlu.data.datamodule import SLUDataModule
from robustnlu.data.utterance import Corpus, Utterance
from robustnlu.model.jointbert import TaskLosses


def task_losses(slot, intent, x_enc=None, index=None, groups=None, **inputs) -> TaskLosses:
    """A `TaskLosses` from plain lists/arrays; ``index`` defaults to 0..b-1 (dataset rows)."""
    slot = torch.as_tensor(slot, dtype=torch.float64).clone().requires_grad_(True)
    intent = torch.as_tensor(intent, dtype=torch.float64).clone().requires_grad_(True)
    b = slot.numel()
    x_enc = torch.zeros(b, 4, dtype=torch.float64) if x_enc is None else torch.as_tensor(x_enc, dtype=torch.float64)
    batch = {
        "index": torch.arange(b) if index is None else torch.as_tensor(index),
        "groups": torch.full((b,), -1) if groups is None else torch.as_tensor(groups),
        **{k: torch.as_tensor(v) for k, v in inputs.items()},
    }
    return TaskLosses(slot=slot, intent=intent, x_enc=x_enc, inputs=batch)


def synthetic_datamodule(tokenizer, groups: Sequence[int], texts: Sequence[str] | None = None) -> SLUDataModule:
    """A set-up data module whose training example i has SeqDrift cluster ``groups[i]`` and
    text ``texts[i]`` (default: "play song <i>")."""
    texts = texts or [f"play song {i}" for i in range(len(groups))]
    train = [
        Utterance(f"u{i}", tuple(t.split()), ("O",) * len(t.split()), "PlayMusic") for i, t in enumerate(texts)
    ]
    corpus = Corpus("synthetic", train, train[:2], train[:2])
    dm = SLUDataModule(corpus, tokenizer, corpus.vocab(), batch_size=4,
                       groups={u.uid: g for u, g in zip(train, groups, strict=True)})
    dm.setup("fit")
    return dm
