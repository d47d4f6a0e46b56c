"""Numbers (i)-(q): each training objective's step time ÷ ERM's, measured side by side.

Every method of ``conf/method/`` trains its own copy of the same initial JointBERT (embedded
encoder) on the same pre-collated batches of the SeqDrift slot context split of SNIPS (the
headline experiment, so the group methods have their clusters) with the plain loop's step of
(a) (forward → objective → backward → clip → step; the objective's own updates happen inside
it). The methods train in lockstep: at every step each method takes that step on the same batch,
in an order rotated from step to step, each timed alone; so a slow phase of the machine hits
every method alike. Ratio = median over the timed steps of (method's step time ÷ ERM's step time
on that batch). The objective's one-off set-up (LDA topics, P-DRO's adversary pre-training) is
not part of a step.
"""

from __future__ import annotations

import copy
import statistics
import time
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch

from bench.contention import wait_for_quiet
from bench.loops import _to, configured_optimizer, plain_step
from bench.workload import CONF, REPO, compose_config
from robustnlu.data.collate import Collator
from robustnlu.module import SLUModule
from robustnlu.train import prepare


def methods() -> list[str]:
    """Every method but ERM, the reference; topk_ae is topk_ae_bin (conf/method/topk_ae.yaml),
    timed under that name."""
    return sorted(p.stem for p in (CONF / "method").glob("*.yaml") if p.stem not in ("erm", "topk_ae"))


def measure_methods(args, results: dict[str, Any], tmp: Path) -> None:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    base = [f"encoder={args.encoder}", "+experiment=snips_slot_context", f"paths.cache_dir={REPO / 'outputs' / 'cache'}"]
    cfg = compose_config(tmp, base)
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    parts = prepare(cfg)
    corpus, datamodule, erm = parts.corpus, parts.datamodule, parts.module
    datamodule.setup("fit")
    n_batches = args.warmup + args.method_steps + 1
    sampler = iter(datamodule.train_dataloader().batch_sampler)
    collate = Collator(datamodule.tokenizer.pad_token_id)
    batches = [collate([datamodule.datasets["train"][i] for i in next(sampler)]) for _ in range(n_batches)]
    encoder, initial = erm.model.encoder, erm.model.state_dict()

    modules = {}
    for name in ["erm", *methods()]:
        method_cfg = compose_config(tmp, [*base, f"method={name}"])
        pl.seed_everything(cfg.seed, workers=True, verbose=False)
        module = SLUModule.from_config(method_cfg, datamodule.vocab, corpus.intents(), copy.deepcopy(encoder))
        module.model.load_state_dict(initial)
        module.objective.setup(datamodule, module.model)  # LDA, P-DRO pre-training: not timed
        modules[name] = module
    clip = float(cfg.trainer.gradient_clip_val)
    if device.type == "cpu":
        wait_for_quiet(args.max_wait)
    seconds = lockstep(modules, batches, args.warmup, clip, device)
    results["method_step_seconds"] = seconds
    for name in methods():
        per_step = [m / e for m, e in zip(seconds[name], seconds["erm"], strict=True)]
        results["ratios"][f"step_time_{name}"] = statistics.median(per_step)
    print("  median step time: " + ", ".join(f"{n} {statistics.median(t):.3f} s" for n, t in seconds.items()), flush=True)


def lockstep(modules: dict[str, SLUModule], batches, warmup: int, clip: float, device) -> dict[str, list[float]]:
    """Train every module one step per batch, in rotated order; each module's step times after
    ``warmup`` steps, in seconds."""
    trainers = {}
    for name, module in modules.items():
        module.to(device).train()
        optimizer, scheduler = configured_optimizer(module, len(batches))
        trainers[name] = (module, optimizer, scheduler, [p for g in optimizer.param_groups for p in g["params"]])
    names = list(modules)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for step, batch in enumerate(batches):
        batch = _to(batch, device)
        for name in names[step % len(names):] + names[: step % len(names)]:
            pl.seed_everything(step, verbose=False)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            started = time.perf_counter()
            plain_step(*trainers[name], batch, clip)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if step >= warmup:
                seconds[name].append(time.perf_counter() - started)
    return seconds
