"""The interface every training objective implements (core paper section 4, Algorithm 1).

Algorithm 1 applies the method's reduction to the slot loss and to the intent loss separately
and forms L = L_slot + γ·L_intent (γ = the intent loss scaler of section 5 "SLU Model").
A subclass implements `reduce`, or `forward` when one computation serves both tasks.

A method with its own parameters (an autoencoder, an adversary network) owns them as
sub-modules and trains them with its own optimiser (`add_optimizer` / `own_step`): they are
not in the model's optimiser, the model's loss never back-propagates into them, and their
optimiser state travels in the checkpoint (`optimizer_states`). Running state (group weights,
averages, windows) lives in buffers: saved with the model, loadable with ``weights_only=True``,
and resized on load when its size depends on the data (`StateBuffers`).

Life cycle: constructed from the ``method=`` config with γ and the `ModelSpec`; `setup` once
per fit with the data module and the model, before a checkpoint is restored (so anything it
initialises is overwritten when resuming); `forward` at every training step;
`validation_log_weights` on validation batches for adversarial model selection; `logged_state`
at the end of every training epoch, for the loggers.
"""

from __future__ import annotations


import torch
from torch import Tensor, nn

from robustnlu.hparams import HParam, Part, hparam_values
from robustnlu.model.jointbert import TaskLosses
from robustnlu.model.spec import ModelSpec, StateBuffers


def entropy(weights: Tensor) -> Tensor:
    """−Σ w log w (nats) of weights ``[..., G]`` summing to 1 over the last dimension (0 log 0 = 0)."""
    return -torch.special.xlogy(weights, weights).sum(-1)


class EpochMeans:
    """Means over a training epoch of scalars a method computes at every step, for its
    `RobustObjective.logged_state`: `add` keeps running sums on the values' device (no host
    synchronisation in the step), `pop` returns the means and starts the next epoch. Not in
    checkpoints: an epoch resumed in its middle logs the mean of the steps since the resume."""

    def __init__(self):
        self.sums: dict[str, Tensor] = {}
        self.counts: dict[str, int] = {}

    def add(self, **values: Tensor) -> None:
        for key, value in values.items():
            value = value.detach().float()
            self.sums[key] = self.sums[key] + value if key in self.sums else value
            self.counts[key] = self.counts.get(key, 0) + 1

    def pop(self) -> dict[str, Tensor]:
        means = {key: total / self.counts[key] for key, total in self.sums.items()}
        self.sums, self.counts = {}, {}
        return means


class RobustObjective(StateBuffers):
    #: "slot" and "intent": the two task losses Algorithm 1 reduces.
    TASKS = ("slot", "intent")
    #: the training batches the method expects: "shuffle" (uniform) or "group_balanced"
    #: (each example drawn with probability reciprocal to its group's frequency, Sagawa et al.
    #: 2020); see `sample_weights`.
    sampling = "shuffle"
    #: the method's hyper-parameters, one line each (`robustnlu.hparams`): the config schema, the
    #: constructor's checks and the HPO search space read them; a subclass adds its own
    HPARAMS: dict[str, HParam | Part] = {}

    def __init__(self, name: str = "", intent_loss_scale: float = 1.0, spec: ModelSpec | None = None, **hparams):
        """``name`` is the method's config name (``method.name``), γ = ``intent_loss_scale``;
        ``hparams`` the values of the hyper-parameters the class declares, checked and completed
        with the declared defaults into ``self.hparams`` (`robustnlu.hparams.hparam_values`)."""
        super().__init__()
        self.hparams = hparam_values(type(self), hparams)
        self.name = name
        self.intent_loss_scale = float(intent_loss_scale)
        self.spec = spec
        self._optimizers: dict[str, torch.optim.Optimizer] = {}

    # --- the objective ---------------------------------------------------------------------
    def reduce(self, losses: Tensor, task: str, step: TaskLosses) -> Tensor:
        """Reduce one task's per-example losses ``[b]`` to a scalar."""
        raise NotImplementedError

    def forward(self, step: TaskLosses) -> Tensor:
        """L = reduce(l_slot) + γ · reduce(l_intent)."""
        slot = self.reduce(step.slot, "slot", step)
        intent = self.reduce(step.intent, "intent", step)
        return slot + self.intent_loss_scale * intent

    def combined_losses(self, step: TaskLosses) -> Tensor:
        """Per-example l_slot + γ·l_intent: the one loss per utterance that methods weighting
        whole examples (one weight for both tasks) reweight."""
        return step.slot + self.intent_loss_scale * step.intent

    # --- hooks -----------------------------------------------------------------------------
    def setup(self, datamodule, model: nn.Module) -> None:
        """Called once per fit with the set-up data module (``datamodule.datasets["train"]``
        is what ``inputs["index"]`` indexes) and the SLU model, before a checkpoint restore."""

    def sample_weights(self) -> Tensor | None:
        """Per training example sampling weights for ``sampling = "group_balanced"``."""
        return None

    def validation_log_weights(self, step: TaskLosses) -> Tensor | None:
        """The adversary's unnormalised log-weights ``[b]`` of validation examples, for
        Minmax / Greedy-Minmax selection (thesis 5.3.3); None for methods without one."""
        return None

    def logged_state(self) -> dict[str, float]:
        """Scalars of the method's state that a researcher watches over training (group weights'
        entropy, latent group sizes, the adversary's loss), logged as ``objective/<key>`` at the
        end of each training epoch; none by default. Reading it changes no training state (it
        may restart what it averages over the epoch: `EpochMeans`)."""
        return {}

    # --- own parameters --------------------------------------------------------------------
    def add_optimizer(self, name: str, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        self._optimizers[name] = optimizer
        return optimizer

    def own_step(self, name: str, loss: Tensor, max_grad_norm: float | None = None) -> None:
        """One update of the method's own parameters under optimiser ``name``: backward of
        ``loss`` (which must not reach the SLU model), gradients averaged over processes under
        DDP (these parameters are outside DDP's reducer), optional clipping, step."""
        optimizer = self._optimizers[name]
        params = [p for g in optimizer.param_groups for p in g["params"]]
        optimizer.zero_grad(set_to_none=True)
        loss.backward(inputs=params)
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            world = torch.distributed.get_world_size()
            for p in params:
                if p.grad is not None:
                    torch.distributed.all_reduce(p.grad)
                    p.grad /= world
        if max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
        optimizer.step()

    def optimizer_states(self) -> dict[str, dict]:
        return {name: opt.state_dict() for name, opt in self._optimizers.items()}

    def load_optimizer_states(self, states: dict[str, dict]) -> None:
        for name, state in states.items():
            self._optimizers[name].load_state_dict(state)
