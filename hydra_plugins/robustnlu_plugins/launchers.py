"""``hydra/launcher=local`` and ``hydra/launcher=slurm`` (conf/hydra/launcher/{local,slurm}.yaml):
hydra-submitit-launcher's LocalLauncher and SlurmLauncher with one setting of robustnlu's,
``hydra.launcher.runs_per_gpu`` (K: an integer >= 1, default `RUNS_PER_GPU`): how many of a sweep's
jobs share one GPU at a time. A MiniLM step is bound by the host (Python, kernel launches), so one
GPU holds several runs (README, "On a GPU": 4 runs gave 3.82x the examples/s of one on an H100, 4.26x
on an H200).

- K = 1: the submitit launcher as it is (all jobs of a sweeper batch at once, each seeing
  ``gpus_per_node`` GPUs; one Slurm job per sweep job).
- local, K > 1: ``gpus_per_node`` = G names the GPUs the sweep uses (0 .. G-1). There are K x G
  slots, slot s on GPU s mod G; a job takes the lowest free slot and sees that GPU alone
  (``CUDA_VISIBLE_DEVICES``); when a job ends the next one starts on its slot (not batch after
  batch). Each job gets cores / (K x G) torch threads (``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``)
  unless the driver's environment sets ``OMP_NUM_THREADS`` (`thread_setup`).
- slurm, K > 1: each Slurm job of the array runs a pack of K sweep jobs on its one GPU
  (``gpus_per_node`` 1; null: on its CPUs), one Slurm task per job (``tasks_per_node`` = K,
  ``cpus_per_task`` each; ``mem_gb`` is the Slurm job's, for all K). Task r runs job r of its pack
  (`Pack`) with the Slurm task variables of a one-task job (`ONE_TASK`), so that Lightning trains
  one process and the run owns its folder: each job keeps its run directory, ``status.json`` and
  ``python -m robustnlu.sweep status`` / ``relaunch`` (`robustnlu.sweep_state.submitted_jobs`).
  A requeue (time limit, preemption) restarts the whole pack: each run resumes from its
  ``last.ckpt``, a finished one returns its stored result (`robustnlu.rundir_check.resumes`).

Refused, with one ``error:`` line before anything is launched: K < 1; local K > 1 without GPUs;
slurm K > 1 with ``gpus_per_node`` > 1, or with ``tasks_per_node`` > 1 (a DDP run's tasks: DDP
runs are not packed).

The configs ``hydra/launcher/robustnlu_local`` and ``robustnlu_slurm``, which the YAML files
extend, are registered here (`register_configs`): submitit's structured configs plus
``runs_per_gpu``. Without hydra-submitit-launcher (the ``slurm`` extra) they are stand-ins that
name its launchers, so that the YAML files still compose and `robustnlu.extras.RequireExtras` ends
the multirun with one line naming the extra; this module imports the plugin only when it runs.
"""

from __future__ import annotations

import dataclasses
import heapq
import importlib
import importlib.util
import logging
import os
import signal
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, filter_overrides
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from robustnlu.config_spec import AT_LEAST_1, integer, show
from robustnlu.errors import ConfigError, exit_with_error

log = logging.getLogger(__name__)

#: ``hydra.launcher.runs_per_gpu``'s default: one job per GPU, the submitit launcher as it is
RUNS_PER_GPU = 1
#: hydra-submitit-launcher's module, imported when a launcher is set up
SUBMITIT = "hydra_plugins.hydra_submitit_launcher"
#: the Slurm task variables of a one-task job, which each run of a pack sees: Lightning reads the
#: world size and ranks from them (a task of K would be taken for one of K DDP processes), and
#: `robustnlu.rundir_claim.secondary_process` (a task other than the first owns no folder)
ONE_TASK = {"SLURM_NTASKS": "1", "SLURM_NPROCS": "1", "SLURM_NTASKS_PER_NODE": "1", "SLURM_TASKS_PER_NODE": "1",
            "SLURM_STEP_NUM_TASKS": "1", "SLURM_STEP_TASKS_PER_NODE": "1", "SLURM_PROCID": "0", "SLURM_LOCALID": "0"}
#: seconds between the local launcher's looks at its running jobs
POLL_S = 0.5


