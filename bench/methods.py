"""Numbers (i)-(r): each training objective's step time ÷ ERM's, measured side by side.

Every method of ``conf/method/`` trains the same initial JointBERT (embedded encoder) on the
same pre-collated batches of the SeqDrift slot context split of SNIPS (the headline experiment,
so the group methods have their clusters), with the plain loop of (a) (forward → objective →
backward → clip → step; the objective's own updates happen inside it). Runs alternate over the
methods ``repeats`` times; the ratio is median ERM examples/s ÷ median method examples/s. The
objective's one-off set-up (LDA topics, P-DRO's adversary pre-training) is not part of a step.
"""

from __future__ import annotations

import copy
import gc
import statistics
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch

from bench.contention import CONTENTION_CPUS, wait_for_quiet
from bench.loops import run_plain
from bench.workload import CONF, REPO, compose_config
from robustnlu.cli import repo_root
from robustnlu.data.datamodule import Collator, SLUDataModule
from robustnlu.data.readers import load_corpus
from robustnlu.model.encoders import build_encoder, load_tokenizer
from robustnlu.module import SLUModule
from robustnlu.seqdrift.pipeline import make_drift_split

def methods() -> list[str]:
    return sorted(p.stem for p in (CONF / "method").glob("*.yaml") if p.stem != "erm")


def measure_methods(args, results: dict[str, Any], tmp: Path) -> None:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    base = [f"encoder={args.encoder}", "+experiment=snips_slot_context", f"paths.cache_dir={REPO / 'outputs' / 'cache'}"]
    cfg = compose_config(tmp, base)
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    corpus = load_corpus(cfg.dataset, repo_root(cfg))
    split = make_drift_split(corpus, cfg.drift, cfg.validation, cfg.paths.cache_dir)
    corpus = split.apply(corpus)
    vocab, tokenizer = corpus.vocab(), load_tokenizer(cfg.encoder)
    datamodule = SLUDataModule(corpus, tokenizer, vocab, seed=cfg.seed, groups=split.groups(), **cfg.data)
    datamodule.setup("fit")
    n_batches = args.warmup + args.method_steps + 1
    sampler = iter(datamodule.train_dataloader().batch_sampler)
    collate = Collator(tokenizer.pad_token_id)
    batches = [collate([datamodule.datasets["train"][i] for i in next(sampler)]) for _ in range(n_batches)]
    encoder = build_encoder(cfg.encoder, vocab_size=len(tokenizer))
    initial = SLUModule.from_config(cfg, vocab, corpus.intents(), encoder).model.state_dict()

    modules = {}
    for name in ["erm", *methods()]:
        method_cfg = compose_config(tmp, [*base, f"method={name}"])
        pl.seed_everything(cfg.seed, workers=True, verbose=False)
        module = SLUModule.from_config(method_cfg, vocab, corpus.intents(), copy.deepcopy(encoder))
        module.model.load_state_dict(initial)
        module.objective.setup(datamodule, module.model)  # LDA, P-DRO pre-training: not timed
        modules[name] = module
    clip = float(cfg.trainer.gradient_clip_val)

    runs: list[dict[str, Any]] = []
    for repeat in range(args.repeats):
        for name, module in modules.items():
            if device.type == "cpu":
                wait_for_quiet(args.max_wait)
            pl.seed_everything(cfg.seed, verbose=False)
            trained = copy.deepcopy(module)
            timing = run_plain(trained, batches, args.warmup, clip, device, "dynamic")
            del trained
            gc.collect()
            runs.append({"method": name, "repeat": repeat, **timing.to_dict()})
            print(f"  [{name:13s} {repeat + 1}/{args.repeats}] {timing.examples_per_s:7.1f} ex/s "
                  f"(others busy {timing.others_busy if timing.others_busy is not None else float('nan'):.2f} CPUs)",
                  flush=True)

    def median(name: str) -> float:
        return statistics.median(r["examples_per_s"] for r in runs if r["method"] == name)

    results["method_runs"] = runs
    results["method_contended"] = any((r["others_busy"] or 0) > CONTENTION_CPUS for r in runs)
    erm = median("erm")
    for name in methods():
        results["ratios"][f"step_time_{name}"] = erm / median(name)
