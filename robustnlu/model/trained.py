"""A trained model from the hyper-parameters and weights a checkpoint stores, without the training
stack. `build_jointbert` is the one place that turns those hyper-parameters into a `JointBERT`
(`robustnlu.module.SLUModule` builds its model with it); `load_trained` reads a checkpoint's
model for prediction (`robustnlu.predictor`): the JointBERT with its trained weights, the label
vocabulary and the ``encoder=`` config that names the tokenizer. The objective the run trained
with is not built: prediction reads the model alone, so Lightning, the objectives and their
imports stay unloaded, and a checkpoint of a user's method predicts without its package."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from robustnlu.checkpoint import read_checkpoint
from robustnlu.data.utterance import LabelVocab
from robustnlu.errors import DataError, first_line
from robustnlu.model.encoders import encoder_from_config
from robustnlu.model.jointbert import JointBERT

#: the start of the error line for a checkpoint whose hyper-parameters or weights build no model
NOT_A_MODEL = "a checkpoint whose hyper-parameters and weights do not make an SLU model"
#: the prefix of the model's entries in a checkpoint's state dict (`SLUModule`'s attribute ``model``)
MODEL_PREFIX = "model."


def build_jointbert(model: Mapping[str, Any], vocab: LabelVocab, encoder_config: Mapping[str, Any],
                    encoder: nn.Module | None = None) -> JointBERT:
    """The JointBERT of the ``model=`` config (dropout, crf) with a head for each label of
    ``vocab``, around ``encoder`` (a new run's pre-trained encoder) or, without one, around the
    architecture ``encoder_config`` describes (a Hugging Face config, as checkpoints store it;
    the weights then come from the state dict)."""
    return JointBERT(
        encoder if encoder is not None else encoder_from_config(encoder_config),
        n_intents=len(vocab.intents),
        n_tags=len(vocab.tags),
        dropout=model["dropout"],
        crf=model["crf"],
    )


def model_state(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The JointBERT's weights in a checkpoint's state dict (which also holds the objective's)."""
    return {k.removeprefix(MODEL_PREFIX): v for k, v in state_dict.items() if k.startswith(MODEL_PREFIX)}


@dataclass(frozen=True)
class TrainedModel:
    model: JointBERT  # in eval mode
    vocab: LabelVocab
    encoder_spec: dict[str, Any]  # the run's encoder= config: it names the tokenizer


def load_trained(path: str | Path, device: str | torch.device = "cpu") -> TrainedModel:
    """The trained model of the checkpoint ``path`` on ``device``; `DataError` for a file that is
    not a robustnlu checkpoint (`read_checkpoint`) or whose model does not build from it."""
    ckpt = read_checkpoint(path)
    hyper_parameters = ckpt["hyper_parameters"]
    try:
        vocab = LabelVocab.from_dict(hyper_parameters["vocab"])
        model = build_jointbert(hyper_parameters["model"], vocab, hyper_parameters["encoder_config"])
        model.load_state_dict(model_state(ckpt["state_dict"]))
    except Exception as err:  # hyper-parameters or weights that do not build this robustnlu's model
        raise DataError(path, None, f"{NOT_A_MODEL}: {first_line(err)}") from None
    return TrainedModel(model.to(device).eval(), vocab, hyper_parameters["encoder_spec"])
