"""`+grid=<dataset>` expands to the core paper's 8 drift scenarios (section 5): the sweep is
expanded here with Hydra's own override parser and basic sweeper, as `-m` does."""

from __future__ import annotations

import itertools

import pytest
from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser

from integration_helpers import CONF

GRIDS = sorted(p.stem for p in (CONF / "grid").glob("*.yaml"))


def expand(grid: str, extra: list[str]) -> list[list[str]]:
    """The jobs' override lists of `python -m robustnlu -m +grid=<grid> <extra>`."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"+grid={grid}"], return_hydra_config=True)
    params = [f"{k}={v}" for k, v in cfg.hydra.sweeper.params.items()]
    (jobs,) = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(params + extra), None)
    return jobs


@pytest.mark.parametrize("grid", GRIDS)
def test_grid_is_the_eight_scenarios_times_the_command_line_sweep(grid):
    assert len(expand(grid, ["method=erm,topk", "seed=1,2"])) == 8 * 2 * 2
    jobs = expand(grid, [])
    scenarios = set()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        for job in jobs:
            cfg = compose(config_name="config", overrides=[f"+grid={grid}", *job])
            assert cfg.dataset.name.startswith(grid) or grid == "mit"
            scenarios.add((cfg.drift.kind, cfg.drift.partial, cfg.validation.kind))
    assert scenarios == set(itertools.product(("slot_value", "slot_context"), (False, True), ("iid", "ood")))


def test_every_dataset_with_drift_presets_has_a_grid():
    presets = {p.stem.rsplit("_slot_", 1)[0] for p in (CONF / "experiment").glob("*_slot_value.yaml")}
    assert presets == set(GRIDS)
