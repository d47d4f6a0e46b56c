"""R-PDRO: DRO with a parametric likelihood ratio (Michel, thesis ch. 6; ICLR 2022).

    min_θ max_ψ E_p r_ψ ℓ_θ   s.t.  E_p r_ψ log r_ψ ≤ κ,  E_p r_ψ = 1,   r_ψ = exp(f_ψ)   (eq. 6.3)

with the batch-level normalisation (section 6.1.3, the thesis's default) and the KL constraint
relaxed into a penalty of weight τ:

    r̃_i = exp(f_i) / Σ_j exp(f_j)                                         (eq. 6.5)
    L(θ, ψ) = Σ_i r̃_i ℓ_i − τ Σ_i r̃_i log r̃_i                              (eq. 6.6)

θ minimises the first term with r̃ held fixed, ψ maximises the whole of eq. 6.6 with ℓ held
fixed, by simultaneous gradient steps (section 6.1.2): the model's loss uses the weights of ψ_t,
computed before the adversary's own step to ψ_{t+1} in the same `forward`. No extra adversary
steps: they hurt robustness (section 6.3.2).

Choices (exposed in conf/method/rpdro.yaml):
- ℓ_i = l_slot,i + γ·l_intent,i: one weight per utterance for both tasks (the adversary reweights
  examples, digest 9.2), so the method overrides `forward`, not `reduce`;
- the adversary f_ψ: `robustnlu.adversary.ratio.RatioAdversary` (``method.adversary``, conf/adversary/ratio_net.yaml);
- its optimiser is the model's (section 6.2.2: "the same learning rate and optimizer for both
  model and adversary"): AdamW with the model's lr, betas, eps and weight decay (not on biases
  and LayerNorm), gradient clipping as the model's. The thesis also decays both learning rates
  linearly to 0 (digest 4.6); the adversary's stays constant here (an objective does not see the
  run's length);
- batches smaller than 16 degrade the batch-level normalisation (section 6.3.4, Table 6.3):
  `setup` warns below ``min_batch_size``. Under DDP the softmax runs over each device's batch.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor

from robustnlu.adversary.ratio import RatioAdversary
from robustnlu.config_spec import AT_LEAST_1, NON_NEGATIVE, POSITIVE, Seq, integer, number
from robustnlu.hparams import HParam, Part, grid
from robustnlu.model.jointbert import TaskLosses
from robustnlu.optim import weight_decay_groups
from robustnlu.robust.base import EpochMeans, RobustObjective, entropy


def rpdro_losses(f: Tensor, losses: Tensor, tau: float) -> tuple[Tensor, Tensor]:
    """(model loss Σ r̃_i.detach() ℓ_i, adversary loss −(Σ r̃_i ℓ_i.detach() − τ Σ r̃_i log r̃_i)),
    r̃ = softmax of f over the batch (eq. 6.5):
    the two players' halves of eq. 6.6, each differentiable only in its own player's input."""
    log_weights = torch.log_softmax(f, dim=0)
    weights = log_weights.exp()
    model_loss = (weights.detach() * losses).sum()
    adversary_gain = (weights * losses.detach()).sum() - tau * (weights * log_weights).sum()
    return model_loss, -adversary_gain


class RPDRO(RobustObjective):
    # the adversary's optimiser is the model's (thesis 6.2.2 "same learning rate and optimizer"): conf/method/rpdro.yaml
    # sets lr, weight_decay, betas, eps and max_grad_norm to the model's values
    HPARAMS = {
        "adversary": Part(RatioAdversary, "f_ψ's factory (method.adversary, conf/adversary/), called with the ModelSpec: "
                          "forward(inputs) -> [b] log-ratios, init_from(encoder)"),
        # default 0.1: the value of all the thesis's R-PDRO analyses (6.3.1, 6.3.3, 6.3.4); search: its grid (6.2.2)
        "tau": HParam(number(POSITIVE), 0.1, "τ, the KL penalty weight of eq. 6.6",
                      search=grid(0.001, 0.01, 0.1, 1.0)),
        "lr": HParam(number(POSITIVE), 1e-4, "the adversary's AdamW learning rate"),
        "weight_decay": HParam(number(NON_NEGATIVE), 0.0, "its AdamW weight decay (not on biases and LayerNorm)"),
        "betas": HParam(Seq(number("[0, 1)"), length=2), (0.9, 0.999), "its AdamW betas"),
        "eps": HParam(number(POSITIVE), 1e-8, "its AdamW epsilon"),
        "max_grad_norm": HParam(number(POSITIVE, null=True), 1.0, "its gradient clipping (null: none)"),
        # thesis 6.3.4, Table 6.3: the batch-level normalisation degrades under 16
        "min_batch_size": HParam(integer(AT_LEAST_1), 16, "setup warns below this batch size"),
    }

    def __init__(self, adversary, **kwargs):
        super().__init__(**kwargs)
        hp = self.hparams
        self.adversary = adversary(self.spec)
        self.tau = hp["tau"]
        self.max_grad_norm = hp["max_grad_norm"]
        self.min_batch_size = hp["min_batch_size"]
        groups = weight_decay_groups(self.adversary, hp["weight_decay"])
        self.add_optimizer("adversary", torch.optim.AdamW(groups, lr=hp["lr"], betas=tuple(hp["betas"]), eps=hp["eps"]))
        self.epoch_means = EpochMeans()

    def setup(self, datamodule, model) -> None:
        """Initialise the adversary's encoder from the SLU model's (pre-trained) encoder."""
        if datamodule.batch_size < self.min_batch_size:
            warnings.warn(f"R-PDRO with batch size {datamodule.batch_size} < {self.min_batch_size}: the batch-level "
                          "normalisation degrades on small batches (thesis 6.3.4, Table 6.3)", stacklevel=2)
        self.adversary.init_from(model.encoder)

    def forward(self, step: TaskLosses) -> Tensor:
        """The model's loss under ψ_t, then one adversary step ψ_t → ψ_{t+1}."""
        losses = self.combined_losses(step)
        f = self.adversary(step.inputs).to(losses.dtype)
        model_loss, adversary_loss = rpdro_losses(f, losses, self.tau)
        self.own_step("adversary", adversary_loss, self.max_grad_norm)
        self.epoch_means.add(loss=adversary_loss, weight_entropy=entropy(torch.softmax(f.detach(), 0)))
        return model_loss

    def logged_state(self) -> dict[str, float]:
        """Epoch means of the adversary's loss (−eq. 6.6) and of the entropy of its batch weights r̃
        (log b when uniform)."""
        return {f"adversary/{k}": v.item() for k, v in self.epoch_means.pop().items()}

    @torch.no_grad()
    def validation_log_weights(self, step: TaskLosses) -> Tensor:
        """f_ψ, the unnormalised log-ratio (Greedy-Minmax normalises over the validation set)."""
        return self.adversary(step.inputs)