class SubmititLauncher(Launcher):
    """What both launchers share: the arguments are their config's keys (`register_configs`); with
    K = 1 each hands the launch to hydra-submitit-launcher's own launcher (``self.submitit``),
    which also runs each job of a packed launch (its ``__call__``)."""

    cluster = ""  # submitit's name of the executor: "local" | "slurm"

    def __init__(self, runs_per_gpu: int, **params: Any) -> None:
        self.runs_per_gpu = runs_per_gpu
        self.params = {k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v
                       for k, v in params.items()}

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        try:
            self.check()
        except ConfigError as err:
            exit_with_error(err)
        module = importlib.import_module(f"{SUBMITIT}.submitit_launcher")
        self.submitit = getattr(module, f"{self.cluster.title()}Launcher")(**self.params)
        self.submitit.setup(hydra_context=hydra_context, task_function=task_function, config=config)
        self.config = config

    def check(self) -> None:
        """`ConfigError` for settings this launcher cannot run (see the module docstring)."""
        integer(AT_LEAST_1).check("hydra.launcher.runs_per_gpu", self.runs_per_gpu, {})
        tasks = self.params.get("tasks_per_node")
        if self.runs_per_gpu > 1 and tasks != 1:
            raise ConfigError(f"hydra.launcher.tasks_per_node={tasks} with hydra.launcher.runs_per_gpu="
                              f"{self.runs_per_gpu}: a packed run is one process (tasks_per_node > 1 is for a DDP "
                              "run, which is not packed); set one of them to 1")

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        if self.runs_per_gpu == 1:
            return self.submitit.launch(job_overrides, initial_job_idx)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        log.info(f"Submitit '{self.cluster}' sweep output dir : {sweep_dir} ({self.runs_per_gpu} runs per GPU)")
        for number, overrides in enumerate(job_overrides, initial_job_idx):
            log.info(f"\t#{number} : {' '.join(filter_overrides(overrides))}")
        return self.packed([list(o) for o in job_overrides], initial_job_idx)

    def packed(self, jobs: list[list[str]], first: int) -> list[JobReturn]:
        """Run ``jobs`` (numbered from ``first``) K to a GPU; their returns in their order."""
        raise NotImplementedError


class PackingLocalLauncher(SubmititLauncher):
    """``hydra/launcher=local``: see the module docstring."""

    cluster = "local"

    def check(self) -> None:
        super().check()
        if self.runs_per_gpu > 1 and not self.params.get("gpus_per_node"):
            raise ConfigError(f"hydra.launcher.runs_per_gpu={self.runs_per_gpu} shares GPUs between jobs: name the GPUs "
                              "the sweep uses with hydra.launcher.gpus_per_node=<count> (got "
                              f"{show(self.params.get('gpus_per_node'))}); CPU jobs: runs_per_gpu=1 and "
                              "hydra.sweeper.max_batch_size=<jobs at once>")

    def packed(self, jobs: list[list[str]], first: int) -> list[JobReturn]:
        import submitit

        gpus = int(self.params["gpus_per_node"])
        slots = self.runs_per_gpu * gpus
        params = dict(self.params)
        executor = submitit.LocalExecutor(folder=params.pop("submitit_folder"))
        executor.update_parameters(**{**params, "gpus_per_node": 1, "setup": thread_setup(slots)})
        free = list(range(slots))
        waiting = deque(enumerate(jobs))
        running: dict[int, tuple[int, Any]] = {}  # slot -> (position in jobs, its submitit job)
        returns: dict[int, JobReturn] = {}
        state = Singleton.get_state()
        while waiting or running:
            while waiting and free:
                slot = heapq.heappop(free)
                position, overrides = waiting.popleft()
                number = first + position
                executor.update_parameters(visible_gpus=(slot % gpus,))
                running[slot] = position, executor.submit(self.submitit, overrides, "hydra.sweep.dir", number,
                                                          f"job_id_for_{number}", state)
            time.sleep(POLL_S)
            for slot, (position, job) in list(running.items()):
                if job.done():
                    returns[position] = job.results()[0]
                    del running[slot]
                    heapq.heappush(free, slot)
        return [returns[position] for position in range(len(jobs))]


