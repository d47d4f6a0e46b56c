"""`SLUModule`: the LightningModule that trains JointBERT with a `RobustObjective`.

training_step = model → per-example `TaskLosses` → objective → scalar. Evaluation decodes
intents and word tags, feeds `SLUMetrics` (label strings, so labels unseen in training count as
errors) and keeps one prediction row per utterance for ``predictions/<split>.jsonl``.

Hyper-parameters are plain containers (dicts, lists, numbers, strings) so checkpoints load with
``torch.load(weights_only=True)``; the encoder's architecture is rebuilt from its stored config
and its weights come from the state dict (no hub access needed to reload a checkpoint). The
objective's own parameters and buffers are in the state dict, its own optimisers' states and the
model-selection state under ``objective_optimizers`` and ``selection`` in the checkpoint.

Non-finite losses (``trainer.on_nonfinite``): `training_step` checks the per-example losses before
the objective sees them, so a NaN or inf never enters any objective's state (group weights,
averages, windows, its own networks) nor spreads through products such as 0·inf in group
memberships: ``stop`` ends the run with `NonFiniteLoss`, ``skip`` drops the batch and counts it.

``trainer.compile``: `training_forward` runs the model's forward pass compiled (static shapes, the
batches in length buckets; `robustnlu.model.compiled`), evaluation eager.

Model selection (``selection=``): the checkpoint callback monitors a validation metric; an
adversarial criterion (``selection.criterion``, e.g. Greedy-Minmax, thesis 5.3.4) receives
per-example validation errors, losses and the objective's adversary log-weights each
validation during fit and returns the metrics to log, among them the one monitored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytorch_lightning as pl
import torch
from hydra.utils import instantiate
from lightning_fabric.utilities.rank_zero import rank_zero_warn
from omegaconf import OmegaConf
from pytorch_lightning.plugins.precision import Precision
from pytorch_lightning.utilities import GradClipAlgorithmType
from torch import nn

from robustnlu.checkpoint import CHECKPOINT_FORMAT, FORMAT_KEY, read_checkpoint
from robustnlu.config_spec import imported
from robustnlu.data.utterance import LabelVocab
from robustnlu.distributed import gather_task_losses
from robustnlu.errors import ConfigError, DataError, NonFiniteLoss, first_line
from robustnlu.metrics.slu import SLUMetrics
from robustnlu.metrics.slu import WORST_GROUP_ID
from robustnlu.model.compiled import compiled_forward
from robustnlu.model.jointbert import JointBERTOutput, TaskLosses
from robustnlu.model.spec import ModelSpec
from robustnlu.model.trained import NOT_A_MODEL, build_jointbert
from robustnlu.optim import build_optimizer
from robustnlu.precision import fp32

#: ``trainer.on_nonfinite``: what a training batch with a NaN or infinite per-example loss does
ON_NONFINITE = ("stop", "skip")
#: evaluation results that are no curve, never logged: the split's example count and the worst
#: cluster's id (results.json and the W&B summary's ``final`` keep them)
NOT_CURVES = ("n", WORST_GROUP_ID)
#: the training loss of each step, in every logger every ``trainer.log_every_n_steps`` steps and in
#: the console's progress bar (`robustnlu.progress.LossProgressBar`)
STEP_LOSS = "train/loss_step"


def logged_metrics(split: str, metrics: dict[str, Any]) -> dict[str, Any]:
    """A split's evaluation metrics as the loggers get them, ``<split>/<metric>``: neither the
    per-cluster ones (``group/``) nor `NOT_CURVES`."""
    return {f"{split}/{k}": v for k, v in metrics.items() if not k.startswith("group/") and k not in NOT_CURVES}


def _targets(node: Any, key: str) -> Iterator[tuple[str, Any]]:
    """(key, dotted path) of each ``_target_`` in a stored config node: a method's, its parts'."""
    if isinstance(node, dict):
        for name, value in node.items():
            if name == "_target_":
                yield f"{key}._target_", value
            else:
                yield from _targets(value, f"{key}.{name}")


def compile_options(trainer_cfg) -> dict[str, str] | None:
    """``trainer.compile``'s mode and backend where it is enabled (`SLUModule`'s ``torch_compile``), else None."""
    compile_cfg = trainer_cfg.get("compile")
    if compile_cfg is None or not compile_cfg.enabled:
        return None
    return {"mode": compile_cfg.mode, "backend": compile_cfg.backend}


class SLUModule(pl.LightningModule):
    def __init__(
        self,
        model: dict[str, Any],
        method: dict[str, Any],
        optimizer: dict[str, Any],
        vocab: dict[str, list[str]],
        eval_intents: list[str],
        encoder_spec: dict[str, Any],
        encoder_config: dict[str, Any],
        encoder: nn.Module | None = None,
        selection: dict[str, Any] | None = None,
        on_nonfinite: str = "stop",
        torch_compile: dict[str, str] | None = None,
    ):
        """``encoder_spec`` is the ``encoder=`` config (it names the tokenizer);
        ``encoder_config`` the encoder's Hugging Face config. ``encoder`` is the pre-trained
        encoder for a new run; when a checkpoint is loaded it is None and the architecture is
        rebuilt from ``encoder_config``. ``on_nonfinite``: one of `ON_NONFINITE`; ``torch_compile``:
        ``trainer.compile``'s mode and backend where it is enabled, else None (training settings,
        not stored with the model)."""
        super().__init__()
        # not logged: the loggers get the run's whole config, flat (`robustnlu.dashboard.run_config`)
        self.save_hyperparameters(ignore=["encoder", "on_nonfinite", "torch_compile"], logger=False)
        if on_nonfinite not in ON_NONFINITE:
            raise ConfigError(f"trainer.on_nonfinite: expected one of {', '.join(ON_NONFINITE)} (got {on_nonfinite})")
        self.on_nonfinite = on_nonfinite
        self.torch_compile = torch_compile
        #: the most batch shapes of training (`Collator.shape_count`), from the data module in `setup`
        self.shape_count: int | None = None
        #: the model's compiled forward method (``torch_compile``), made at the first training batch
        self.compiled_forward: Callable | None = None
        #: training batches dropped for a non-finite loss (``on_nonfinite=skip``; in checkpoints)
        self.nonfinite_skips = 0
        self.vocab = LabelVocab.from_dict(vocab)
        self.model = build_jointbert(model, self.vocab, encoder_config, encoder)
        # from_pretrained returns modules in eval mode and Lightning keeps modes as found:
        # without this the encoder's dropout would be off during fine-tuning.
        self.model.train()
        spec = ModelSpec(
            hidden_size=self.model.encoder.config.hidden_size,
            n_intents=len(self.vocab.intents),
            n_tags=len(self.vocab.tags),
            vocab_size=self.model.encoder.config.vocab_size,
            encoder_config=encoder_config,
        )
        self.objective = instantiate(method, intent_loss_scale=model["intent_loss_scale"], spec=spec)
        # the objective trains its own parameters itself (gradients averaged in `own_step`):
        # DDP must not reduce them, nor overwrite its running state from rank 0
        self._ddp_params_and_buffers_to_ignore = [f"objective.{n}" for n, _ in self.objective.named_parameters()] + [
            f"objective.{n}" for n, _ in self.objective.named_buffers()
        ]
        criterion = (selection or {}).get("criterion")
        self.selection = instantiate(criterion) if criterion else None
        self.selection_rows: list[torch.Tensor] = []
        #: torch RNG states and the objective's own optimiser states of a restored checkpoint,
        #: applied before its first training batch (`on_train_start`)
        self.restored_rng: dict[str, Any] | None = None
        self.restored_objective_optimizers: dict[str, dict] = {}
        #: sums of the epoch's per-example slot and intent losses and their count (logged as means
        #: at the epoch's end; in checkpoints, so an epoch resumed in its middle logs the same means)
        self.task_loss_sums = torch.zeros(3)
        #: likewise for the objective's loss (``train/loss_epoch``): its sum weighted by the
        #: batch's example count, and the count (a checkpoint from before 2026-11-24 has no
        #: such sums: its resumed epoch's mean covers the batches trained since the resume)
        self.loss_sums = torch.zeros(2)
        #: the collator's pad value of each batch tensor, to gather batches under DDP; set from the
        #: data module in `setup` (None without one, e.g. `make bench`'s pre-collated batches:
        #: then training runs on one process, where nothing is gathered)
        self.pad_values: dict[str, float] | None = None
        self.metrics = SLUMetrics(intents=eval_intents)
        self.prediction_rows: list[dict[str, Any]] = []
        #: stage ("valid" / "test") → {"metrics": ..., "predictions": ...} of the last evaluation
        self.evaluations: dict[str, dict[str, Any]] = {}

    @classmethod
    def from_config(cls, cfg, vocab: LabelVocab, eval_intents: list[str], encoder: nn.Module) -> SLUModule:
        """A new module from the composed run config (``cfg.model``, ``.method``,
        ``.optimizer``, ``.encoder``, ``.selection``, ``.trainer.on_nonfinite``, ``.trainer.compile``)
        around a pre-trained ``encoder``."""
        keys = ("model", "method", "optimizer", "encoder", "selection")
        plain = {k: OmegaConf.to_container(cfg[k], resolve=True) for k in keys}
        return cls(
            model=plain["model"],
            method=plain["method"],
            optimizer=plain["optimizer"],
            vocab=vocab.to_dict(),
            eval_intents=eval_intents,
            encoder_spec=plain["encoder"],
            encoder_config=encoder.config.to_dict(),
            encoder=encoder,
            selection=plain["selection"],
            on_nonfinite=cfg.trainer.get("on_nonfinite", "stop"),
            torch_compile=compile_options(cfg.trainer),
        )

    @classmethod
    def from_checkpoint(cls, path, device: str = "cpu") -> SLUModule:
        """The trained module in the checkpoint ``path`` (`read_checkpoint`: a file that is not a
        robustnlu checkpoint raises `DataError`), on ``device``."""
        ckpt = read_checkpoint(path)
        for key, target in _targets(ckpt["hyper_parameters"].get("method"), "method"):
            try:
                imported(key, target)
            except ConfigError as err:  # a method of the user's own, whose package is not on the path here
                raise DataError(path, None, f"{err}: the checkpoint's method must be importable here, as where it "
                                            "was trained (its package on PYTHONPATH)") from None
        try:
            module = cls(**ckpt["hyper_parameters"])
            module.on_load_checkpoint(ckpt)
            module.load_state_dict(ckpt["state_dict"])
        except Exception as err:  # hyper-parameters or weights that do not build this robustnlu's model
            raise DataError(path, None, f"{NOT_A_MODEL}: {first_line(err)}") from None
        return module.to(device)

    def setup(self, stage: str) -> None:
        datamodule = self.trainer.datamodule if self._trainer is not None else None
        if stage == "fit" and self.on_nonfinite == "skip" and self.trainer.world_size > 1:
            raise ConfigError("trainer.on_nonfinite: skip drops a batch by returning no loss, which Lightning does "
                              f"not support under DDP; use stop (got skip with {self.trainer.world_size} processes)")
        if stage == "fit" and self.torch_compile is not None and self.trainer.world_size > 1:
            raise ConfigError("trainer.compile.enabled: compiles the model of one process, not under DDP; train on "
                              f"one device or without it (got true with {self.trainer.world_size} processes)")
        if stage == "fit" and datamodule is not None:
            self.pad_values = datamodule.collate.pad_values
            self.shape_count = datamodule.collate.shape_count()
            self.objective.setup(datamodule, self.model)
            weights = self.objective.sample_weights()
            if weights is not None:
                datamodule.use_sample_weights(weights)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # torch's generators (dropout, the objective's own randomness): a resumed run draws what
        # the uninterrupted run would have drawn (Lightning does not save them)
        checkpoint["rng"] = {"cpu": torch.get_rng_state(),
                             "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else []}
        checkpoint["objective_optimizers"] = self.objective.optimizer_states()
        checkpoint["task_loss_sums"] = self.task_loss_sums.cpu()
        checkpoint["loss_sums"] = self.loss_sums.cpu()
        checkpoint["nonfinite_skips"] = self.nonfinite_skips
        checkpoint[FORMAT_KEY] = CHECKPOINT_FORMAT
        if self.selection is not None:
            checkpoint["selection"] = self.selection.state_dict()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.restored_rng = checkpoint.get("rng")
        self.task_loss_sums = checkpoint.get("task_loss_sums", torch.zeros(3)).to(self.device)
        self.loss_sums = checkpoint.get("loss_sums", torch.zeros(2)).to(self.device)
        self.nonfinite_skips = int(checkpoint.get("nonfinite_skips", 0))
        self.restored_objective_optimizers = checkpoint.get("objective_optimizers", {})
        if self.selection is not None and "selection" in checkpoint:
            self.selection.load_state_dict(checkpoint["selection"])

    # --- training -------------------------------------------------------------------------
    def on_train_start(self) -> None:
        """Resume a restored run's random streams and the objective's own optimisers (saved by
        `on_save_checkpoint`) right before its first training batch. Not in `on_load_checkpoint`:
        Lightning restores the module before it moves it to its device, and an optimiser's loaded
        state takes the device its parameters have then (the CPU, where training is on a GPU)."""
        states, self.restored_objective_optimizers = self.restored_objective_optimizers, {}
        self.objective.load_optimizer_states(states)
        rng, self.restored_rng = self.restored_rng, None
        if rng:
            torch.set_rng_state(rng["cpu"])
            if rng["cuda"] and torch.cuda.is_available() and len(rng["cuda"]) == torch.cuda.device_count():
                torch.cuda.set_rng_state_all(rng["cuda"])

    def training_forward(self, batch: dict[str, torch.Tensor]) -> JointBERTOutput:
        """The model's forward pass on a training batch: compiled with ``trainer.compile`` (at the
        first batch, `robustnlu.model.compiled`), else eager. Validation and test stay eager: they
        would compile graphs of their own (no gradients, dropout off, their batch size) for a
        small share of a run's steps."""
        if self.torch_compile is None:
            return self.model(batch)
        if self.compiled_forward is None:
            self.compiled_forward = compiled_forward(self.model, **self.torch_compile, shape_count=self.shape_count)
        # with CUDA graphs (mode reduce-overhead): a new step begins, so the graphs may reuse the
        # memory of the last step's outputs (nothing reads them any more); a no-op otherwise
        torch.compiler.cudagraph_mark_step_begin()
        return self.compiled_forward(batch)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor | None:
        output = self.training_forward(batch)  # in the trainer's precision (bf16 autocast with bf16-mixed)
        # under DDP: the losses of the whole global batch, from every process (robustnlu/distributed.py)
        losses = gather_task_losses(self.model.task_losses(output, batch), self.pad_values)
        nonfinite = ~(torch.isfinite(losses.slot) & torch.isfinite(losses.intent))
        if nonfinite.any():  # the same on every process (global batch); one device-to-host copy per step
            return self.drop_nonfinite_batch(losses, nonfinite, batch_idx)
        with fp32(self.device):  # the objective (its own networks, weights, top-k) in float32
            loss = self.objective(losses)
        # not prog_bar=True, which reads the loss on the host after every step (robustnlu/progress.py);
        # no sync_dist: under DDP every process already holds the global batch's loss (the same
        # objective state on the same gathered losses), which an all-reduce per step would only average
        self.log(STEP_LOSS, loss)
        # the epoch means are summed here and logged at its end (not Lightning's on_epoch=True,
        # whose sums a checkpoint does not keep): each self.log call costs ~0.6 ms of Lightning
        # bookkeeping (measured by `make bench`), ~10% of a GPU step
        n = losses.slot.new_tensor(losses.slot.numel())
        sums = torch.stack([losses.slot.detach().sum(), losses.intent.detach().sum(), n])
        self.task_loss_sums = self.task_loss_sums.to(sums.device) + sums
        self.loss_sums = self.loss_sums.to(sums.device) + torch.stack([loss.detach().float() * n, n])
        return loss

    def drop_nonfinite_batch(self, losses: TaskLosses, nonfinite: torch.Tensor, batch_idx: int) -> None:
        """A training batch with a NaN or infinite per-example loss, before the objective sees
        it: ``on_nonfinite=stop`` raises `NonFiniteLoss` naming the step, the epoch and the
        batch's uids; ``skip`` counts it and returns None, so that Lightning runs no backward
        and the optimisers update nothing (every gradient is None after zero_grad)."""
        uids = self.uids(losses.inputs["index"])
        bad = [f"{uids[i]} (slot {losses.slot[i].item():g}, intent {losses.intent[i].item():g})"
               for i in nonfinite.nonzero().flatten().tolist()]
        where = (f"non-finite loss in training batch {batch_idx} of epoch {self.current_epoch} after "
                 f"{self.trainer.global_step} optimizer steps: {', '.join(bad)}; batch uids: {' '.join(uids)}")
        if self.on_nonfinite == "stop":
            raise NonFiniteLoss(f"{where}; the run stopped: its checkpoints/last.ckpt (if one was written) holds "
                                "the state before this batch (resume=true continues from it; "
                                "trainer.on_nonfinite=skip drops such batches)")
        self.nonfinite_skips += 1
        rank_zero_warn(f"skipped ({self.nonfinite_skips} so far, trainer.on_nonfinite=skip): {where}")
        return None

    def uids(self, index: torch.Tensor, split: str = "train") -> list[str]:
        """The uids of the ``split`` examples at dataset rows ``index``."""
        utterances = self.trainer.datamodule.datasets[split].utterances
        return [utterances[i].uid for i in index.tolist()]

    def on_train_epoch_end(self) -> None:
        slot, intent, n = self.task_loss_sums.tolist()
        loss, n_loss = self.loss_sums.tolist()
        state = {f"objective/{k}": v for k, v in self.objective.logged_state().items()}
        # the same on every process too (sums over global batches); sync_dist once an epoch, as
        # Lightning asks of epoch-level values under DDP (it warns without)
        self.log_dict({"train/slot_loss": slot / max(n, 1), "train/intent_loss": intent / max(n, 1),
                       "train/loss_epoch": loss / max(n_loss, 1), **state}, sync_dist=True)
        self.task_loss_sums = torch.zeros(3, device=self.device)
        self.loss_sums = torch.zeros(2, device=self.device)

    def configure_optimizers(self):
        """The ``optimizer=`` option's optimiser over the SLU model and its learning-rate schedule
        (`robustnlu.optim.build_optimizer`). The objective trains its own parameters itself."""
        return build_optimizer(self.hparams.optimizer, self.model, lambda: self.trainer.estimated_stepping_batches)

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        """``trainer.gradient_clip_val`` for every optimiser, the fused AdamW kernel included
        (`robustnlu.optim.adamw`). Lightning's mixed-precision plugin refuses to clip an optimiser
        that unscales gradients itself, because under fp16's gradient scaler its gradients are still
        scaled at this point; so unscale them first, as Lightning does for every other optimiser (bf16
        and float32 have no scaler: nothing to unscale), then clip as Lightning does."""
        plugin = self.trainer.precision_plugin
        scaler = getattr(plugin, "scaler", None)
        if scaler is not None and getattr(optimizer, "_step_supports_amp_scaling", False):
            scaler.unscale_(optimizer)
        # Lightning passes the trainer's gradient_clip_val / _algorithm (None: not set, no clipping)
        algorithm = GradClipAlgorithmType(gradient_clip_algorithm or GradClipAlgorithmType.NORM)
        Precision.clip_gradients(plugin, optimizer, gradient_clip_val or 0.0, algorithm)

    # --- evaluation -----------------------------------------------------------------------
    def _eval_step(self, batch: dict[str, torch.Tensor], split: str) -> None:
        output = self.model(batch)
        intent_ids, tag_ids = self.model.decode(output, batch["word_mask"])
        utterances = self.trainer.datamodule.datasets[split].utterances
        gold = [utterances[i] for i in batch["index"].tolist()]
        pred_intents = [self.vocab.intents[i] for i in intent_ids]
        pred_tags = [
            [self.vocab.tags[t] for t in ids] + ["O"] * (len(u.tokens) - len(ids))
            for ids, u in zip(tag_ids, gold, strict=True)
        ]
        groups = batch["groups"].tolist()
        if split == "valid" and self.selection is not None and self.trainer.state.fn == "fit" and not self.trainer.sanity_checking:
            with fp32(self.device):
                self._selection_step(output, batch, pred_intents, pred_tags, gold)
        self.metrics.update(pred_intents, [u.intent for u in gold], pred_tags, [list(u.tags) for u in gold], groups)
        for u, pi, pt, g in zip(gold, pred_intents, pred_tags, groups, strict=True):
            self.prediction_rows.append(
                {"uid": u.uid, "tokens": list(u.tokens), "gold_intent": u.intent, "pred_intent": pi,
                 "gold_tags": list(u.tags), "pred_tags": pt, "group": g}
            )

    def _selection_step(self, output, batch, pred_intents, pred_tags, gold) -> None:
        """Per-example validation inputs of the selection criterion: 0-1 frame error (intent
        or any tag wrong), loss l_slot + γ·l_intent and the adversary's log-weight."""
        losses = self.model.task_losses(output, batch)
        errors = [float(pi != u.intent or pt != list(u.tags)) for pi, pt, u in zip(pred_intents, pred_tags, gold, strict=True)]
        log_weights = self.objective.validation_log_weights(losses)
        if log_weights is None:
            log_weights = torch.zeros_like(losses.slot)
        combined = self.objective.combined_losses(losses).detach()
        nonfinite = ~(torch.isfinite(combined) & torch.isfinite(log_weights))
        if nonfinite.any():  # whatever trainer.on_nonfinite says: the model could not be scored without them
            bad = self.uids(batch["index"][nonfinite], "valid")
            raise NonFiniteLoss(f"non-finite validation loss or adversary log-weight at epoch {self.current_epoch} "
                                f"after {self.trainer.global_step} optimizer steps, for the selection criterion: "
                                f"{' '.join(bad)}; the run stopped (resume=true continues from checkpoints/last.ckpt)")
        self.selection_rows.append(
            torch.stack([batch["index"].to(losses.slot), losses.slot.new_tensor(errors), combined,
                         log_weights.detach()], 1).float()
        )

    def _eval_epoch_end(self, split: str) -> None:
        metrics = self.metrics.compute()
        self.metrics.reset()
        headline = logged_metrics(split, metrics)
        if split == "valid" and self.selection_rows:
            rows = torch.cat(self.selection_rows).cpu()
            rows = rows[rows[:, 0].argsort()]  # dataset order: the same example in the same column every time
            self.selection_rows = []
            headline.update({f"valid/{k}": v for k, v in self.selection.update(rows[:, 1], rows[:, 2], rows[:, 3]).items()})
        # the same on every process (each evaluates the whole split); to the loggers while fitting only:
        # the best checkpoint's evaluation after training is no point of a curve (it would sit one
        # epoch past the last), its metrics are results.json's and the W&B summary's (robustnlu.dashboard)
        self.log_dict(headline, batch_size=1, sync_dist=True, logger=self.trainer.state.fn == "fit")
        self.evaluations[split] = {"metrics": metrics, "predictions": sorted(self.prediction_rows, key=lambda r: r["uid"])}
        self.prediction_rows = []

    def validation_step(self, batch, batch_idx):
        self._eval_step(batch, "valid")

    def on_validation_epoch_end(self):
        self._eval_epoch_end("valid")

    def test_step(self, batch, batch_idx):
        self._eval_step(batch, "test")

    def on_test_epoch_end(self):
        self._eval_epoch_end("test")
