"""``efficiency=topv2`` (conf/efficiency/topv2.yaml, whose ``_target_`` is `EfficiencyProtocol`):
what one training run of the data-efficiency protocol (Desai et al. 2021; Michel's thesis ch. 7
for ``mode=adapt``) does beyond a plain run. `robustnlu.train` calls it through three methods
and knows nothing else of it:

- `corpus`: stages 1-2, the sources + the target subset (`robustnlu.efficiency.subsets`),
  after checking the run's drift split (none) and optimiser (``conatural`` needs ``mode=adapt``);
- `attach`: under ``mode=adapt``, the source model's weights into the new module, the source
  Fisher for ``optimizer=conatural`` and the source domains' scores before adapting; returns
  the callbacks to train with (`robustnlu.efficiency.adapt.Adaptation`);
- `record`: what results.json stores under ``efficiency`` (with the source forgetting after
  adapting).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from omegaconf import DictConfig

from robustnlu.data.utterance import Corpus, LabelVocab
from robustnlu.efficiency.adapt import Adaptation, load_source_model, score_sources, source_fisher
from robustnlu.efficiency.subsets import EfficiencySplit, efficiency_split
from robustnlu.errors import ConfigError
from robustnlu.module import SLUModule


#: the co-natural optimiser preconditions with a source model's Fisher (also checked with the
#: config: robustnlu.config_schema, without efficiency=)
CONATURAL_NEEDS_ADAPT = ("optimizer=conatural preconditions with the source task's Fisher: use it with efficiency=topv2 "
                         "efficiency.mode=adapt")


class EfficiencyProtocol:
    def __init__(self, percent: float, mode: str, init_from: str | None, sources: list[str] | None,
                 source_limit: int | None, valid: str, subset_seed: int):
        """The keys of conf/efficiency/topv2.yaml."""
        self.settings = {"percent": percent, "mode": mode, "init_from": init_from, "sources": sources,
                         "source_limit": source_limit, "valid": valid, "subset_seed": subset_seed}
        self.split: EfficiencySplit | None = None
        self.adaptation: Adaptation | None = None

    def corpus(self, cfg: DictConfig, root: Path) -> tuple[Corpus, LabelVocab]:
        """The run's corpus (``cfg.dataset`` is the target) and its label vocabulary (every
        domain's: the same at every percentage)."""
        if cfg.drift.kind != "none":
            raise ConfigError("efficiency=topv2 splits by domain and subset; it does not combine with a drift split")
        if cfg.optimizer.name == "conatural" and self.settings["mode"] != "adapt":
            raise ConfigError(CONATURAL_NEEDS_ADAPT)
        self.split = efficiency_split(cfg.dataset, self.settings, root)
        return self.split.corpus, self.split.vocab

    def attach(self, module: SLUModule, tokenizer, cfg: DictConfig) -> list[pl.Callback]:
        """Under ``mode=adapt``: the source model into ``module``, and the `Adaptation` callback
        (with the source Fisher under ``optimizer=conatural``, ``cfg.optimizer``'s damping, γ
        and sample count); under ``mode=joint`` nothing."""
        if self.settings["mode"] != "adapt":
            return []
        load_source_model(module, Path(self.settings["init_from"]))
        opt = cfg.optimizer
        fisher = (source_fisher(module, tokenizer, self.split.source_train, opt.fisher_samples, cfg.seed,
                                cfg.data.max_length, opt.damping, opt.gamma)
                  if opt.name == "conatural" else None)
        before = score_sources(module, tokenizer, self.split.source_test, cfg.data.eval_batch_size)
        self.adaptation = Adaptation(tokenizer, self.split.source_test, cfg.data.eval_batch_size, before, fisher)
        return [self.adaptation]

    def record(self) -> dict[str, Any]:
        """results.json's ``efficiency``: the split's record, and after adapting the forgetting."""
        forgetting = self.adaptation.forgetting() if self.adaptation else None
        return {**self.split.info, "forgetting": forgetting} if forgetting else self.split.info
