"""``trainer.precision: auto`` (robustnlu/precision.py): bf16-mixed where the device supports
bf16, float32 elsewhere; under bf16 autocast the encoder computes in bf16 while the task losses,
the encoding the objective sees and the objective's loss stay float32."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import pytorch_lightning as pl
import torch

from integration_helpers import FAST, compose_config, jsonl_overrides, write_snips_sample_jsonl
from robustnlu.precision import BF16, FP32, resolve_precision
from robustnlu.train import build_trainer, prepare


def cpu_flags() -> set[str]:
    """The CPU's feature flags as the kernel lists them (independent of torch's probes)."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def test_auto_is_bf16_exactly_where_the_cpu_multiplies_bf16():
    expected = BF16 if cpu_flags() & {"avx512_bf16", "amx_bf16"} else FP32
    assert resolve_precision("auto", "cpu") == expected
    if not torch.cuda.is_available():
        assert resolve_precision("auto", "auto") == expected


def test_explicit_values_pass_through_and_other_accelerators_get_fp32():
    for value in ("32-true", "bf16-mixed", "16-mixed", 32):
        assert resolve_precision(value, "cpu") == value
    assert resolve_precision("auto", "mps") == FP32


def stand_in_devices(monkeypatch, gpu_major: int | None, cpu_bf16: bool) -> None:
    """Hardware this machine may lack, stood in for by torch's device queries (torch's own
    `torch.cuda.is_bf16_supported` then runs on them): a CUDA GPU of compute capability
    ``gpu_major``.0 (None: no GPU) on which a bf16 tensor can be made, natively from 8.0 on and
    emulated before (as on a V100 or T4), and a CPU that multiplies bf16 natively or not."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu_major is not None)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: SimpleNamespace(major=gpu_major, minor=0))
    monkeypatch.setattr(torch.cuda, "_check_bf16_tensor_supported", lambda device: True)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: cpu_bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)


@pytest.mark.skipif(torch.version.hip is not None, reason="ROCm: torch says bf16 on every AMD GPU")
@pytest.mark.parametrize(("accelerator", "gpu_major", "cpu_bf16", "expected"), [
    ("gpu", 7, True, FP32),    # a V100 / T4: bf16 only emulated, slower than fp32 (the CPU's bf16 is not used)
    ("auto", 7, True, FP32),   # auto picks the GPU when there is one
    ("gpu", 8, False, BF16),   # an A100
    ("auto", 9, False, BF16),  # an H100
    ("cpu", 8, False, FP32),   # trains on the CPU: the CPU's support counts, not the GPU's
    ("cpu", 7, True, BF16),
    ("auto", None, True, BF16),
    ("auto", None, False, FP32),
])
def test_auto_is_bf16_where_the_training_device_computes_it_natively(accelerator, gpu_major, cpu_bf16, expected,
                                                                       monkeypatch):
    stand_in_devices(monkeypatch, gpu_major, cpu_bf16)
    assert resolve_precision("auto", accelerator) == expected


def test_build_trainer_resolves_auto(tmp_path):
    cfg = compose_config(["encoder=tiny", "trainer.accelerator=cpu"], tmp_path)
    assert cfg.trainer.precision == "auto"
    assert build_trainer(cfg).precision == resolve_precision("auto", "cpu")


class DtypeProbe(pl.Callback):
    """Records the dtypes of an encoder matrix product, the objective's inputs and its loss."""

    def __init__(self):
        self.seen: dict[str, set[torch.dtype]] = {"linear": set(), "slot": set(), "intent": set(), "x_enc": set(),
                                                   "loss": set()}

    def on_fit_start(self, trainer, pl_module):
        self.device = pl_module.device.type  # where it trains (Lightning moves it back to the CPU at the end)
        first_linear = next(m for m in pl_module.model.encoder.modules() if isinstance(m, torch.nn.Linear))
        first_linear.register_forward_hook(lambda m, args, out: self.seen["linear"].add(out.dtype))

        def objective_hook(m, args, out):
            (step,) = args
            for key in ("slot", "intent", "x_enc"):
                self.seen[key].add(getattr(step, key).dtype)
            self.seen["loss"].add(out.dtype)

        pl_module.objective.register_forward_hook(objective_hook)


def fit_one_epoch(tmp_path, overrides: list[str], probe: pl.Callback, accelerator: str = "cpu"):
    """One epoch (4 steps) on a 64-utterance SNIPS sample with ``probe`` among the callbacks."""
    sample = write_snips_sample_jsonl(tmp_path / "data", n_train=64, n_eval=16)
    cfg = compose_config([*FAST, *jsonl_overrides(sample), "trainer.max_epochs=1", f"trainer.accelerator={accelerator}",
                          f"paths.cache_dir={tmp_path / 'cache'}", *overrides], tmp_path / "run")
    pl.seed_everything(0, verbose=False)
    parts = prepare(cfg)
    trainer = build_trainer(cfg)
    trainer.callbacks.append(probe)
    trainer.fit(parts.module, datamodule=parts.datamodule)
    return trainer, parts


