"""``trainer=ddp``: two CPU processes (gloo) train as one device with the global batch would
(robustnlu/distributed.py). A DDP run is a subprocess: Lightning starts rank 1 by
re-executing the command line, which under pytest would rerun pytest."""

from __future__ import annotations

import csv
import json
import os
import platform
import re
import socket

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from pytorch_lightning.accelerators import CUDAAccelerator, MPSAccelerator, XLAAccelerator

from integration_helpers import FAST, SMALL_DRIFT, compose_config, jsonl_overrides, run_cli, write_snips_sample_jsonl
from robustnlu.data.datamodule import ShuffledBatchSampler
from robustnlu.distributed import check_launch, gather_padded
from robustnlu.hardware import processes_per_node
from robustnlu.errors import ConfigError
from robustnlu.module import STEP_LOSS
from robustnlu.train import run


@pytest.mark.parametrize("bucketed", [False, True])
def test_each_process_gets_its_contiguous_part_of_every_global_batch(bucketed):
    lengths = np.random.default_rng(0).integers(3, 40, size=101).tolist()
    single = list(ShuffledBatchSampler(lengths, 16, seed=4, bucketed=bucketed))
    parts = [list(ShuffledBatchSampler(lengths, 8, seed=4, bucketed=bucketed, num_replicas=2, rank=r)) for r in (0, 1)]
    assert len(parts[0]) == len(parts[1]) == len(single) == 7  # 101 = 6 × 16 + 5
    assert [a + b for a, b in zip(*parts)] == single
    assert sorted(len(b) for b in parts[0]) == [3] + [8] * 6 and sorted(len(b) for b in parts[1]) == [2] + [8] * 6


def test_a_final_global_batch_smaller_than_the_process_count_is_dropped():
    lengths = [5] * 33  # 2 global batches of 16 and 1 example left for 2 processes
    parts = [ShuffledBatchSampler(lengths, 8, seed=0, num_replicas=2, rank=r) for r in (0, 1)]
    assert [len(p) for p in parts] == [2, 2] and [len(list(p)) for p in parts] == [2, 2]
    assert len({i for p in parts for b in p for i in b}) == 32


def _gather_worker(rank: int, port: int, results) -> None:
    torch.set_num_threads(1)  # forked: the parent's OpenMP threads are not in this process (as in DataLoader workers)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    # rank 0 has 3 rows of width 2, rank 1 has 2 rows of width 4: padded to width 4
    x = torch.arange(6.0).reshape(3, 2) if rank == 0 else 10 + torch.arange(8.0).reshape(2, 4)
    x.requires_grad_(True)
    mask = torch.ones(x.shape, dtype=torch.bool)
    joined, joined_mask = gather_padded([x, mask], [-1.0, 0])
    weights = torch.arange(1.0, 21.0).reshape(5, 4)
    (joined * weights).sum().backward()  # the same loss on both processes
    results[rank] = (joined.detach(), joined_mask, x.grad)
    dist.destroy_process_group()


def test_gather_pads_concatenates_in_rank_order_and_sends_each_part_its_gradient():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    results = mp.Manager().dict()
    # forked, not spawned: a spawned process would first import this module (Lightning, Hydra)
    mp.start_processes(_gather_worker, args=(port, results), nprocs=2, start_method="fork")
    expected = torch.tensor([[0, 1, -1, -1], [2, 3, -1, -1], [4, 5, -1, -1],
                             [10, 11, 12, 13], [14, 15, 16, 17]], dtype=torch.float)
    weights = torch.arange(1.0, 21.0).reshape(5, 4)
    for rank in (0, 1):
        joined, mask, grad = results[rank]
        torch.testing.assert_close(joined, expected)
        assert mask.dtype == torch.bool and mask.sum().item() == 6 + 8
    # each process back-propagates the same loss: its part's gradient arrives summed over both
    torch.testing.assert_close(results[0][2], 2 * weights[:3, :2])
    torch.testing.assert_close(results[1][2], 2 * weights[3:, :])


