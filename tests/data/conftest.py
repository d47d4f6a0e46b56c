"""Shared fixtures for the reader tests: the repository root, the shipped dataset configs and
a cache of the shipped corpora (each is read once per test session)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from robustnlu.data.readers import load_corpus
from robustnlu.data.utterance import Corpus
from robustnlu.paths import shipped_config


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def dataset_config(repo_root: Path) -> Callable[[str], dict]:
    """``dataset_config(name)``: ``conf/dataset/<name>.yaml`` as a fresh plain dict, its files
    under the shipped data (`robustnlu.paths.shipped_config`)."""

    def config(name: str) -> dict:
        return shipped_config("dataset", name)

    return config


@pytest.fixture(scope="session")
def shipped_corpus(
    repo_root: Path, dataset_config: Callable[[str], dict]
) -> Callable[[str], Corpus]:
    """``shipped_corpus(name)``: the shipped dataset ``name``, read once per test session."""
    cache: dict[str, Corpus] = {}

    def load(name: str) -> Corpus:
        if name not in cache:
            cache[name] = load_corpus(dataset_config(name), repo_root)
        return cache[name]

    return load
