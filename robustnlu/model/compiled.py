"""``trainer.compile``: JointBERT's forward pass in training through ``torch.compile`` with static
shapes (``dynamic=False``), one graph per batch shape: the batches come in few shapes where the
collator pads them to length buckets (``data.pad_to_multiple_of``, `robustnlu.data.collate.Collator`).

The forward method is compiled, not the module: no ``torch._dynamo`` wrapper module sits in the
model, so state-dict keys (checkpoints) are those of the uncompiled model. The objective, the
losses and the CRF's decoding stay eager."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch._dynamo
from torch import nn

#: ``trainer.compile.mode``: inductor's modes (reduce-overhead: CUDA graphs, for a step bound by
#: kernel launches)
MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
#: ``trainer.compile.backend``: inductor generates kernels; aot_eager and eager capture the graphs
#: without generating code (what the CPU tests and the CPU device check use: inductor's code
#: generation takes minutes there)
BACKENDS = ("inductor", "aot_eager", "eager")


def compiled_forward(model: nn.Module, mode: str, backend: str, shape_count: int | None = None) -> Callable:
    """``model.forward`` through ``torch.compile(dynamic=False)``; ``mode`` applies to inductor
    (other backends ignore it, with a warning, so it is not passed to them). ``shape_count``: the
    most batch shapes training can see (`Collator.shape_count`); dynamo's limit of graphs per
    function (8 by default; past it a new shape runs eager) is raised to twice it, for an epoch's
    last, smaller batch."""
    if shape_count is not None:
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 2 * shape_count)
    return torch.compile(model.forward, dynamic=False, backend=backend, mode=mode if backend == "inductor" else None)
