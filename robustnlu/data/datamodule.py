"""Deterministic (optionally length-bucketed) batching and the Lightning data module every run
uses; the utterances are encoded and padded by `robustnlu.data.collate`."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from robustnlu.data.collate import Collator, EncodedUtterance, encode_utterances
from robustnlu.data.utterance import Corpus, LabelVocab, Utterance


class EncodedDataset(Dataset):
    def __init__(self, utterances: Sequence[Utterance], encoded: Sequence[EncodedUtterance]):
        self.utterances = list(utterances)
        self.encoded = list(encoded)

    def __len__(self) -> int:
        return len(self.encoded)

    def __getitem__(self, i: int) -> tuple[int, EncodedUtterance]:
        return i, self.encoded[i]

    def lengths(self) -> list[int]:
        return [len(e.input_ids) for e in self.encoded]


class EpochOrder(Sampler[int]):
    """The examples of one epoch, deterministic given ``seed`` and the epoch: a permutation, or
    with ``weights`` n draws with replacement, example i with probability ∝ ``weights[i]``
    (group-balanced sampling, Sagawa et al. 2020)."""

    def __init__(self, n: int, seed: int, weights: Sequence[float] | None = None):
        self.n = n
        self.seed = seed
        self.probabilities = None if weights is None else np.asarray(weights, dtype=np.float64) / np.sum(weights)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.n

    def rng(self) -> np.random.Generator:
        return np.random.default_rng([self.seed, self.epoch])

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        if self.probabilities is None:
            return rng.permutation(self.n)
        return rng.choice(self.n, size=self.n, p=self.probabilities)

    def __iter__(self) -> Iterator[int]:
        return iter(self.draw(self.rng()).tolist())


class ShuffledBatchSampler(Sampler[list[int]]):
    """Batches of `EpochOrder` (shuffled, or group-balanced with ``weights``), a new order
    every epoch, deterministic given ``seed`` and the epoch. Every iteration is the next epoch;
    the position (epoch, batches of it already trained) travels in checkpoints through
    `SLUDataModule.state_dict`, so a run resumed from a mid-epoch checkpoint gets exactly the
    batches the uninterrupted run had left in that epoch (`resume_at`; Lightning's
    ``set_epoch`` reaches a loader's sampler, not a batch sampler, and on resuming from an
    end-of-epoch checkpoint it would name the finished epoch again).

    With ``bucketed=True`` (length bucketing): cut the epoch's order into pools of
    ``pool_batches × batch_size`` examples, sort each pool by length, cut it into batches and
    shuffle the batches, so a batch holds examples of similar length (less padding) while the
    order stays random.

    With ``num_replicas`` = N > 1 (DDP, `robustnlu.distributed`): the batches above are global
    batches of N × ``batch_size`` examples, the same on every process, and process ``rank``
    gets the ``rank``-th of N contiguous parts of each (sizes differ by at most one); a final
    global batch smaller than N is dropped, so every process has the same number of batches.
    """

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int,
        seed: int,
        bucketed: bool = False,
        pool_batches: int = 50,
        weights: Sequence[float] | None = None,
        num_replicas: int = 1,
        rank: int = 0,
    ):
        self.lengths = np.asarray(lengths)
        self.order = EpochOrder(len(self.lengths), seed, weights)
        self.batch_size = batch_size * num_replicas  # of a global batch
        self.num_replicas = num_replicas
        self.rank = rank
        self.bucketed = bucketed
        self.pool_batches = pool_batches
        self.skip = 0  # batches of the next epoch that were already trained (a mid-epoch resume)
        self.iterated_epoch: int | None = None  # the epoch of the last iteration

    def resume_at(self, epoch: int, batches_done: int = 0) -> None:
        """The next iteration is epoch ``epoch`` without its first ``batches_done`` batches."""
        self.order.set_epoch(epoch)
        self.skip = batches_done

    def position(self, batches_done: int, epoch_batches: int | float | None = None) -> tuple[int, int]:
        """(epoch, batches done) where training continues once ``batches_done`` batches of the
        epoch in progress are trained: the next epoch from its start once all are, i.e. once
        ``epoch_batches`` are (default: the whole epoch; fewer where the trainer stops its epochs
        early, ``trainer.limit_train_batches``)."""
        if self.iterated_epoch is None:
            return self.order.epoch, self.skip
        if batches_done >= min(len(self), epoch_batches or len(self)):
            return self.iterated_epoch + 1, 0
        return self.iterated_epoch, batches_done

    def __len__(self) -> int:
        """Batches in a whole epoch (also while the first epoch after a resume is shorter:
        Lightning counts the restored batches in)."""
        n = len(self.lengths)
        return n // self.batch_size + (0 < n % self.batch_size >= self.num_replicas)

    def __iter__(self) -> Iterator[list[int]]:
        self.iterated_epoch, skip = self.order.epoch, self.skip
        rng = self.order.rng()
        order = self.order.draw(rng)
        if not self.bucketed:
            batches = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        else:
            pool = self.pool_batches * self.batch_size
            batches = []
            for start in range(0, len(order), pool):
                chunk = order[start : start + pool]
                chunk = chunk[np.argsort(self.lengths[chunk], kind="stable")]
                batches += [chunk[i : i + self.batch_size] for i in range(0, len(chunk), self.batch_size)]
            batches = [batches[i] for i in rng.permutation(len(batches))]
        self.order.epoch, self.skip = self.iterated_epoch + 1, 0  # the next iteration is the next epoch
        if self.num_replicas > 1:
            batches = [np.array_split(b, self.num_replicas)[self.rank] for b in batches if len(b) >= self.num_replicas]
        return iter([b.tolist() for b in batches[skip:]])


class SLUDataModule(pl.LightningDataModule):
    """Train/valid/test loaders over a `Corpus` (or the splits of a drift split)."""

    def __init__(
        self,
        corpus: Corpus,
        tokenizer,
        vocab: LabelVocab,
        batch_size: int = 32,
        eval_batch_size: int = 64,
        max_length: int = 128,
        pad_to: int | None = None,
        pad_to_multiple_of: int | None = None,
        length_bucketing: bool = False,
        num_workers: int = 0,
        seed: int = 0,
        groups: Mapping[str, int] | None = None,
    ):
        super().__init__()
        self.corpus = corpus
        self.tokenizer = tokenizer
        self.vocab = vocab
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size
        self.max_length = max_length
        self.length_bucketing = length_bucketing
        self.num_workers = num_workers
        self.seed = seed
        self.groups = groups
        self.collate = Collator(tokenizer.pad_token_id, pad_to, pad_to_multiple_of, max_length)
        self.datasets: dict[str, EncodedDataset] = {}
        self.train_sampler: ShuffledBatchSampler | None = None
        self.sample_weights: torch.Tensor | None = None
        self.restored_position = (0, 0)  # (epoch, batches of it done) from a checkpoint

    def state_dict(self) -> dict[str, int]:
        """Where training continues, saved in checkpoints: the training sampler's epoch and the
        batches of it already trained (non-zero in a mid-epoch checkpoint)."""
        epoch, done = self.restored_position
        if self.train_sampler is not None:
            trainer = self.trainer
            progress = trainer.fit_loop.epoch_loop.batch_progress.current.processed if trainer is not None else 0
            epoch, done = self.train_sampler.position(progress, trainer.num_training_batches if trainer else None)
        return {"sampler_epoch": epoch, "batches_done": done}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.restored_position = (int(state.get("sampler_epoch", 0)), int(state.get("batches_done", 0)))
        if self.train_sampler is not None:
            self.train_sampler.resume_at(*self.restored_position)

    def use_sample_weights(self, weights: torch.Tensor) -> None:
        """Draw training batches with probability ∝ ``weights`` (one per training example;
        the objective's `sample_weights`, e.g. group-balanced sampling)."""
        if len(weights) != len(self.datasets["train"]):
            raise ValueError(f"{len(weights)} sample weights for {len(self.datasets['train'])} training examples")
        self.sample_weights = weights
        self.train_sampler = None

    def setup(self, stage: str | None = None) -> None:
        for split in ("train", "valid", "test"):
            if split not in self.datasets:
                utts = self.corpus.split(split)
                enc = encode_utterances(utts, self.tokenizer, self.vocab, self.max_length, self.groups)
                self.datasets[split] = EncodedDataset(utts, enc)

    def _loader(self, split: str, **kwargs) -> DataLoader:
        # each loader draws its workers' base seed from its own generator, not torch's global one:
        # the model's random stream (dropout) does not depend on how many loaders were iterated,
        # so a resumed run (which also runs the sanity check) continues it exactly
        return DataLoader(
            self.datasets[split],
            collate_fn=self.collate,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            generator=torch.Generator().manual_seed(self.seed),
            **kwargs,
        )

    def train_dataloader(self) -> DataLoader:
        ds = self.datasets["train"]
        if self.train_sampler is None:
            weights = None if self.sample_weights is None else self.sample_weights.tolist()
            trainer = self.trainer  # under DDP each process takes its part of every global batch
            self.train_sampler = ShuffledBatchSampler(
                ds.lengths(), self.batch_size, self.seed, self.length_bucketing, weights=weights,
                num_replicas=trainer.world_size if trainer else 1, rank=trainer.global_rank if trainer else 0,
            )
            self.train_sampler.resume_at(*self.restored_position)
        return self._loader("train", batch_sampler=self.train_sampler)

    def val_dataloader(self) -> DataLoader:
        return self._loader("valid", batch_size=self.eval_batch_size, shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", batch_size=self.eval_batch_size, shuffle=False)
