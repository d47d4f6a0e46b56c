"""Where relative data paths are resolved (``paths.root``, conf/paths/default.yaml): the
repository root, or the configured root."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

REPO_ROOT = Path(__file__).resolve().parents[1]


def repo_root(cfg: DictConfig) -> Path:
    """Where relative data paths are resolved: ``paths.root`` or the repository root."""
    return Path(cfg.paths.root) if cfg.paths.get("root") else REPO_ROOT
