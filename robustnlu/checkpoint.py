"""Reading a robustnlu checkpoint (``checkpoints/*.ckpt`` of a training run). One function for
every reader (``python -m robustnlu.predict``, ``robustnlu.evaluate``, ``efficiency.init_from``,
``resume=true``): a file that is not a readable robustnlu checkpoint — text, JSON, empty,
truncated, another program's torch file, a checkpoint of another format — raises a `DataError`
naming the file and what is wrong (one ``error:`` line, exit 2) instead of a torch traceback.

Checkpoints are loaded with ``weights_only=True``: no pickled code runs, and a file holding
objects other than tensors and plain containers is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from robustnlu.errors import DataError

#: the layout of the checkpoints this robustnlu writes and reads, stored in each under
#: `FORMAT_KEY`; checkpoints written before the key existed have this same layout, format 1
CHECKPOINT_FORMAT = 1
FORMAT_KEY = "robustnlu_checkpoint_format"
#: the `SLUModule` hyper-parameters every robustnlu checkpoint holds
HYPER_PARAMETERS = ("model", "method", "optimizer", "vocab", "eval_intents", "encoder_spec", "encoder_config")


def first_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}".rstrip(": ")


def read_checkpoint(path: str | Path, mmap: bool = False) -> dict[str, Any]:
    """The contents of the robustnlu checkpoint ``path`` (on the CPU; ``mmap``: memory-mapped,
    for reading a few entries of a large file)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(path, None, "no such checkpoint file" if not path.exists() else "not a file, expected a checkpoint")
    if path.stat().st_size == 0:
        raise DataError(path, None, "empty file, not a robustnlu checkpoint")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as err:  # torch.load's many ways to fail on a foreign file (zip, pickle, EOF, ...)
        raise DataError(path, None, "not a readable robustnlu checkpoint (not a torch file, truncated, or holding "
                                    f"objects other than tensors): {first_line(err)}") from None
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("state_dict"), dict) \
            or not isinstance(ckpt.get("hyper_parameters"), dict):
        raise DataError(path, None, "not a robustnlu checkpoint: a torch file without a training run's state_dict and "
                                    "hyper_parameters")
    found = ckpt.get(FORMAT_KEY, 1)
    if found != CHECKPOINT_FORMAT:
        raise DataError(path, None, f"a robustnlu checkpoint of format {found}; this robustnlu reads format "
                                    f"{CHECKPOINT_FORMAT} (use the robustnlu version that wrote it)")
    missing = [k for k in HYPER_PARAMETERS if k not in ckpt["hyper_parameters"]]
    if missing:
        raise DataError(path, None, f"not a robustnlu checkpoint: its hyper_parameters lack {', '.join(missing)} "
                                    "(another program's Lightning checkpoint?)")
    return ckpt
