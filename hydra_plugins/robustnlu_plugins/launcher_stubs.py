"""Stand-ins for hydra-submitit-launcher's configs ``hydra/launcher/submitit_slurm`` and
``submitit_local``, registered only when that plugin (the slurm extra) is not installed: then
conf/hydra/launcher/{slurm,local}.yaml, whose defaults name them, still compose, and
`robustnlu.extras.RequireExtras` ends the multirun with one line naming the extra. With the plugin
installed nothing is registered here and its own configs are used."""

from __future__ import annotations

import importlib.util

from hydra.core.config_store import ConfigStore

if importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is None:
    for name, launcher in (("submitit_slurm", "SlurmLauncher"), ("submitit_local", "LocalLauncher")):
        ConfigStore.instance().store(
            group="hydra/launcher", name=name, provider="robustnlu",
            node={"_target_": f"hydra_plugins.hydra_submitit_launcher.submitit_launcher.{launcher}"})
