"""Training precision: ``trainer.precision: auto`` resolved once (`resolve_precision`), and the
fp32 region (`fp32`) where the losses, the CRF, the objective and the decoding run.

``auto`` is Lightning's ``bf16-mixed`` (bf16 autocast of the matrix products, fp32 weights,
gradients and optimizer state) where the device computes bf16 natively, and ``32-true``
elsewhere:

- CUDA: compute capability 8.0 and later (Ampere; ``torch.cuda.is_bf16_supported`` without
  emulation: by default it also says yes on older GPUs, which run bf16 emulated, slower than fp32);
- CPU: AVX-512 BF16 or AMX tiles (``torch.cpu._is_avx512_bf16_supported`` /
  ``_is_amx_tile_supported``; Zen 4, Sapphire Rapids and later). Without them torch emulates
  bf16 products on the CPU, slower than fp32.

Under autocast on the CPU, torch keeps ``log_softmax`` and ``logsumexp`` in bf16 (8 bits of
mantissa); `fp32` turns autocast off and the heads' logits are cast to float32 before any loss,
CRF or decoding, so only the encoder and the heads' matrix products run in bf16.
"""

from __future__ import annotations

import contextlib

import torch

AUTO = "auto"
BF16 = "bf16-mixed"
FP32 = "32-true"


def cpu_supports_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively (AVX-512 BF16 or AMX)."""
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in probes)


def resolve_precision(precision: str | int, accelerator: str = "auto") -> str | int:
    """``trainer.precision`` as Lightning takes it: ``auto`` → ``bf16-mixed`` where the device
    that ``accelerator`` picks supports bf16, else ``32-true``; any other value as given."""
    if precision != AUTO:
        return precision
    accelerator = str(accelerator)
    on_gpu = accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())
    if on_gpu:
        return BF16 if torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False) else FP32
    if accelerator in ("cpu", "auto"):
        return BF16 if cpu_supports_bf16() else FP32
    return FP32  # mps, tpu, ...: not measured here


def fp32(device: torch.device):
    """A region without autocast (on ``device``'s type): its computations run in the dtypes of
    their inputs, float32 for the casted logits."""
    if device.type not in ("cpu", "cuda"):
        return contextlib.nullcontext()
    return torch.autocast(device.type, enabled=False)
