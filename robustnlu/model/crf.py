"""A small, exact linear-chain CRF for the slot-filling head.

The linear-chain conditional random field (Lafferty, McCallum and Pereira, 2001,
"Conditional Random Fields: Probabilistic Models for Segmenting and Labeling Sequence
Data", ICML) scores a tag sequence ``y_1..y_n`` for emissions ``E`` (one row of
per-tag scores per position) as

    s(y) = start[y_1] + sum_t E[t, y_t] + sum_{t>1} trans[y_{t-1}, y_t] + end[y_n]

and defines ``p(y | E) = exp(s(y)) / Z`` with ``Z = sum_y' exp(s(y'))`` computed exactly
by the forward algorithm in log space. Decoding is exact Viterbi.

In this project the CRF is an *option* of the JointBERT slot head (``model.crf=true``):
the core paper (Broscheit et al., 2022, "Distributionally Robust Finetuning BERT for
Covariate Drift in Spoken Language Understanding", section 5) uses a per-token softmax
slot classifier by default, and a CRF layer only optionally, following the JointBERT+CRF
variant of Chen et al. (2019, "BERT for Joint Intent Classification and Slot Filling").

Contract (see :meth:`LinearChainCRF.neg_log_likelihood`):

* the loss is returned **per sequence** (shape ``[batch]``), never reduced: the robust
  objectives (ERM, group DRO, ...) reduce per-example losses themselves;
* the mask is left-aligned (each row is ``True`` for its first ``n`` positions, then
  ``False``); holes in the mask raise :class:`ValueError`. With word-piece encoders the
  caller must therefore gather the emissions of the labelled (e.g. first) sub-tokens
  into a left-aligned word-level tensor before calling the CRF, rather than masking the
  other sub-tokens out in place;
* tags and emissions at masked positions are ignored (tags may be ``-100`` or anything
  there, emissions may even be ``inf``/``nan`` there);
* a gold tag of ``-100`` (the ignore index, i.e. a label unknown to the vocabulary) or
  any other out-of-range tag *inside* the mask raises :class:`ValueError`: a CRF scores
  whole paths, so it cannot skip one position the way a per-token cross-entropy can.
  Such positions must be resolved by the caller (map the label to a real tag such as
  ``O``, or drop the utterance);
* a sequence of length 0 (all-``False`` mask row) has loss exactly 0 and contributes
  zero gradient; :meth:`LinearChainCRF.decode` returns ``[]`` for it.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["LinearChainCRF", "IGNORE_INDEX"]

#: The label id that marks "no/unknown gold label" elsewhere in the project (the
#: ``ignore_index`` of ``torch.nn.functional.cross_entropy``).
IGNORE_INDEX = -100


class LinearChainCRF(nn.Module):
    """Linear-chain CRF over ``num_tags`` tags (Lafferty et al., 2001).

    Parameters (all learnable, initialised uniformly in ``[-0.1, 0.1]`` like pytorch-crf):

    * ``start_transitions`` ``[T]``: score of starting a sequence in each tag;
    * ``end_transitions`` ``[T]``: score of ending a sequence in each tag;
    * ``transitions`` ``[T, T]``: ``transitions[i, j]`` is the score of moving from
      tag ``i`` (at position ``t-1``) to tag ``j`` (at position ``t``).

    All computations are vectorised over the batch (the only Python loop is over time
    steps), in log space with :func:`torch.logsumexp`, device-agnostic, and work for
    float32 and float64 emissions (the computation dtype is the promotion of the
    emissions' and the parameters' dtypes).

    The default SLU head uses a softmax slot classifier (Broscheit et al., 2022,
    section 5); this CRF is the optional JointBERT+CRF variant (Chen et al., 2019).
    """

    def __init__(self, num_tags: int) -> None:
        super().__init__()
        if not isinstance(num_tags, int) or isinstance(num_tags, bool) or num_tags < 1:
            raise ValueError(f"num_tags must be a positive int, got {num_tags!r}")
        self.num_tags = num_tags
        self.start_transitions = nn.Parameter(torch.empty(num_tags))
        self.end_transitions = nn.Parameter(torch.empty(num_tags))
        self.transitions = nn.Parameter(torch.empty(num_tags, num_tags))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Uniform initialisation in ``[-0.1, 0.1]`` (as in pytorch-crf)."""
        nn.init.uniform_(self.start_transitions, -0.1, 0.1)
        nn.init.uniform_(self.end_transitions, -0.1, 0.1)
        nn.init.uniform_(self.transitions, -0.1, 0.1)

    def extra_repr(self) -> str:
        return f"num_tags={self.num_tags}"

    # ------------------------------------------------------------------ public API

    def forward(self, emissions: Tensor, tags: Tensor, mask: Tensor | None = None) -> Tensor:
        """Alias of :meth:`neg_log_likelihood` (per-sequence NLL, shape ``[batch]``)."""
        return self.neg_log_likelihood(emissions, tags, mask)

    def neg_log_likelihood(
        self, emissions: Tensor, tags: Tensor, mask: Tensor | None = None
    ) -> Tensor:
        """Per-sequence negative log-likelihood ``log Z - s(gold)``.

        Args:
            emissions: ``[b, L, T]`` float scores (e.g. slot logits).
            tags: ``[b, L]`` integer gold tags. Values at masked positions are ignored
                (they are clamped before indexing); inside the mask every tag must be in
                ``[0, T)``: ``-100`` there raises :class:`ValueError` (see module doc).
            mask: ``[b, L]`` left-aligned mask (bool, or anything ``.bool()`` accepts);
                ``None`` means every position is valid.

        Returns:
            ``[b]`` tensor of NLLs, **not** reduced over the batch. Length-0 sequences
            give exactly 0 (and zero gradient). Mathematically ``NLL >= 0``; in floating
            point it may be a rounding error below 0 when one path has probability ~1.
        """
        mask = self._check(emissions, tags, mask)
        batch, length, _ = emissions.shape
        dtype = torch.promote_types(emissions.dtype, self.transitions.dtype)
        if length == 0:
            # Every sequence is empty. Keep the result attached to the graph so that
            # ``loss.sum().backward()`` works (with zero gradients).
            return emissions.to(dtype).sum(dim=(1, 2))

        tags = tags.long()
        self._check_gold_tags(tags, mask)
        emissions = self._masked_emissions(emissions, mask, dtype)
        lengths = mask.sum(dim=1)
        nll = self._log_partition(emissions, mask) - self._path_score(emissions, tags, mask, lengths)
        # Length-0 rows: the recursions above produce a (finite, meaningless) value from
        # position 0; replace it by exactly 0. ``where`` sends zero gradient there.
        return torch.where(lengths > 0, nll, torch.zeros_like(nll))

    @torch.no_grad()
    def decode(self, emissions: Tensor, mask: Tensor | None = None) -> list[list[int]]:
        """Viterbi decoding: the highest-scoring tag path of every sequence.

        Returns one Python list per sequence with exactly ``mask[i].sum()`` tag ids
        (``[]`` for a length-0 sequence). Ties are broken towards the lowest tag id.
        """
        mask = self._check(emissions, None, mask)
        batch, length, num_tags = emissions.shape
        if length == 0:
            return [[] for _ in range(batch)]
        dtype = torch.promote_types(emissions.dtype, self.transitions.dtype)
        emissions = self._masked_emissions(emissions, mask, dtype)
        trans = self.transitions.to(dtype)
        identity = torch.arange(num_tags, device=emissions.device).expand(batch, num_tags)

        score = self.start_transitions.to(dtype) + emissions[:, 0]  # [b, T]
        backpointers = []
        for t in range(1, length):
            # cand[b, i, j]: best score ending in i at t-1, then i -> j, emit j at t.
            cand = score.unsqueeze(2) + trans + emissions[:, t].unsqueeze(1)
            best, best_prev = cand.max(dim=1)  # [b, T], [b, T]
            valid = mask[:, t].unsqueeze(1)
            score = torch.where(valid, best, score)
            # At padded steps the backpointer is the identity, so backtracking from the
            # last column carries each sequence's final tag back to its true last position.
            backpointers.append(torch.where(valid, best_prev, identity))
        score = score + self.end_transitions.to(dtype)

        last = score.argmax(dim=1)  # [b]
        path = [last]
        for bp in reversed(backpointers):
            last = bp.gather(1, last.unsqueeze(1)).squeeze(1)
            path.append(last)
        path.reverse()
        best_paths = torch.stack(path, dim=1).cpu().tolist()  # [b, L]
        lengths = mask.sum(dim=1).cpu().tolist()
        return [row[:n] for row, n in zip(best_paths, lengths)]

    # ----------------------------------------------------------------- internals

    def _check(self, emissions: Tensor, tags: Tensor | None, mask: Tensor | None) -> Tensor:
        """Validate shapes and the mask's left alignment; return the mask as bool."""
        if emissions.dim() != 3 or emissions.size(2) != self.num_tags:
            raise ValueError(
                f"emissions must have shape [batch, length, {self.num_tags}], "
                f"got {tuple(emissions.shape)}"
            )
        if not emissions.is_floating_point():
            raise ValueError(f"emissions must be floating point, got {emissions.dtype}")
        batch_length = emissions.shape[:2]
        if tags is not None:
            if tags.shape != batch_length:
                raise ValueError(
                    f"tags must have shape {tuple(batch_length)}, got {tuple(tags.shape)}"
                )
            if tags.is_floating_point() or tags.is_complex() or tags.dtype == torch.bool:
                raise ValueError(f"tags must be an integer tensor, got {tags.dtype}")
        if mask is None:
            return torch.ones(batch_length, dtype=torch.bool, device=emissions.device)
        if mask.shape != batch_length:
            raise ValueError(
                f"mask must have shape {tuple(batch_length)}, got {tuple(mask.shape)}"
            )
        mask = mask.bool()
        if mask.size(1) > 1 and bool((mask[:, 1:] & ~mask[:, :-1]).any()):
            raise ValueError(
                "the CRF mask must be left-aligned (True for the first n positions of a "
                "row, then False); gather the labelled positions into a contiguous prefix "
                "instead of masking positions out in the middle of a sequence"
            )
        return mask

    def _check_gold_tags(self, tags: Tensor, mask: Tensor) -> None:
        bad = mask & ((tags < 0) | (tags >= self.num_tags))
        if bool(bad.any()):
            values = sorted(set(tags[bad].tolist()))
            if IGNORE_INDEX in values:
                raise ValueError(
                    f"gold tag {IGNORE_INDEX} (ignore index / label unknown to the tag "
                    "vocabulary) at a position inside the CRF mask: a CRF scores whole "
                    "tag paths and cannot skip a position; map the label to a real tag "
                    "or drop the utterance before the CRF"
                )
            raise ValueError(
                f"gold tags {values} inside the CRF mask are out of range "
                f"[0, {self.num_tags})"
            )

    @staticmethod
    def _masked_emissions(emissions: Tensor, mask: Tensor, dtype: torch.dtype) -> Tensor:
        # Zero the emissions at masked positions: they never enter the result, and this
        # keeps garbage (inf/nan) in padding from poisoning the gradients through the
        # unselected branch of ``torch.where`` (0 * nan = nan in backward).
        return emissions.to(dtype).masked_fill(~mask.unsqueeze(2), 0.0)

    def _path_score(self, emissions: Tensor, tags: Tensor, mask: Tensor, lengths: Tensor) -> Tensor:
        """Score ``s(y)`` of the given tag paths, ``[b]``."""
        dtype = emissions.dtype
        tags = tags.masked_fill(~mask, 0)  # any valid index; masked terms are dropped below
        zero = emissions.new_zeros(())
        emit = emissions.gather(2, tags.unsqueeze(2)).squeeze(2)  # [b, L]
        score = self.start_transitions.to(dtype)[tags[:, 0]]
        score = score + torch.where(mask, emit, zero).sum(dim=1)
        if tags.size(1) > 1:
            trans = self.transitions.to(dtype)[tags[:, :-1], tags[:, 1:]]  # [b, L-1]
            score = score + torch.where(mask[:, 1:], trans, zero).sum(dim=1)
        last_index = (lengths - 1).clamp(min=0)
        last_tags = tags.gather(1, last_index.unsqueeze(1)).squeeze(1)
        return score + self.end_transitions.to(dtype)[last_tags]

    def _log_partition(self, emissions: Tensor, mask: Tensor) -> Tensor:
        """``log Z`` by the forward algorithm, ``[b]``."""
        dtype = emissions.dtype
        trans = self.transitions.to(dtype).unsqueeze(0)  # [1, T, T]
        alpha = self.start_transitions.to(dtype) + emissions[:, 0]  # [b, T]
        for t in range(1, emissions.size(1)):
            nxt = torch.logsumexp(alpha.unsqueeze(2) + trans + emissions[:, t].unsqueeze(1), dim=1)
            alpha = torch.where(mask[:, t].unsqueeze(1), nxt, alpha)
        return torch.logsumexp(alpha + self.end_transitions.to(dtype), dim=1)
