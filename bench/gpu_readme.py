"""The README's "On a GPU" figures from a device check's JSON (`bench.device_check`), so that what the
README quotes is the committed run's to the digit: ``python -m bench.gpu_readme
bench/results/gpu/<date>-<kind>.json`` prints the section's body (the sentence naming the run, the
throughput table, packing, the CLI run and the grid's cost) to paste under ``### On a GPU``;
tests/test_device_check.py checks the README against the newest committed JSON.

The table's columns are the issue's acceptance figures: examples/s of our loop (Lightning,
bf16-mixed) per architecture and batch size, model FLOPs utilisation against the bf16 matmul rate
measured in the same run, peak GPU memory, and the ratios bf16 ÷ fp32, Lightning ÷ the plain loop,
ours ÷ the JointBERT recipe (float32, padding to 50, eager, a ``.item()`` per step) and compiled ÷
eager (Lightning, length buckets; inductor's default mode, then with CUDA graphs, mode
reduce-overhead; where the compile stage measured that configuration). The
figures are re-summarised from the JSON's runs by the rule its settings call for
(`bench.throughput.summary_rule`: the median of the repeats, or the best one for a run made before
the shape warm-up), which the table's header names.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from bench import device_check
from bench.device_check import compiled_ratio_key, compiled_run, number
from bench.throughput import RULE_LABELS, summary_rule

GIB = 2**30
#: the device check's architectures (`bench.device_check.ARCHS`, the CPU plan's ``tiny``) as the README names them
LABELS = {"minilm": "MiniLM", "bert_base": "BERT-base", "tiny": "tiny"}


#: what the table's rule (`bench.throughput.RULES`) means, said under it
RULE_NOTES = {
    "median": ("Each variant's figure is the median of its repeats; each run stepped once on every shape of its "
               "timed batches before its clock, and the variants' order rotated from repeat to repeat "
               "(`bench/throughput.py`)."),
    "best": ("Each variant's figure is the best of its repeats (timeit's rule), re-summarised from the JSON's runs "
             "(`python -m bench.gpu_readme`): this run predates the shape warm-up (`bench/throughput.py`), its "
             "variants ran in a fixed order, and the first of each configuration ({first}) paid the first use of "
             "dynamic padding's new shapes in its first repeat; the JSON's own summary, the median of its {repeats} repeats, "
             "averaged that in."),
}


def examples_cell(t: dict[str, Any]) -> str:
    """Ours' examples/s, with the range of its repeats where it has several."""
    cell = number(t["ours_examples_per_s"], ",.0f")
    if t["ours_runs"] and t["ours_runs"] > 1:
        cell += f" ({t['ours_min_examples_per_s']:,.0f}–{t['ours_max_examples_per_s']:,.0f})"
    return cell


def compiled_cell(entry: dict[str, Any]) -> str:
    """Compiled ÷ eager in inductor's default mode / with CUDA graphs, "failed" for a mode whose run
    failed; "–" where neither was measured."""
    runs, ratios = entry.get("runs", {}), entry.get("compiled_vs_eager", {})
    cells = ["failed" if "error" in runs.get(compiled_run(mode), {})
             else number(ratios.get(compiled_ratio_key(mode)), ".2f") for mode in ("default", "reduce-overhead")]
    return "–" if set(cells) == {"–"} else " / ".join(cells)


def throughput_rows(headline: dict[str, Any], results: dict[str, Any]) -> list[str]:
    """One markdown row per measured architecture and batch size of ``headline``
    (`bench.throughput.resummarised`)."""
    compiled = {f"{c['arch']}_b{c['batch_size']}": c for c in results.get("compile", {}).get("configs", [])}
    rows = []
    for name, t in headline.items():
        arch, batch = name.rsplit("_b", 1)
        memory = t["peak_memory_bytes"] / GIB if t["peak_memory_bytes"] else None
        rows.append(f"| {LABELS[arch]} | {batch} | {examples_cell(t)} | {number(t['mfu'], '.1%')} | "
                    f"{number(memory, '.2f')} | {number(t['bf16_vs_fp32_lightning'], '.2f')} | "
                    f"{number(t['lightning_vs_plain'], '.2f')} | {number(t['ours_vs_jointbert_recipe'], '.2f')} | "
                    f"{compiled_cell(compiled.get(name, {}))} |")
    return rows


