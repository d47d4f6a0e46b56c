"""Shared fixtures: the tiny randomly initialised encoder and small hand-made corpora."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    # one of several test processes (make test: pytest-xdist): its share of the cores, for torch
    # here and in the CLI runs it starts (their environment is this one); without it every
    # process's torch would use all cores and the machine would thrash
    os.environ.setdefault("OMP_NUM_THREADS",
                          str(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))

TINY_ENCODER = {"kind": "tiny", "hidden_size": 32, "num_layers": 2, "num_heads": 2,
                "intermediate_size": 64, "max_position_embeddings": 128}


@pytest.fixture(scope="session")
def tokenizer():
    from robustnlu.model.encoders import load_tokenizer

    return load_tokenizer(TINY_ENCODER)


@pytest.fixture(scope="session")
def tiny_encoder_cfg():
    return dict(TINY_ENCODER)
