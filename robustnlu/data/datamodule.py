"""Tokenisation with word/sub-word alignment, dynamic padding, deterministic (optionally
length-bucketed) batching: the Lightning data module every run uses.

Each word is represented by its first sub-token (JointBERT, Chen et al. 2019). Words cut off by
``max_length`` get no position: they are outside ``word_mask``, their labels are ignored in
training and they are predicted ``O``; `encode_utterances` warns (how many, the first's file:line). A word the tokenizer maps to no sub-token at all (e.g. a
lone control character) borrows the previous position, so ``word_mask`` stays a prefix (the CRF
needs that) and every word still gets a prediction.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from robustnlu.data.utterance import Corpus, LabelVocab, Utterance


@dataclass(frozen=True)
class EncodedUtterance:
    input_ids: list[int]
    word_index: list[int]  # first sub-token position of each kept word
    tag_ids: list[int]  # one per kept word (-100 = unseen in training)
    intent_id: int  # -100 = unseen in training
    group: int  # -1 = no group


def encode_utterances(
    utterances: Sequence[Utterance],
    tokenizer,
    vocab: LabelVocab,
    max_length: int,
    groups: Mapping[str, int] | None = None,
) -> list[EncodedUtterance]:
    """Tokenise a list of utterances in one fast-tokenizer call and align words to sub-tokens;
    one warning if some are longer than ``max_length`` sub-tokens (their last words are cut)."""
    if not utterances:
        return []
    enc = tokenizer([list(u.tokens) for u in utterances], is_split_into_words=True, truncation=True, max_length=max_length)
    encoded = []
    for i, u in enumerate(utterances):
        first = {}
        for pos, w in enumerate(enc.word_ids(i)):
            if w is not None and w not in first:
                first[w] = pos
        kept = max(first) + 1 if first else 0  # words after the last encoded one were truncated
        word_index, prev = [], 0
        for w in range(kept):
            prev = first.get(w, prev)
            word_index.append(prev)
        encoded.append(
            EncodedUtterance(
                input_ids=enc["input_ids"][i],
                word_index=word_index,
                tag_ids=vocab.tag_ids(u.tags[:kept]),
                intent_id=vocab.intent_id(u.intent),
                group=(groups or {}).get(u.uid, -1),
            )
        )
    cut = [u for u, e in zip(utterances, encoded, strict=True) if len(e.word_index) < len(u.tokens)]
    if cut:
        first = cut[0]
        warnings.warn(f"{len(cut)} of {len(utterances)} utterances are longer than max_length={max_length} "
                      f"sub-tokens: their words past it are not trained on and are predicted O (first: "
                      f"{first.source or first.uid}, {len(first.tokens)} words)", stacklevel=2)
    return encoded


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


class Collator:
    """Pads a batch to its own longest sequence (dynamic padding), or to ``pad_to`` tokens
    (fixed padding, JointBERT's default of 50; kept for the benchmark and for users who need
    static shapes). ``pad_to_multiple_of``: length buckets, the token and the word dimension each
    padded further up to a multiple of it, but not past ``max_length`` (where no utterance is
    longer): a few shapes instead of one per longest utterance, which ``torch.compile`` with
    static shapes needs (``trainer.compile``). Padding is masked, so losses and predictions are
    those of dynamic padding."""

    def __init__(self, pad_token_id: int, pad_to: int | None = None, pad_to_multiple_of: int | None = None,
                 max_length: int | None = None):
        self.pad_token_id = pad_token_id
        self.pad_to = pad_to
        self.pad_to_multiple_of = pad_to_multiple_of
        self.max_length = max_length
        #: the value padding fills in each batch tensor (0 where not listed)
        self.pad_values = {"input_ids": pad_token_id, "slot_labels": -100}

    def shape_count(self) -> int | None:
        """The most distinct (token, word) dimensions its batches can have: the number of length
        buckets up to ``max_length``, squared (None without buckets or ``max_length``)."""
        if self.pad_to_multiple_of is None or self.max_length is None:
            return None
        return (-(-self.max_length // self.pad_to_multiple_of)) ** 2

    def bucket(self, length: int) -> int:
        """``length`` rounded up to its length bucket (itself without ``pad_to_multiple_of``)."""
        multiple = self.pad_to_multiple_of
        if multiple is None:
            return length
        rounded = -(-length // multiple) * multiple
        return min(rounded, max(length, self.max_length)) if self.max_length is not None else rounded

    def __call__(self, items: Sequence[tuple[int, EncodedUtterance]]) -> dict[str, torch.Tensor]:
        b = len(items)
        seq_len = max(len(e.input_ids) for _, e in items)
        if self.pad_to is not None:
            seq_len = max(seq_len, self.pad_to)
        seq_len = self.bucket(seq_len)
        n_words = self.bucket(max(1, max(len(e.word_index) for _, e in items)))
        input_ids = torch.full((b, seq_len), self.pad_values["input_ids"], dtype=torch.long)
        attention_mask = torch.zeros((b, seq_len), dtype=torch.long)
        word_index = torch.zeros((b, n_words), dtype=torch.long)
        word_mask = torch.zeros((b, n_words), dtype=torch.bool)
        slot_labels = torch.full((b, n_words), self.pad_values["slot_labels"], dtype=torch.long)
        for row, (_, e) in enumerate(items):
            n, w = len(e.input_ids), len(e.word_index)
            input_ids[row, :n] = torch.tensor(e.input_ids)
            attention_mask[row, :n] = 1
            word_index[row, :w] = torch.tensor(e.word_index, dtype=torch.long)
            word_mask[row, :w] = True
            slot_labels[row, :w] = torch.tensor(e.tag_ids, dtype=torch.long)
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "word_index": word_index,
            "word_mask": word_mask,
            "slot_labels": slot_labels,
            "intent_labels": torch.tensor([e.intent_id for _, e in items], dtype=torch.long),
            "groups": torch.tensor([e.group for _, e in items], dtype=torch.long),
            "index": torch.tensor([i for i, _ in items], dtype=torch.long),
        }


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
