"""Is anything else using the CPUs? On a small machine another process taking one core makes a
2-thread torch step several times slower (a parallel region waits for its descheduled thread),
so every timed run records how busy the rest of the machine was, and the bench repeats runs
that were disturbed."""

from __future__ import annotations

import os
import time
from pathlib import Path

#: CPUs kept busy by other processes above which a timed run counts as disturbed
CONTENTION_CPUS = 0.25


def system_busy_seconds() -> float | None:
    """CPU seconds all processes have used since boot, plus time the hypervisor stole from this
    machine (Linux ``/proc/stat``); None elsewhere."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def others_busy_now(window_s: float = 0.5) -> float | None:
    """CPUs that processes other than this one kept busy over the next ``window_s`` seconds."""
    before, cpu_before, t0 = system_busy_seconds(), time.process_time(), time.perf_counter()
    time.sleep(window_s)
    after, cpu_after, t1 = system_busy_seconds(), time.process_time(), time.perf_counter()
    if before is None or after is None:
        return None
    return max(0.0, ((after - before) - (cpu_after - cpu_before)) / (t1 - t0))


def wait_for_quiet(max_wait_s: float) -> float:
    """Wait (up to ``max_wait_s``) until other processes leave the CPUs alone; the seconds waited."""
    started = time.perf_counter()
    while time.perf_counter() - started < max_wait_s:
        busy = others_busy_now()
        if busy is None or busy <= CONTENTION_CPUS:
            break
    return time.perf_counter() - started
