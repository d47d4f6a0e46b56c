"""``python -m robustnlu [overrides]``: compose the Hydra config and train (see conf/config.yaml)."""

from __future__ import annotations

from omegaconf import DictConfig

from robustnlu.cli import hydra_app, run_or_exit


@hydra_app("config")
def main(cfg: DictConfig) -> float:
    from robustnlu.train import run  # imported here so `--help` and config errors stay fast

    results = run_or_exit(run, cfg)
    return results["metrics"]["valid"]["combined"]  # the objective an Optuna sweeper maximises


if __name__ == "__main__":
    main()
