"""The online autoencoder of TopK-AE (core paper section 4.3 and Appendix B, equations 1-3).

It groups the b items of a batch into c latent groups from their encoder representations
X_enc ∈ R^{b×d}, and a training step updates it on every batch (Algorithm 1, lines 7-8).

    H = softmax(X_enc A_enc),  R = H A_dec                   (eq. 1; A_enc ∈ R^{d×c}, A_dec ∈ R^{c×d})
    L_Recon  = −1/b Σ_i log softmax_j(X_enc,j · R_i)|_{j=i}   (eq. 2, dropout on R)
    L_Divers = Σ_{i≠j} KL(H_i ‖ H_j) / (b(b−1))               (eq. 3)

Readings of App. B where the paper is ambiguous (exposed in conf/groups/autoencoder.yaml):

- Orientation of eq. 2: the text asks that "each reconstruction R_i should be closer to its
  original input X_enc,i than to other batch items in X_enc", so the softmax runs over the
  inputs X_enc,j for a fixed R_i (over the rows of X_enc Rᵀ), i.e. the cross entropy of row i
  of R X_encᵀ with target i.
- Sign of the diversity term: eq. 3 is large when the codes H_i differ, and the loss is there
  "to prevent the auto-encoder from collapsing into one mode"; minimising +L_Divers would drive
  every H_i to the same distribution, so the autoencoder *maximises* it (it enters l_AE with a
  minus sign). The KL grows with the scale of A_enc (sharper codes); the weight decay α_AE of
  the autoencoder's optimiser bounds that growth.
- What β weights (``beta_weights``): Algorithm 1 line 7 writes l_AE = L_Recon + β·L_Divers and
  Table 9 calls β_AE the "ae cluster loss weight", while the App. B text calls β "a scalar for
  the reconstruction loss". ``diversity`` (default, Algorithm 1 and Table 9):
  l_AE = L_Recon − β·L_Divers; ``reconstruction``: l_AE = β·L_Recon − L_Divers.

The autoencoder always computes in float32 with autocast disabled: it is tiny (b×d×c) and its
softmax / KL terms are the part of a mixed-precision step that would lose precision.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from robustnlu.config_spec import AT_LEAST_1, DROPOUT, NON_NEGATIVE, choice, integer, number
from robustnlu.hparams import HParam, grid, hparam_values, log_uniform

BETA_WEIGHTS = ("diversity", "reconstruction")


class OnlineAutoencoder(nn.Module):
    # Table 9's TOPK-AE block searches β_AE and c (with the method's k and λ_AE), in this order
    HPARAMS = {
        # Table 9 "ae cluster loss weight βAE": loguniform 0.1 - 1.0; the default is its geometric middle
        "beta": HParam(number(NON_NEGATIVE), 0.3, "β_AE, the weight of the loss beta_weights names",
                       search=log_uniform(0.1, 1.0)),
        # Table 9 "ae cluster size c": 128, 256, 512
        "latent_groups": HParam(integer(AT_LEAST_1), 256, "c, the bottleneck size = the number of latent groups",
                                search=grid(128, 256, 512)),
        # App. B does not give the rate: BERT's 0.1
        "dropout": HParam(number(DROPOUT), 0.1, "dropout on R before the reconstruction loss (App. B)"),
        "beta_weights": HParam(choice(*BETA_WEIGHTS), "diversity", "diversity: l_AE = L_Recon − β·L_Divers "
                               "(Algorithm 1 line 7, Table 9) | reconstruction: l_AE = β·L_Recon − L_Divers "
                               "(App. B text)"),
    }

    def __init__(self, hidden_size: int, **hparams):
        """``hidden_size`` d: the encoder's (from the ModelSpec)."""
        super().__init__()
        self.hparams = hparam_values(type(self), hparams)
        latent_groups = self.hparams["latent_groups"]
        self.dropout = self.hparams["dropout"]
        self.beta = self.hparams["beta"]
        self.beta_weights = self.hparams["beta_weights"]
        # nn.Linear's initialisation (uniform ±1/sqrt(fan_in)), without biases as in eq. 1
        self.encoder = nn.Parameter(torch.empty(hidden_size, latent_groups).uniform_(-1, 1) / math.sqrt(hidden_size))
        self.decoder = nn.Parameter(torch.empty(latent_groups, hidden_size).uniform_(-1, 1) / math.sqrt(latent_groups))

    def _input(self, x_enc: Tensor) -> Tensor:
        """The detached ``x_enc`` in the parameters' dtype (float32 unless the module is cast)."""
        return x_enc.detach().to(self.encoder.dtype)

    def log_codes(self, x_enc: Tensor) -> Tensor:
        """log H ``[b, c]`` (eq. 1) of the detached ``x_enc``."""
        return torch.log_softmax(self._input(x_enc) @ self.encoder, dim=1)

    def reconstruction_loss(self, x_enc: Tensor, reconstruction: Tensor) -> Tensor:
        """Eq. 2: cross entropy of each R_i picking its own input among the batch's X_enc,j."""
        logits = reconstruction @ self._input(x_enc).T  # [i, j] = R_i · X_enc,j
        return F.cross_entropy(logits, torch.arange(logits.size(0), device=logits.device))

    @staticmethod
    def diversity_loss(log_codes: Tensor) -> Tensor:
        """Eq. 3: the mean KL(H_i ‖ H_j) over ordered pairs i ≠ j (0 for a batch of one)."""
        codes = log_codes.exp()
        # KL[i, j] = Σ_k H_ik log H_ik − Σ_k H_ik log H_jk; the diagonal (0 up to rounding) is left out
        kl = (codes * log_codes).sum(1, keepdim=True) - codes @ log_codes.T
        b = log_codes.size(0)
        return (kl.sum() - kl.diagonal().sum()) / max(b * (b - 1), 1)

    def loss(self, x_enc: Tensor) -> Tensor:
        """l_AE of Algorithm 1 line 7 (see the module docstring for the sign and β's place)."""
        with torch.autocast(x_enc.device.type, enabled=False):
            log_codes = self.log_codes(x_enc)
            reconstruction = F.dropout(log_codes.exp() @ self.decoder, self.dropout, self.training)
            recon = self.reconstruction_loss(x_enc, reconstruction)
            divers = self.diversity_loss(log_codes)
        if self.beta_weights == "diversity":
            return recon - self.beta * divers
        return self.beta * recon - divers

    @torch.no_grad()
    def codes(self, x_enc: Tensor) -> Tensor:
        """H ``[b, c]``, the latent group distribution of each item, without gradient."""
        with torch.autocast(x_enc.device.type, enabled=False):
            return self.log_codes(x_enc).exp()
