"""``efficiency.mode=adapt``: fine-tune a source model on the target subset and measure what the
source domains lose (thesis chapter 7: forgetting = source metric before − after adapting).
With ``optimizer=conatural`` the update is preconditioned by the source task's Fisher
(`robustnlu.optim.conatural`), which slows that forgetting. `Adaptation` is the callback the
protocol (`robustnlu.efficiency.protocol`) adds to such a run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytorch_lightning as pl
import torch

from robustnlu.checkpoint import read_checkpoint
from robustnlu.data.collate import Collator, encode_utterances
from robustnlu.data.utterance import Utterance
from robustnlu.efficiency.subsets import seeded_sample
from robustnlu.errors import ConfigError
from robustnlu.evaluate import score
from robustnlu.model.trained import model_state
from robustnlu.module import SLUModule
from robustnlu.optim.conatural import RollingFisher, empirical_fisher, set_encoder_fisher
from robustnlu.predictor import Predictor


class Adaptation(pl.Callback):
    """The source model's Fisher into the co-natural optimiser when fitting starts (a resumed run
    restores the same Fisher with the optimiser state), and the source domains' scores after
    testing (the module then holds the best checkpoint's weights), for `forgetting`."""

    def __init__(self, tokenizer, source_test: Sequence[Utterance], batch_size: int, before: Mapping[str, float],
                 fisher: list[torch.Tensor] | None):
        self.tokenizer, self.source_test, self.batch_size = tokenizer, source_test, batch_size
        self.before, self.fisher = dict(before), fisher
        self.after: dict[str, float] | None = None

    def on_fit_start(self, trainer: pl.Trainer, module: SLUModule) -> None:
        if self.fisher is not None:
            set_encoder_fisher(trainer.optimizers[0], module.model.encoder, self.fisher)

    def on_test_end(self, trainer: pl.Trainer, module: SLUModule) -> None:
        if trainer.is_global_zero:
            self.after = score_sources(module, self.tokenizer, self.source_test, self.batch_size)

    def forgetting(self) -> dict[str, dict[str, float]] | None:
        """`source_forgetting` once the test has run (on the rank-0 process), else None."""
        return source_forgetting(self.before, self.after) if self.after is not None else None


def load_source_model(module: SLUModule, checkpoint: Path) -> None:
    """Put the source model's encoder and head weights into ``module`` (same label vocabulary:
    the protocol's vocabulary spans every domain, so the heads fit)."""
    ckpt = read_checkpoint(checkpoint)
    if ckpt["hyper_parameters"]["vocab"] != module.hparams.vocab:
        raise ConfigError(f"efficiency.init_from={checkpoint}: its label vocabulary differs from this run's "
                          "(a source model of the same sources and target?)")
    module.model.load_state_dict(model_state(ckpt["state_dict"]))


def score_sources(module: SLUModule, tokenizer, utterances: Sequence[Utterance], batch_size: int) -> dict[str, float]:
    """Intent accuracy, slot F1 and exact match (frame accuracy) on the sources' test splits;
    the module's train/eval mode is left as it was."""
    training = module.training
    scores = score(Predictor(module.model, module.vocab, tokenizer), utterances, batch_size)
    module.train(training)
    return scores


def source_forgetting(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, dict[str, float]]:
    """Source-domain scores before and after adapting and the drop (before − after; > 0: forgotten)."""
    return {"before": dict(before), "after": dict(after), "drop": {k: before[k] - after[k] for k in before}}


def source_fisher(module: SLUModule, tokenizer, utterances: Sequence[Utterance], n: int, seed: int,
                  max_length: int, damping: float, gamma: float) -> list[torch.Tensor]:
    """The rolling diagonal Fisher after the source task (thesis Eq. 7.7-7.9): F̃_1 = γ F_S +
    (1 − γ) F̃_0 with F̃_0 = (α/γ)·1, where F_S is the empirical Fisher at the source model
    (approximations 1-3): per-example squared gradients of the encoder's parameters of
    −log p(y|x) = Σ_words slot cross-entropy + intent cross-entropy, over ``n`` seeded source
    training utterances, one at a time (no padding; vmap over BERT fails with a mask), in eval
    mode (no dropout), normalised to sum to the parameter count."""
    sample = seeded_sample(utterances, min(n, len(utterances)), seed, "fisher")
    encoded = encode_utterances(sample, tokenizer, module.vocab, max_length)
    collate = Collator(tokenizer.pad_token_id)
    model, training = module.model, module.model.training
    model.eval()

    def nll(item) -> torch.Tensor:
        batch = collate([item])
        losses = model.task_losses(model(batch), batch)
        n_words = (batch["slot_labels"] != -100).sum().clamp_min(1)  # the slot loss is a per-word mean
        return (losses.slot * n_words + losses.intent).squeeze(0)

    params = list(model.encoder.parameters())
    try:
        fisher = empirical_fisher(params, (lambda e=e: nll(e) for e in enumerate(encoded)))
    finally:
        model.train(training)
    return RollingFisher(params, damping=damping, gamma=gamma).update(fisher)