def grid_sentence(grid: dict[str, Any] | None) -> str:
    if not grid:
        return "The SNIPS grid's cost: not projected (the check's CLI stage did not run)."
    if "gpu_hours" not in grid:
        return f"The SNIPS grid's cost ({grid['runs']} runs): not projected: {grid['reason']}."
    epochs = grid["epochs"]  # the paper's budget, then Part E's mean where it has records (`grid_projection`)
    at = [f"the paper's budget of {epochs['paper_max']} epochs"]
    if "part_e_mean" in epochs:
        at.append(f"the {epochs['part_e_mean']:.1f} epochs Part E's {grid['part_e_records']} runs took to their plateau")
    parts = [f"{LABELS[arch]} " + " and ".join(f"{hours[n]:,.1f}" for n in epochs)
             for arch, hours in grid["gpu_hours"].items()]
    packed = " and ".join(f"{grid['gpu_hours_packed']['minilm'][n]:,.1f}" for n in epochs)
    stage = grid.get("cli_stage")
    source = f"; from the CLI run's epochs, measured before its stage {stage['status']}: {stage['error']}" if stage else ""
    return (f"The SNIPS grid ({grid['runs']} runs: 8 scenarios × ERM and the three TopK methods × 2 seeds) on one "
            f"GPU, in GPU-hours at {' and at '.join(at)}: {'; '.join(parts)}; MiniLM with "
            f"{grid['packing_k']} runs per GPU ({grid['packing_speedup']:.2f}× the aggregate of one): {packed} "
            f"(`bench/grid_cost.py`{source}).")


def short_configs(throughput: dict[str, Any]) -> list[str]:
    """Each configuration the stage's time cut short, with its runs per variant."""
    out = []
    for c in throughput.get("configs", []):
        if c.get("incomplete"):
            counts = Counter(r["variant"] for r in c["runs"])
            out.append(f"{LABELS[c['arch']]} at batch {c['batch_size']} ran out of the stage's time ("
                       + ", ".join(f"{name} {n} run{'s' * (n > 1)}" for name, n in counts.items()) + ").")
    return out


def section(results: dict[str, Any], source: str) -> str:
    """The section's body for the device check ``results`` committed as ``source``; the summary is
    computed afresh from its stages' results (`bench.device_check.summary`), so that a record written
    before a change of the projection reads as a new one."""
    summary = device_check.summary(results)
    headline = summary["throughput"]  # re-summarised by the rule of its settings (`bench.throughput.resummarised`)
    throughput = results.get("throughput") or {"settings": {}, "configs": []}  # none where the stage did not run
    settings = throughput["settings"]
    rule = summary_rule(settings)
    note = " ".join([RULE_NOTES[rule].format(first=next(iter(settings.get("variants", [])), None),
                                             repeats=settings.get("repeats")), *short_configs(throughput)])
    lines = [
        f"Measured by the device check (bench/DEVICE.md) on {summary['device']} (torch {summary['torch']}, "
        f"{results['started'][:10]}; `{source}`), {results['wall_s']:.0f} s in all; the bf16 matmul rate measured "
        f"in the same run: {number(summary['matmul_bf16_tflops'], '.3g')} TFLOP/s. The encoders: "
        f"{results['encoder_weights']}.", "",
        f"| architecture | batch | examples/s (ours: Lightning, bf16-mixed; {RULE_LABELS[rule]}, their range) | MFU "
        "| peak memory (GiB) | bf16 ÷ fp32 | Lightning ÷ plain loop (goal ≥ 0.9) | ours ÷ JointBERT recipe (goal ≥ 3) "
        "| compiled ÷ eager (default / CUDA graphs) |",
        "|---|---|---|---|---|---|---|---|---|",
        *throughput_rows(headline, results), "", *([note, ""] if headline else [])]
    if summary["packing"]:
        lines += ["| runs at once on the GPU | " + " | ".join(k[1:] for k in summary["packing"]) + " |",
                  "|---|" + "---|" * len(summary["packing"]),
                  "| aggregate examples/s | " + " | ".join(f"{v['aggregate_examples_per_s']:,.0f}"
                                                           for v in summary["packing"].values()) + " |",
                  "| × one run | " + " | ".join(number(v["speedup_vs_k1"], ".2f")
                                              for v in summary["packing"].values()) + " |", ""]
    if summary["cli_epoch_s"]:
        lines += [f"The user's command (`{results['cli']['command']}`) trained its epochs in "
                  + ", ".join(f"{s:.1f}" for s in summary["cli_epoch_s"]) + " s.", ""]
    lines.append(grid_sentence(summary.get("grid")))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", type=Path, help="a device check's device_check.json, as committed")
    args = parser.parse_args(argv)
    print(section(json.loads(args.json.read_text()), args.json.as_posix()), end="")


if __name__ == "__main__":
    main()
