"""What the SNIPS grid costs on one GPU, projected from a device check (`bench.device_check`'s
``summary["grid"]``), for the README's "On a GPU".

The grid: the core paper's DRO comparison over every SeqDrift scenario of SNIPS (`plan.scenarios`:
slot value and slot context x full and partial drift x i.i.d. and o.o.d. validation, 8), ERM and the
three TopK methods (`plan.E_METHODS`), seeds 0 and 1 (`plan.SEEDS`): 64 runs.

- An epoch's time: the CLI stage's (the user's command, MiniLM's architecture, training and
  validation), the median over its epochs. BERT-base's is that times MiniLM's training examples/s
  over BERT-base's at batch 32 (the throughput stage, our loop): an estimate that scales validation
  as training.
- Epochs per run: the paper trains up to `paper_results.MAX_EPOCHS` with early stopping (Table 9),
  so at most that many; and as many as Part E's committed runs took to their plateau (their mean,
  at most `plan.PLATEAU_EPOCHS`), what a run at the paper's budget trains if it stops as early.
- Packed: MiniLM's, divided by the best aggregate speed-up of K runs at once on the GPU (the packing
  stage measures MiniLM's architecture; BERT-base's larger kernels would gain less).

Only where the CLI stage trained whole epochs (the GPU plan); the CPU plan's epochs are cut to a few
batches, and the projection says so in place of numbers.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from robustnlu.paths import PROJECT_DIR
from robustnlu.rundir import RunDir
from robustnlu.studies.seqdrift_dro import paper_results, plan


def part_e_mean_epochs(records: Path = PROJECT_DIR / plan.RECORDS) -> tuple[float, int] | None:
    """The mean ``epochs_trained`` of Part E's committed records and how many there are; None
    without any."""
    part_e = plan.report_design(records).parts["E"]
    epochs = [RunDir(records / name).results()["epochs_trained"] for name in part_e
              if (records / name / "results.json").is_file()]
    return (statistics.mean(epochs), len(epochs)) if epochs else None


def grid_projection(summary: dict[str, Any], cut_epochs: bool,
                    records: Path = PROJECT_DIR / plan.RECORDS) -> dict[str, Any]:
    """The grid's GPU-hours from a device check's ``summary`` (its ``cli_epoch_s``, ``throughput``,
    ``packing``); ``cut_epochs``: the CLI run's epochs were cut short (no projection then)."""
    runs = len(plan.scenarios("snips")) * len(plan.E_METHODS) * len(plan.SEEDS)
    out: dict[str, Any] = {"runs": runs}
    if cut_epochs or not summary.get("cli_epoch_s"):
        return {**out, "reason": "the CLI run's epochs were cut to a few batches" if cut_epochs
                else "the CLI stage measured no epoch"}
    epoch_s = {"minilm": statistics.median(summary["cli_epoch_s"])}
    minilm, bert = (summary["throughput"].get(f"{arch}_b32", {}).get("ours_examples_per_s")
                    for arch in ("minilm", "bert_base"))
    if minilm and bert:
        epoch_s["bert_base"] = epoch_s["minilm"] * minilm / bert
    epochs = {"paper_max": paper_results.MAX_EPOCHS}
    mean = part_e_mean_epochs(records)
    if mean:
        epochs["part_e_mean"], out["part_e_records"] = mean
    speedups = [(int(k[1:]), row["speedup_vs_k1"]) for k, row in summary["packing"].items()
                if row.get("speedup_vs_k1")]
    best_k, speedup = max(speedups, key=lambda pair: pair[1], default=(1, 1.0))
    out |= {"epoch_s": epoch_s, "epochs": epochs, "packing_k": best_k, "packing_speedup": speedup,
            "gpu_hours": {arch: {name: runs * n * s / 3600 for name, n in epochs.items()}
                          for arch, s in epoch_s.items()}}
    out["gpu_hours_packed"] = {"minilm": {name: h / speedup for name, h in out["gpu_hours"]["minilm"].items()}}
    return out