BASIC = {"_target_": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"}
SLURM = {"_target_": "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"}


def test_several_devices_under_multirun_need_slurm_with_one_task_per_device():
    check_launch({"devices": 2}, multirun=False, launcher=BASIC)  # a single run: Lightning starts rank 1
    check_launch({"devices": 1}, multirun=True, launcher=BASIC)
    check_launch({"devices": 2}, multirun=True, launcher={**SLURM, "tasks_per_node": 2})
    with pytest.raises(ConfigError, match="re-executing the command line"):
        check_launch({"devices": 2}, multirun=True, launcher=BASIC)
    with pytest.raises(ConfigError, match="tasks_per_node=2"):
        check_launch({"devices": 2}, multirun=True, launcher={**SLURM, "tasks_per_node": 1})
    assert [processes_per_node(d) for d in (3, [0, 1], "0,1", "2", "auto")] == [3, 2, 2, 2, max(1, torch.cuda.device_count())]


def test_a_multi_device_sweep_on_the_local_launcher_is_refused(tmp_path):
    proc = run_cli(["-m", "encoder=tiny", "trainer=ddp", "seed=1,2", f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=tmp_path)
    assert proc.returncode != 0
    assert "cannot run under -m" in proc.stderr and "hydra/launcher=slurm" in proc.stderr
    assert not list((tmp_path / "sweep").glob("*/results.json"))


#: (trainer.accelerator, the devices the machine has, whether a run may start): ``gpu`` is
#: Lightning's CUDA or Apple MPS, ``cuda`` CUDA only, ``auto`` and ``cpu`` start anywhere
ACCELERATORS = [
    ("gpu", {"cuda"}, True), ("gpu", {"mps"}, True), ("gpu", set(), False),
    ("cuda", {"cuda"}, True), ("cuda", {"mps"}, False),
    ("mps", {"mps"}, True), ("mps", {"cuda"}, False),
    ("tpu", {"cuda"}, False),
    ("cpu", set(), True), ("auto", set(), True),
]


@pytest.mark.parametrize(("accelerator", "devices", "starts"), ACCELERATORS)
def test_an_accelerator_the_machine_lacks_is_refused_before_the_run(accelerator, devices, starts, monkeypatch):
    """The devices are stood in for by Lightning's availability queries, which `check_launch`
    asks: this machine has none of them (the command line below shows it on the real one)."""
    for cls, name in ((CUDAAccelerator, "cuda"), (MPSAccelerator, "mps"), (XLAAccelerator, "tpu")):
        monkeypatch.setattr(cls, "is_available", staticmethod(lambda name=name: name in devices))
    trainer = {"accelerator": accelerator, "devices": 1}
    if starts:
        check_launch(trainer, multirun=False, launcher=BASIC)
        return
    with pytest.raises(ConfigError) as err:
        check_launch(trainer, multirun=False, launcher=BASIC)
    assert re.fullmatch(rf"trainer\.accelerator: needs .+, and this machine \({re.escape(platform.node())}\) has none: "
                        rf"use trainer\.accelerator=cpu, or auto \(got {accelerator}\)", str(err.value)), str(err.value)


def test_a_gpu_run_without_a_gpu_is_one_line_exit_2_and_leaves_nothing(tmp_path):
    """``CUDA_VISIBLE_DEVICES=""`` hides every CUDA device, so this holds on a GPU machine too."""
    proc = run_cli(["encoder=tiny", "trainer.accelerator=gpu", f"hydra.run.dir={tmp_path}/outputs/run"], cwd=tmp_path,
                   env={"CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert [line for line in proc.stderr.splitlines() if line.strip()] == [
        f"error: trainer.accelerator: needs a CUDA or MPS device, and this machine ({platform.node()}) has none: "
        "use trainer.accelerator=cpu, or auto (got gpu)"]
    assert list(tmp_path.iterdir()) == []  # no run directory, no Hydra log


#: (trainer.accelerator, whether a CUDA device is there, trainer.devices, whether a run may start)
CPU_DEVICES = [
    ("cpu", False, 2, True), ("cpu", False, "2", True), ("cpu", False, "auto", True), ("auto", False, 1, True),
    ("cpu", False, -1, False), ("cpu", False, "-1", False), ("auto", False, -1, False), ("cpu", False, [0, 1], False),
    ("cpu", False, "0,1", False), ("cpu", True, -1, False),  # the CPU asked for: a GPU beside it changes nothing
    ("auto", True, -1, True), ("auto", True, [0], True),  # auto with CUDA: GPU devices
]


@pytest.mark.parametrize(("accelerator", "cuda", "devices", "starts"), CPU_DEVICES)
def test_gpu_devices_on_the_cpu_are_refused_before_the_run(accelerator, cuda, devices, starts, monkeypatch):
    """CUDA stood in for by Lightning's availability query, as above."""
    monkeypatch.setattr(CUDAAccelerator, "is_available", staticmethod(lambda: cuda))
    monkeypatch.setattr(MPSAccelerator, "is_available", staticmethod(lambda: False))
    trainer = {"accelerator": accelerator, "devices": devices}
    if starts:
        check_launch(trainer, multirun=False, launcher=BASIC)
        return
    with pytest.raises(ConfigError) as err:
        check_launch(trainer, multirun=False, launcher=BASIC)
    assert str(err.value) == (f"trainer.devices: on the CPU (trainer.accelerator={accelerator}) it is a number of "
                              f"processes > 0 or auto; -1 and lists of ids name GPUs (got {devices!r})")


def test_every_gpu_on_a_cpu_run_is_one_line_exit_2_and_leaves_nothing(tmp_path):
    proc = run_cli(["encoder=tiny", "trainer.devices=-1", f"hydra.run.dir={tmp_path}/outputs/run"], cwd=tmp_path,
                   env={"CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert [line for line in proc.stderr.splitlines() if line.strip()] == [
        "error: trainer.devices: on the CPU (trainer.accelerator=auto) it is a number of processes > 0 or auto; "
        "-1 and lists of ids name GPUs (got -1)"]
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    return write_snips_sample_jsonl(tmp_path_factory.mktemp("snips"), n_train=600, n_eval=60)


EPOCH_LOSSES = ("train/slot_loss", "train/intent_loss", "train/loss_epoch")


def training_log(run_dir) -> tuple[dict[int, float], list[dict[str, float]]]:
    """The training losses a run logged in csv/metrics.csv (rank 0's logger under DDP): step ->
    ``train/loss_step``, and per epoch its ``train/slot_loss``, ``train/intent_loss`` and
    ``train/loss_epoch``."""
    with open(run_dir / "csv" / "metrics.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    steps = {int(r["step"]): float(r[STEP_LOSS]) for r in rows if r[STEP_LOSS]}
    epochs = [{k: float(r[k]) for k in EPOCH_LOSSES} for r in rows if r["train/loss_epoch"]]
    return steps, epochs


def test_two_processes_train_as_one_device_with_the_global_batch(sample, tmp_path):
    """Group DRO on a SeqDrift split (group-balanced sampling, group weights q as running
    state), dropout off: 2 processes × 8 utterances = 1 process × 16, up to float rounding.
    Each epoch has an uneven global batch (581 = 36 × 16 + 5: rank 0 trains on 3, rank 1 on 2
    and a padding row that the gather must drop): the epoch's mean losses (sums over the examples
    trained on / their count, which a padding row kept would make 582) and every step's loss,
    logged by rank 0 alone without an all-reduce, are the single device's to float rounding
    (~2e-7 here; the padding row changes the means by 1.7e-3)."""
    common = [*FAST, *jsonl_overrides(sample), *SMALL_DRIFT, "method=group_dro", "trainer.max_epochs=2",
              "encoder.dropout=0", "model.dropout=0", f"paths.cache_dir={tmp_path / 'cache'}", "keep_last_checkpoint=true",
              "trainer.log_every_n_steps=1"]
    ddp = run_cli([*common, "trainer=ddp", "data.batch_size=8", f"hydra.run.dir={tmp_path / 'ddp'}"], cwd=tmp_path)
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    run(compose_config([*common, "data.batch_size=16"], tmp_path / "one"))  # the single device: no command line needed
    a, b = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("ddp", "one"))
    assert a["sizes"] == b["sizes"] and a["sizes"]["train"] % 16 == 5  # the last global batch: 3 + 2 (+ 1 padding row)
    for split in ("valid", "test"):  # every process evaluated the whole split: no duplicates, no gaps
        rows = (tmp_path / "ddp" / "predictions" / f"{split}.jsonl").read_text().splitlines()
        assert len(rows) == len({json.loads(r)["uid"] for r in rows}) == a["sizes"][split]
        for key in ("intent_acc", "slot_f1", "combined"):
            assert a["metrics"][split][key] == pytest.approx(b["metrics"][split][key], abs=0.02), (split, key)
    x, y = (torch.load(tmp_path / d / "checkpoints" / "last.ckpt", weights_only=True) for d in ("ddp", "one"))
    assert x["global_step"] == y["global_step"] == 2 * 37
    for key, value in y["state_dict"].items():  # the encoder, heads and Group-DRO's weights q
        torch.testing.assert_close(x["state_dict"][key], value, rtol=1e-3, atol=1e-3, msg=key)
    assert any(k.startswith("objective.") for k in y["state_dict"])
    (steps, epochs), (one_steps, one_epochs) = (training_log(tmp_path / d) for d in ("ddp", "one"))
    assert sorted(steps) == sorted(one_steps) == list(range(2 * 37))
    for step, loss in one_steps.items():
        assert steps[step] == pytest.approx(loss, rel=1e-5), step
    assert len(epochs) == len(one_epochs) == 2
    for epoch, (mean, one_mean) in enumerate(zip(epochs, one_epochs)):
        for key in EPOCH_LOSSES:
            assert mean[key] == pytest.approx(one_mean[key], rel=1e-5), (epoch, key)
