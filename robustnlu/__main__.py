"""``python -m robustnlu [overrides]``: compose the Hydra config and train (see conf/config.yaml)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig

from robustnlu.cli import hydra_app, run_or_exit
from robustnlu.errors import ConfigError


def optimized_value(results: Mapping[str, Any], optimized_metric: str) -> float:
    """The value of ``optimized_metric`` (``<split>/<metric>``, conf/config.yaml) in the run's
    results: what an Optuna sweeper optimises (conf/hparams_search/)."""
    split, metric = optimized_metric.split("/", 1)
    scores = results["metrics"][split]
    if metric not in scores:
        raise ConfigError(f"optimized_metric={optimized_metric}: the run has no {split} metric {metric!r} "
                          f"({', '.join(k for k in scores if not k.startswith('group/'))})")
    return scores[metric]


def train(cfg: DictConfig) -> float:
    """Train the checked ``cfg``; its `optimized_value`."""
    from robustnlu.train import run  # imported once the config is checked: `--help` and config errors stay fast

    return optimized_value(run(cfg), cfg.optimized_metric)


@hydra_app("config")
def main(cfg: DictConfig) -> float:
    return run_or_exit(train, cfg)


if __name__ == "__main__":
    main()
