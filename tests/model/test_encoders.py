"""`encoder=hf` without a network (``HF_HUB_OFFLINE`` unset): a Hub model in the local cache loads
from it at once, one that is not is one error line at once, where from_pretrained retried the Hub
for half a minute (not cached) or a minute and more (cached) first. The Hub is a local port that
nothing listens on (refused, as a machine without a network is), the cache a folder of the test's
holding the shipped MiniLM as the Hub's cache would."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from robustnlu.model.encoders import embedded_model_path

LOAD = """
import sys, time
from robustnlu.errors import ConfigError
from robustnlu.model.encoders import build_encoder, load_tokenizer
cfg = {"kind": "hf", "name": sys.argv[1]}
start = time.monotonic()
try:
    tokenizer = load_tokenizer(cfg)
    print(type(build_encoder(cfg, len(tokenizer))).__name__)
except ConfigError as err:
    print(f"error: {err}")
print(time.monotonic() - start)
"""
#: the files of a model that the Hub cache holds once from_pretrained downloaded it
MODEL_FILES = ("config.json", "model.safetensors", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json",
               "vocab.txt")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cache_model(hf_home, name: str) -> None:
    """The shipped MiniLM as the Hub cache (``<HF_HOME>/hub``) holds the model ``name``."""
    model = hf_home / "hub" / f"models--{name.replace('/', '--')}"
    commit = "0" * 40
    (model / "refs").mkdir(parents=True)
    (model / "refs" / "main").write_text(commit)
    (model / "snapshots" / commit).mkdir(parents=True)
    for file in MODEL_FILES:
        (model / "snapshots" / commit / file).symlink_to(os.path.join(embedded_model_path(), file))


def load_without_network(name: str, hf_home) -> tuple[str, float]:
    """(what loading ``name`` gave: the encoder's class or the error line, seconds it took)."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HF_HOME=str(hf_home), HF_ENDPOINT=f"http://127.0.0.1:{closed_port()}")
    proc = subprocess.run([sys.executable, "-c", LOAD, name], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result, seconds = proc.stdout.splitlines()[-2:]
    return result, float(seconds)


def test_without_a_network_a_cached_model_loads_and_another_is_one_error_line_at_once(tmp_path):
    """~20 s: two processes."""
    hf_home = tmp_path / "hf"
    cache_model(hf_home, "someone/minilm")
    result, seconds = load_without_network("someone/minilm", hf_home)
    assert result == "BertModel" and seconds < 15
    result, seconds = load_without_network("someone/elsewhere", hf_home)
    assert result.startswith(f"error: encoder.name: not in the local Hugging Face cache ({hf_home / 'hub'}), and the "
                             "Hub (http://127.0.0.1:") and result.endswith("(got someone/elsewhere)")
    assert "ConnectError" in result and seconds < 5
