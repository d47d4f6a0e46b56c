"""Shared fixtures: the tiny randomly initialised encoder and small hand-made corpora."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

TINY_ENCODER = {"kind": "tiny", "hidden_size": 32, "num_layers": 2, "num_heads": 2,
                "intermediate_size": 64, "max_position_embeddings": 128}


@pytest.fixture(scope="session")
def tokenizer():
    from robustnlu.model.encoders import load_tokenizer

    return load_tokenizer(TINY_ENCODER)


@pytest.fixture(scope="session")
def tiny_encoder_cfg():
    return dict(TINY_ENCODER)
