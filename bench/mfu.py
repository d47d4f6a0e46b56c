"""Model FLOPs utilisation: the matrix-product FLOPs of a JointBERT training step, counted from the
encoder's dimensions and the batch's padded shape (`step_flops`), over the seconds it took, as a share
of the device's bf16 matrix-product rate measured in the same process (`matmul_rate`).

The count is that of the matrix products the step computes on its padded shapes (BERT's projections,
attention, feed-forward layers and pooler, the two heads), forward and backward (twice the forward:
the gradients of the inputs and of the weights); embeddings, normalisation, softmax, losses and the
optimizer are not counted. ``tests/test_device_check.py`` checks it against PyTorch's FlopCounterMode.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping
from typing import Any

import torch


def step_flops(config: Any, batch_size: int, seq_len: int, n_words: int, n_intents: int, n_tags: int) -> float:
    """Matrix-product FLOPs of one training step (forward + backward) of JointBERT over the encoder of
    Hugging Face config ``config`` on a batch of ``batch_size`` utterances padded to ``seq_len`` tokens
    and ``n_words`` words."""
    b, s, h = batch_size, seq_len, config.hidden_size
    per_layer = 2 * b * s * (4 * h * h + 2 * h * config.intermediate_size)  # Q, K, V, output; feed-forward
    per_layer += 2 * 2 * b * s * s * h  # attention scores Q·Kᵀ and their weighted sum of V
    forward = config.num_hidden_layers * per_layer
    forward += 2 * b * h * h + 2 * b * h * n_intents + 2 * b * n_words * h * n_tags  # pooler, intent, slot heads
    return 3.0 * forward


def batch_flops(config: Any, batch: Mapping[str, torch.Tensor], n_intents: int, n_tags: int) -> float:
    b, s = batch["input_ids"].shape
    return step_flops(config, b, s, batch["word_index"].size(1), n_intents, n_tags)


def matmul_rate(device: torch.device, n: int, repeats: int = 20, warmup: int = 5) -> dict[str, Any]:
    """FLOP/s of an ``n``×``n``×``n`` bf16 matrix product on ``device``: the median of ``repeats``
    timed products (CUDA events on a GPU) after ``warmup`` untimed ones, on random data; a corner of
    the product is checked against a float32 reference first."""
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16, generator=gen)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16, generator=gen)
    c = a @ b
    corner = min(n, 64)
    reference = a[:corner].float() @ b[:, :corner].float()
    error = float((c[:corner, :corner].float() - reference).norm() / reference.norm())
    if not error < 1e-2:
        raise RuntimeError(f"the bf16 product is wrong: relative error {error:.2e} against float32")
    for _ in range(warmup):
        torch.matmul(a, b, out=c)
    seconds = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.matmul(a, b, out=c)
            end.record()
            end.synchronize()
            seconds.append(start.elapsed_time(end) / 1e3)
        else:
            started = time.perf_counter()
            torch.matmul(a, b, out=c)
            seconds.append(time.perf_counter() - started)
    median = statistics.median(seconds)
    return {"n": n, "dtype": "bfloat16", "repeats": repeats, "warmup": warmup, "median_s": median,
            "min_s": min(seconds), "max_s": max(seconds), "flops_per_s": 2.0 * n**3 / median,
            "relative_error_vs_fp32": error}
