"""``python -m robustnlu [overrides]``: compose the Hydra config and train (see conf/config.yaml)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from robustnlu.errors import RobustNLUError


def _discard_run_dir(run_dir: Path) -> None:
    """Remove the run dir Hydra created for a run that failed before writing any result, so
    bad input leaves no half-written output behind (and the parents it leaves empty)."""
    if (run_dir / "results.json").exists():
        return
    shutil.rmtree(run_dir, ignore_errors=True)
    cwd = Path.cwd().resolve()
    parent = run_dir.resolve().parent
    while parent != cwd and cwd in parent.parents and not any(parent.iterdir()):
        parent.rmdir()
        parent = parent.parent


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    from robustnlu.train import run  # imported here so `--help` and config errors stay fast

    try:
        results = run(cfg)
    except RobustNLUError as err:
        _discard_run_dir(Path(HydraConfig.get().runtime.output_dir))
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    return results["metrics"]["valid"]["combined"]  # the objective an Optuna sweeper maximises


if __name__ == "__main__":
    main()
