"""``python -m bench.child OUT MODULE [ARGS...]``: run ``python -m MODULE ARGS...`` in this
process and write its peak resident memory to OUT.

The peak is ``VmHWM`` from /proc/self/status: the high-water mark of this process's own address
space, which starts afresh at exec. ``ru_maxrss`` of a child (``os.wait4``) is not usable: Linux
folds the pre-exec address space (a copy of the parent) into it, so a child of a 1.5 GB parent
that uses 11 MB reports 1.5 GB (measured here).
"""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path


def peak_rss_bytes() -> int:
    status = Path("/proc/self/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) * 1024


def main() -> None:
    out, module, *args = sys.argv[1:]
    sys.argv = [module, *args]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        Path(out).write_text(str(peak_rss_bytes()))


if __name__ == "__main__":
    main()
