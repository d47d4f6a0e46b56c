"""Lightning's checkpoint I/O for a training run (`AtomicCheckpointIO`): its own loads (a resumed
fit, validate and test of the best checkpoint) with ``weights_only=True`` as
`robustnlu.checkpoint.read_checkpoint` loads, and its saves written to a temporary file that is
renamed, so that a kill or a full disk leaves the previous complete checkpoint, never a truncated
one under the final name. Apart from `robustnlu.checkpoint` because it imports Lightning."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint I/O for local files: saved whole to ``.<name>.<pid>.tmp`` beside the
    target, flushed to disk and renamed over it (a failed save removes the temporary file and
    raises the `OSError`, e.g. ENOSPC, leaving the previous checkpoint); loaded with
    ``weights_only=True``."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any = None) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO takes no storage_options")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()  # serialised first: a write error is then an OSError, not torch's zip writer's
        torch.save(checkpoint, buffer)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as file:
                file.write(buffer.getbuffer())
                file.flush()
                os.fsync(file.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def load_checkpoint(self, path: str | Path, map_location: Any = None, weights_only: bool | None = None) -> dict[str, Any]:
        where = {} if map_location is None else {"map_location": map_location}  # None: Lightning's default
        return super().load_checkpoint(path, weights_only=True, **where)
