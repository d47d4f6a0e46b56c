"""The scenario a run belongs to, computed in one place (core paper section 5): a dataset, its
SeqDrift drift kind, full or partial drift, and i.i.d. or o.o.d. validation (2 × 2 × 2 = 8
scenarios per dataset), or the dataset's own split when there is no drift.

Its `name` names run directories (conf/hydra/default.yaml; a SeqDrift sweep's job folders:
conf/seqdrift.yaml), W&B groups (conf/logger/wandb.yaml) and HPO studies
(conf/hparams_search/optuna.yaml) through the ``${scenario_name:...}`` resolver, which
config.yaml's ``scenario`` key calls; train.py stores the value in results.json
(``scenario``), and the reports read it back with `Scenario.of_results`.

    snips-slot_context-full-iid     SNIPS, slot context drift, full, i.i.d. validation
    atis-slot_value-partial-ood     ATIS, slot value drift, partial, o.o.d. validation
    snips                           SNIPS' own split (drift=none)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from omegaconf import OmegaConf

NO_DRIFT = "none"


@dataclass(frozen=True, order=True)
class Scenario:
    dataset: str
    drift: str = NO_DRIFT  # none | slot_value | slot_context
    partial: bool = False  # partial drift (section 3.2); False without a drift
    validation: str = "dataset"  # iid | ood; "dataset" (the dataset's own valid split) without a drift

    @classmethod
    def of(cls, dataset: str, drift: str, partial: bool | None, validation: str) -> Scenario:
        """From the config's values: without a drift, partial and validation do not apply."""
        if drift == NO_DRIFT:
            return cls(str(dataset))
        return cls(str(dataset), str(drift), bool(partial), str(validation))

    @classmethod
    def of_results(cls, results: dict[str, Any]) -> Scenario:
        """The scenario of a run from its results.json: the stored ``scenario``, or for run
        directories written before it was stored, the same values from ``dataset`` and ``drift``."""
        if "scenario" in results:
            return cls(**results["scenario"])
        drift = results["drift"]
        return cls.of(results["dataset"], drift["kind"], drift.get("partial"), drift.get("validation", ""))

    @property
    def amount(self) -> str:
        """full | partial (the drift's amount)."""
        return "partial" if self.partial else "full"

    @property
    def label(self) -> str:
        """e.g. ``slot_context full iid`` (the dataset not included), in the reports' tables."""
        return f"{self.drift} {self.amount} {self.validation}"

    @property
    def name(self) -> str:
        """e.g. ``snips-slot_context-full-iid``; ``snips`` for the dataset's own split."""
        if self.drift == NO_DRIFT:
            return self.dataset
        return f"{self.dataset}-{self.drift}-{self.amount}-{self.validation}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def scenario_name(dataset: str, drift: str, partial: bool | None, validation: str) -> str:
    """The OmegaConf resolver behind config.yaml's ``scenario`` key."""
    return Scenario.of(dataset, drift, partial, validation).name


def register_resolver() -> None:
    """``${scenario_name:<dataset>,<drift kind>,<partial>,<validation kind>}`` (idempotent)."""
    if not OmegaConf.has_resolver("scenario_name"):
        OmegaConf.register_new_resolver("scenario_name", scenario_name)