@pytest.mark.parametrize("crf", [False, True])
def test_bf16_mixed_keeps_losses_and_objective_in_fp32(crf, tmp_path):
    probe = DtypeProbe()
    trainer, parts = fit_one_epoch(tmp_path, ["trainer.precision=bf16-mixed", "method=topk",
                                              f"model.crf={str(crf).lower()}"], probe)
    assert trainer.precision == BF16 and trainer.global_step == 4
    assert probe.seen["linear"] == {torch.bfloat16}  # autocast was on in the encoder
    for key in ("slot", "intent", "x_enc", "loss"):
        assert probe.seen[key] == {torch.float32}, key
    assert all(torch.isfinite(p).all() and p.dtype == torch.float32 for p in parts.module.parameters())


class GradNormProbe(pl.Callback):
    """The model's gradient norm as the optimiser stepped with it: read before the next step's
    zero_grad, so after Lightning's clipping; and whether the optimiser was the fused kernel."""

    def __init__(self):
        self.norms: list[float] = []
        self.fused: set[bool] = set()
        self.devices: set[str] = set()

    def on_before_zero_grad(self, trainer, pl_module, optimizer):
        self.fused |= {bool(g.get("fused")) for g in optimizer.param_groups}
        self.devices.add(pl_module.device.type)
        grads = [p.grad for p in pl_module.model.parameters() if p.grad is not None]
        if grads:
            self.norms.append(float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))))


@pytest.mark.parametrize("precision", [FP32, BF16])
def test_gradients_are_clipped_for_the_fused_adamw_in_every_precision(precision, tmp_path):
    """Lightning's mixed-precision plugin alone refuses to clip for an optimiser that unscales its own
    gradients (the fused AdamW); SLUModule.configure_gradient_clipping clips them in both precisions."""
    clip = 0.01  # far below the tiny encoder's gradient norms: every step is clipped
    probe = GradNormProbe()
    trainer, _ = fit_one_epoch(tmp_path, [f"trainer.precision={precision}", f"trainer.gradient_clip_val={clip}",
                                          "optimizer.fused=true"], probe)
    assert trainer.global_step == 4 and probe.fused == {True}
    assert len(probe.norms) >= 3 and all(n == pytest.approx(clip, rel=1e-3) for n in probe.norms), probe.norms


# --- on a CUDA device (`make test-gpu`) ---------------------------------------------------------

@pytest.mark.gpu
def test_auto_is_bf16_mixed_on_an_ampere_or_later_gpu_and_keeps_the_objective_in_fp32(tmp_path):
    """bf16 tensor cores came with compute capability 8.0 (Ampere): the expectation is read from the
    device's capability, not from the torch probe `resolve_precision` uses."""
    probe = DtypeProbe()
    trainer, parts = fit_one_epoch(tmp_path, ["trainer.precision=auto", "method=topk"], probe, accelerator="gpu")
    bf16 = torch.cuda.get_device_capability() >= (8, 0)
    assert trainer.precision == (BF16 if bf16 else FP32) and trainer.global_step == 4
    assert probe.seen["linear"] == {torch.bfloat16 if bf16 else torch.float32}
    for key in ("slot", "intent", "x_enc", "loss"):
        assert probe.seen[key] == {torch.float32}, key
    assert probe.device == "cuda" and all(torch.isfinite(p).all() for p in parts.module.parameters())


@pytest.mark.gpu
@pytest.mark.parametrize("precision", [FP32, BF16, "16-mixed"])
def test_gradients_are_clipped_for_the_fused_adamw_on_cuda(precision, tmp_path):
    """On CUDA the fused AdamW is the default (``fused: auto``); under fp16 Lightning's gradient scaler
    scales the gradients, and `configure_gradient_clipping` must unscale them before clipping: the
    optimiser then steps with the clip value's norm, not ``scale`` times it. A step whose scaled
    gradients overflowed is skipped by the scaler (its norm is not finite) and not counted."""
    clip = 0.01
    probe = GradNormProbe()
    trainer, parts = fit_one_epoch(tmp_path, [f"trainer.precision={precision}", f"trainer.gradient_clip_val={clip}"],
                                   probe, accelerator="gpu")
    assert trainer.global_step == 4 and probe.fused == {True} and probe.devices == {"cuda"}
    finite = [n for n in probe.norms if math.isfinite(n)]
    assert len(finite) >= (1 if precision == "16-mixed" else 3), probe.norms
    assert all(n == pytest.approx(clip, rel=1e-3) for n in finite), probe.norms
    assert all(torch.isfinite(p).all() for p in parts.module.model.parameters())
