"""The device calls of one lease as one device check: ``python -m bench.device_merge CALL1.json CALL2.json
--out MERGED.json`` (bench/DEVICE.md, "After the calls").

A lease runs the check in calls (`bench.device_check.CALLS`, ``--call N``), each with setup and its
own stages; each call writes its own ``device_check.json``. The merged record holds, per stage, the
results of the last call that ran it (not skipped: a rerun replaces an earlier try), its status with
the call's number, and each call's command, times and environment under ``calls``; budget and wall
time are the calls' sums, and the summary is computed afresh from the merged stages (`summary`), so
the throughput that one call measured and the compilation or the CLI run of another are read
together, as `bench.gpu_readme` reads one run. Calls measured on different GPUs or torch versions
are not one record: refused with an ``error:`` line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.device_check import STAGES, link_compile_to_throughput, summary

#: the keys of a call's JSON that a stage writes, beyond its own name
STAGE_KEYS = {"setup": ("setup", "environment")}


class MergeError(ValueError):
    """Calls that do not make one record."""


def identity(results: dict[str, Any]) -> tuple[Any, ...]:
    """What must be the same in every call of one record: the mode, the GPU and torch's version."""
    env = results.get("environment", {})
    return results.get("mode"), env.get("gpu"), env.get("versions", {}).get("torch")


def merge(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """One device check's results from its calls' results, in call order (module docstring)."""
    if len(calls) < 2:
        raise MergeError(f"merging needs the JSON of two calls or more, got {len(calls)}")
    first = calls[0]
    for n, call in enumerate(calls[1:], start=2):
        if identity(call) != identity(first):
            raise MergeError(f"call {n} ran on {identity(call)}, call 1 on {identity(first)} (mode, GPU, torch): "
                             "not one record")
    merged: dict[str, Any] = {"schema": first["schema"], "mode": first["mode"], "started": first["started"],
                              "finished": calls[-1].get("finished"),
                              "budget_s": sum(c["budget_s"] for c in calls), "wall_s": sum(c["wall_s"] for c in calls),
                              "command": " && ".join(c["command"] for c in calls),
                              "encoder_weights": first["encoder_weights"], "stages": {},
                              "calls": [{"command": c["command"], "started": c["started"], "budget_s": c["budget_s"],
                                         "wall_s": c["wall_s"], "environment": c.get("environment"),
                                         "ran": [s for s, v in c["stages"].items() if v["status"] != "skipped"]}
                                        for c in calls]}
    for name in STAGES:
        ran = [(n, c) for n, c in enumerate(calls, start=1) if c["stages"].get(name, {}).get("status", "skipped") != "skipped"]
        if not ran:
            merged["stages"][name] = calls[-1]["stages"].get(name, {"status": "skipped", "reason": "in no call"})
            continue
        n, call = ran[-1]
        merged["stages"][name] = {**call["stages"][name], "call": n}
        for key in STAGE_KEYS.get(name, (name,)):
            if key in call:
                merged[key] = call[key]
    link_compile_to_throughput(merged)
    merged["summary"] = summary(merged)
    return merged


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.device_merge", description=__doc__.split("\n\n")[0])
    parser.add_argument("calls", nargs="+", type=Path, help="each call's device_check.json, in call order")
    parser.add_argument("--out", type=Path, required=True, help="the merged JSON to write")
    args = parser.parse_args(argv)
    try:
        calls = []
        for path in args.calls:
            try:
                calls.append(json.loads(path.read_text()))
            except (OSError, ValueError) as err:
                raise MergeError(f"{path}: not a device check's JSON ({type(err).__name__}: {err})") from None
        merged = merge(calls)
    except MergeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    args.out.write_text(json.dumps(merged, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
