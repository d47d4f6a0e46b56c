"""Reading a robustnlu checkpoint (``checkpoints/*.ckpt`` of a training run). One function for
every reader (``python -m robustnlu.predict``, ``robustnlu.evaluate``, ``efficiency.init_from``,
``resume=true``): a file that is not a readable robustnlu checkpoint — text, JSON, empty,
truncated, another program's torch file, a checkpoint of another format — raises a `DataError`
naming the file and what is wrong (one ``error:`` line, exit 2) instead of a torch traceback.

Checkpoints are loaded with ``weights_only=True``: no pickled code runs, and a file holding
objects other than tensors and plain containers is refused. Lightning's own loads and saves go
through `robustnlu.checkpoint_io.AtomicCheckpointIO`, which loads the same way; this module
imports no Lightning, so that prediction does not load the training stack."""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch

from robustnlu.errors import DataError, first_line

#: the layout of the checkpoints this robustnlu writes, stored in each under `FORMAT_KEY`
#: (checkpoints written before the key existed: format 1). Format 2 (2026-11-24): the group sources'
#: classes moved from ``robustnlu.adversary`` to ``robustnlu.groups``, TopK-AE's autoencoder from
#: ``method.adversary`` to ``method.groups``, and the ``optimizer`` node names its factory
#: (``_target_``); `read_checkpoint` reads format 1 through `upgrade_format_1`.
CHECKPOINT_FORMAT = 2
FORMAT_KEY = "robustnlu_checkpoint_format"
#: format 1's class paths of the group sources → format 2's
MOVED_TARGETS = {
    "robustnlu.adversary.autoencoder.OnlineAutoencoder": "robustnlu.groups.autoencoder.OnlineAutoencoder",
    "robustnlu.adversary.lda_topics.LDATopics": "robustnlu.groups.lda_topics.LDATopics",
    "robustnlu.adversary.groups.SeqDriftClusters": "robustnlu.groups.seqdrift_clusters.SeqDriftClusters",
}
#: the factory of each ``optimizer.name`` (conf/optimizer/), for format-1 nodes without ``_target_``
OPTIMIZER_TARGETS = {"adamw": "robustnlu.optim.adamw.adamw", "conatural": "robustnlu.optim.conatural.conatural_sgd"}
#: the `SLUModule` hyper-parameters every robustnlu checkpoint holds
HYPER_PARAMETERS = ("model", "method", "optimizer", "vocab", "eval_intents", "encoder_spec", "encoder_config")


def _moved(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: MOVED_TARGETS.get(v, v) if k == "_target_" else _moved(v) for k, v in node.items()}
    return [_moved(v) for v in node] if isinstance(node, list) else node


def upgrade_format_1(hyper_parameters: dict[str, Any]) -> dict[str, Any]:
    """Format 1's hyper-parameters in format 2's layout (see `CHECKPOINT_FORMAT`). It reads what the
    nodes hold, not the format number alone: checkpoints written between the move and the format
    bump say format 1 and are already laid out as format 2, and pass unchanged."""
    method, optimizer = _moved(hyper_parameters["method"]), hyper_parameters["optimizer"]
    if not isinstance(method, dict) or not isinstance(optimizer, dict):  # not a model's: left to the reader
        return hyper_parameters
    if method.get("_target_") == "robustnlu.robust.topk_ae.TopKAE" and "adversary" in method:
        method["groups"] = method.pop("adversary")
    if "_target_" not in optimizer and optimizer.get("name") in OPTIMIZER_TARGETS:
        optimizer = {"_target_": OPTIMIZER_TARGETS[optimizer["name"]], "_partial_": True, **optimizer}
    return {**hyper_parameters, "method": method, "optimizer": optimizer}


#: the start of the error line for a file torch cannot load as a robustnlu checkpoint
UNREADABLE = "not a readable robustnlu checkpoint"


def read_checkpoint(path: str | Path, mmap: bool = False) -> dict[str, Any]:
    """The contents of the robustnlu checkpoint ``path`` (on the CPU; ``mmap``: memory-mapped,
    for reading a few entries of a large file)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(path, None, "no such checkpoint file" if not path.exists() else "not a file, expected a checkpoint")
    if path.stat().st_size == 0:
        raise DataError(path, None, "empty file, not a robustnlu checkpoint")
    if not zipfile.is_zipfile(path):  # torch.load's own error would be a KeyError, or advice to unpickle it
        raise DataError(path, None, f"{UNREADABLE}: not a whole torch.save file (a zip archive): another kind of file, "
                                    "or one cut short")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError:  # torch's message advises weights_only=False: code from the file would run
        raise DataError(path, None, f"{UNREADABLE}: it holds objects other than tensors, numbers, strings and "
                                    "containers, which are not loaded (torch.load(weights_only=True))") from None
    except Exception as err:  # a damaged archive (zip, pickle, EOF, ...)
        raise DataError(path, None, f"{UNREADABLE}: {first_line(err)}") from None
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("state_dict"), dict) \
            or not isinstance(ckpt.get("hyper_parameters"), dict):
        raise DataError(path, None, "not a robustnlu checkpoint: a torch file without a training run's state_dict and "
                                    "hyper_parameters")
    found = ckpt.get(FORMAT_KEY, 1)
    if found not in (1, CHECKPOINT_FORMAT):
        raise DataError(path, None, f"a robustnlu checkpoint of format {found}; this robustnlu reads formats 1 to "
                                    f"{CHECKPOINT_FORMAT} (use the robustnlu version that wrote it)")
    missing = [k for k in HYPER_PARAMETERS if k not in ckpt["hyper_parameters"]]
    if missing:
        raise DataError(path, None, f"not a robustnlu checkpoint: its hyper_parameters lack {', '.join(missing)} "
                                    "(another program's Lightning checkpoint?)")
    if found == 1:
        ckpt["hyper_parameters"] = upgrade_format_1(ckpt["hyper_parameters"])
    return ckpt
