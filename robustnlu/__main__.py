"""``python -m robustnlu [overrides]``: compose the Hydra config and train (see conf/config.yaml)."""

from __future__ import annotations

from omegaconf import DictConfig

from robustnlu.cli import hydra_app, run_or_exit
from robustnlu.rundir import optimized_value
from robustnlu.rundir_check import check_run_dir


def train(cfg: DictConfig) -> float:
    """Train the checked ``cfg``; its `optimized_value`."""
    check_run_dir(cfg)  # a folder the run may not use is refused before the imports of training
    from robustnlu.train import run  # imported once the config is checked: `--help` and config errors stay fast

    return optimized_value(run(cfg), cfg.optimized_metric)


@hydra_app("config")
def main(cfg: DictConfig) -> float:
    return run_or_exit(train, cfg)


if __name__ == "__main__":
    main()