def thread_setup(slots: int) -> list[str]:
    """The shell lines that give each of ``slots`` jobs at once its share of the cores as torch
    threads; none where the driver's environment sets ``OMP_NUM_THREADS`` (the jobs inherit it)."""
    if "OMP_NUM_THREADS" in os.environ:
        return []
    threads = max(1, (os.cpu_count() or 1) // slots)
    return [f"export OMP_NUM_THREADS={threads}", f"export MKL_NUM_THREADS={threads}"]


class PackingSlurmLauncher(SubmititLauncher):
    """``hydra/launcher=slurm``: see the module docstring. (The name ends in ``SlurmLauncher``:
    `robustnlu.distributed.check_launch` knows Slurm's launchers so.)"""

    cluster = "slurm"

    def check(self) -> None:
        super().check()
        gpus = self.params.get("gpus_per_node")
        if self.runs_per_gpu > 1 and (gpus or 0) > 1:
            raise ConfigError(f"hydra.launcher.gpus_per_node={gpus} with hydra.launcher.runs_per_gpu={self.runs_per_gpu}: "
                              "each Slurm job packs its runs onto one GPU; set gpus_per_node=1 (null: CPU jobs)")

    def packed(self, jobs: list[list[str]], first: int) -> list[JobReturn]:
        import submitit
        from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf

        params = {**self.params, "tasks_per_node": self.runs_per_gpu}
        executor = submitit.AutoExecutor(cluster=self.cluster, folder=params.pop("submitit_folder"),
                                         slurm_max_num_timeout=params.pop("max_num_timeout"))
        shared = set(OmegaConf.structured(BaseQueueConf).keys())  # the others are named slurm_<key>
        executor.update_parameters(**{k if k in shared else f"{self.cluster}_{k}": v for k, v in params.items()})
        starts = range(0, len(jobs), self.runs_per_gpu)
        packs = [jobs[start:start + self.runs_per_gpu] for start in starts]
        numbers = [list(range(first + start, first + start + len(pack))) for start, pack in zip(starts, packs)]
        submitted = executor.map_array(Pack(self.submitit), packs, numbers, [Singleton.get_state()] * len(packs))
        return [ret for pack, job in zip(packs, submitted) for ret in job.results()[:len(pack)]]


class Pack:
    """What each task of a packed Slurm job runs (submitit pickles it, with the pack's jobs as its
    first argument: `robustnlu.sweep_state.submitted_jobs` reads them back). ``launcher``:
    hydra-submitit-launcher's SlurmLauncher, which runs one job when called."""

    def __init__(self, launcher: Any) -> None:
        self.launcher = launcher

    def __call__(self, jobs: list[list[str]], numbers: list[int], singleton_state: dict[Any, Any]) -> JobReturn | None:
        import submitit

        env = submitit.JobEnvironment()
        rank = env.global_rank
        if rank >= len(jobs):  # the sweep's last pack may hold fewer jobs than the job has tasks
            return None
        restarts = os.environ.get("SLURM_RESTART_COUNT") or "0"
        requeue_once(Path(env.paths.folder) / f"{env.job_id}_requeue_{restarts}")
        os.environ.update(ONE_TASK)
        return self.launcher(jobs[rank], "hydra.sweep.dir", numbers[rank], f"job_id_for_{numbers[rank]}",
                             singleton_state)

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """What submitit requeues: the same pack (each run then resumes from its last.ckpt)."""
        import submitit

        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)


def requeue_once(marker: Path) -> None:
    """Slurm's USR2 (time limit, preemption: conf/hydra/launcher/slurm.yaml) reaches every task of
    a pack, and each task is rank 0 to submitit's handler once `ONE_TASK` is set: let that handler,
    which requeues the Slurm job, run in the first task that claims ``marker`` (one per start of
    the job), whichever of the pack's runs are still going; the others train on until the requeue
    ends them."""
    handler = signal.getsignal(signal.SIGUSR2)
    if not callable(handler):
        return

    def once(signum: int, frame: Any) -> None:
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            log.info(f"another task of this Slurm job requeues it ({marker.name})")
            return
        handler(signum, frame)

    signal.signal(signal.SIGUSR2, once)


def register_configs() -> None:
    """``hydra/launcher/robustnlu_local`` and ``robustnlu_slurm`` (see the module docstring)."""
    store = ConfigStore.instance()
    launchers = (("local", "LocalLauncher", PackingLocalLauncher), ("slurm", "SlurmLauncher", PackingSlurmLauncher))
    if importlib.util.find_spec(SUBMITIT) is None:
        for name, theirs, _ in launchers:
            store.store(group="hydra/launcher", name=f"robustnlu_{name}", provider="robustnlu",
                        node={"_target_": f"{SUBMITIT}.submitit_launcher.{theirs}"})
        return
    config = importlib.import_module(f"{SUBMITIT}.config")
    for name, theirs, ours in launchers:
        base = getattr(config, f"{name.title()}QueueConf")
        node = dataclasses.make_dataclass(f"{ours.__name__}Conf", [
            ("_target_", str, dataclasses.field(default=f"{__name__}.{ours.__name__}")),
            ("runs_per_gpu", int, dataclasses.field(default=RUNS_PER_GPU))], bases=(base,))
        store.store(group="hydra/launcher", name=f"robustnlu_{name}", node=node, provider="robustnlu")


register_configs()
