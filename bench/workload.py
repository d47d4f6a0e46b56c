"""What every benchmark run trains on: the composed config, a fixed list of SNIPS training
batches (collated with dynamic or fixed padding) and one initial `SLUModule` to copy."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import pytorch_lightning as pl
import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, open_dict

from robustnlu.data.collate import Collator
from robustnlu.data.datamodule import EncodedDataset, SLUDataModule
from robustnlu.data.readers import load_corpus
from robustnlu.model.encoders import build_encoder, load_tokenizer
from robustnlu.module import SLUModule

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"

#: JointBERT's default max_seq_len: the fixed padding length of comparison (b)
FIXED_PAD_TO = 50


def compose_config(output_dir: Path, overrides: Sequence[str] = ()) -> DictConfig:
    """The run config ``python -m robustnlu`` would get (embedded encoder, SNIPS, ERM), with the
    run directory (normally Hydra's runtime dir) set to ``output_dir``."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["encoder=embedded", *overrides])
    with open_dict(cfg):
        cfg.paths.output_dir = str(output_dir)
    return cfg


@dataclass
class Workload:
    cfg: DictConfig
    train: EncodedDataset  # the tokenised SNIPS training split
    index_lists: list[list[int]]  # the benchmark's batches, as indices into ``train``
    pad_token_id: int
    initial: SLUModule  # never trained: every run trains a copy

    def batches(self, pad_to: int | None, pad_to_multiple_of: int | None = None) -> list[dict[str, torch.Tensor]]:
        """The benchmark batches, pre-collated with dynamic padding (``pad_to=None``) or padded
        to ``pad_to`` tokens; ``pad_to_multiple_of``: in length buckets (`Collator`, as
        ``data.pad_to_multiple_of`` collates them). Same examples in the same order whatever the padding."""
        collate = Collator(self.pad_token_id, pad_to, pad_to_multiple_of, self.cfg.data.max_length)
        return [collate([self.train[i] for i in idx]) for idx in self.index_lists]

    def fresh_module(self) -> SLUModule:
        """A copy of the initial module: identical weights (and train mode) for every run."""
        return copy.deepcopy(self.initial)


def load_workload(cfg: DictConfig, n_batches: int) -> Workload:
    """Read and tokenise SNIPS through the data module, draw the first ``n_batches`` training
    batches of the run's sampler, and build the `SLUModule` exactly as `robustnlu.train.run` does."""
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    corpus = load_corpus(cfg.dataset)
    vocab = corpus.vocab()
    tokenizer = load_tokenizer(cfg.encoder)
    datamodule = SLUDataModule(corpus, tokenizer, vocab, seed=cfg.seed, **cfg.data)
    datamodule.setup("fit")
    sampler = datamodule.train_dataloader().batch_sampler
    if n_batches > len(sampler):
        raise ValueError(f"{n_batches} batches asked for, the SNIPS training split has {len(sampler)}")
    index_lists = list(islice(iter(sampler), n_batches))

    encoder = build_encoder(cfg.encoder, vocab_size=len(tokenizer))
    module = SLUModule.from_config(cfg, vocab, corpus.intents(), encoder)
    return Workload(cfg, datamodule.datasets["train"], index_lists, tokenizer.pad_token_id, module)


def token_stats(batches: Sequence[dict[str, torch.Tensor]]) -> dict[str, float]:
    """Mean per batch of the padded tokens (what the encoder computes on) and of the real ones."""
    n = max(1, len(batches))
    return {
        "padded_tokens_per_batch": sum(b["input_ids"].numel() for b in batches) / n,
        "real_tokens_per_batch": sum(int(b["attention_mask"].sum()) for b in batches) / n,
        "mean_seq_len": sum(b["input_ids"].size(1) for b in batches) / n,
        "max_seq_len": max((b["input_ids"].size(1) for b in batches), default=0),
    }


def shape_warmup(batches: Sequence[dict[str, torch.Tensor]], warmup: int) -> tuple[list[dict[str, torch.Tensor]], int]:
    """``batches`` run after one step on each distinct shape among those past the first ``warmup``
    (the timed steps and the step whose start stops the clock), in the order they first appear, and
    the index in the result where the timed steps start. Each shape's first use (cuBLAS's choice
    of kernels, the caching allocator's cudaMalloc, a compiled graph) then happens before the clock
    starts, whichever loop or variant ran before."""
    shapes: dict[tuple, dict[str, torch.Tensor]] = {}
    for batch in batches[warmup:]:
        shapes.setdefault(tuple((key, tuple(t.shape)) for key, t in batch.items()), batch)
    return [*shapes.values(), *batches], len(shapes) + warmup

