"""The ranges the config schema declares (`robustnlu.config_schema`), each case derived from the
declarations themselves (nothing restated here): at every finite end of every declared range the
schema refuses the value just outside with one line naming the key, and its range accepts the
value at a closed end and just inside an open one; every value a method's node accepts at those
ends (and null where it allows null) builds and sets up the objective, so a constructor's own
check is never what refuses a value given on the command line. Then the rules that bound a value
by another one: ``method.k`` below the batch the objective ranks, the R-PDRO adversary's layers
at most the encoder's (also for an ``encoder=hf`` model the run downloads: checked once it is loaded)."""

from __future__ import annotations

import copy
import functools
import math
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from types import SimpleNamespace
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import get_class, instantiate
from omegaconf import OmegaConf, open_dict
from transformers import AutoModel

from integration_helpers import CONF, FAST, cli_env, jsonl_overrides, run_cli, write_snips_sample_jsonl
from robustnlu.cli import compose_run_config
from robustnlu.config_schema import plain, schema
from robustnlu.config_spec import FalseOr, MapOf, Node, Scalar, Seq, Spec, Variants, show
from robustnlu.errors import ConfigError
from robustnlu.groups.lda_topics import LDATopics
from robustnlu.hparams import DeclaredObject, declared
from robustnlu.model.encoders import embedded_model_path, tiny_bert_config
from robustnlu.model.spec import ModelSpec
from tests.robust.helpers import synthetic_datamodule


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


#: configs that between them reach every node of the schema that declares ranges: the base
#: config (data, model, trainer, callbacks, the tiny encoder), each method with its group source
#: or adversary, each noise of augment=, a corpus with a dev carve, greedy-minmax selection, the
#: co-natural optimiser with the efficiency protocol, a drift (SeqDrift's settings) with an
#: out-of-distribution validation split
CONFIGS = [
    [],
    ["drift=slot_context", "validation=ood"],
    *([f"method={m}"] for m in _options("method")),
    *([f"augment={a}"] for a in _options("augment") if a != "none"),
    ["dataset=mit"],
    ["selection=greedy_minmax"],
    ["optimizer=conatural", "dataset=topv2_alarm", "efficiency=topv2", "efficiency.mode=adapt",
     "efficiency.init_from=source.ckpt"],
]


def ranged(spec: Spec, key: str, value: Any) -> Iterator[tuple[str, Scalar]]:
    """(key, its `Scalar`) for every value of the config ``value`` whose spec declares a range or
    allows null, walking the variants the config chose (and the node its ``_target_`` declares)."""
    if isinstance(spec, Scalar):
        if spec.interval is not None or spec.null:
            yield key, spec
    elif isinstance(spec, Variants):
        if isinstance(value, dict) and value.get(spec.by) in spec.options:
            yield from ranged(spec.options[value[spec.by]], key, value)
    elif isinstance(spec, DeclaredObject):
        if isinstance(value, dict):
            yield from ranged(spec.node(spec.target(key, value)), key, value)
    elif isinstance(spec, Node):
        for name, sub in spec.keys.items():
            if isinstance(value, dict) and name in value:
                yield from ranged(sub, f"{key}.{name}" if key else name, value[name])
    elif isinstance(spec, MapOf) and isinstance(value, dict):
        for name, item in value.items():
            if item is not None:
                yield from ranged(spec.value, f"{key}.{name}", item)
    elif isinstance(spec, Seq) and isinstance(value, list):
        for i, item in enumerate(value):
            yield from ranged(spec.item, f"{key}[{i}]", item)
    elif isinstance(spec, FalseOr) and value not in (None, False):
        yield from ranged(spec.spec, key, value)


def composed(overrides: list[str]) -> dict[str, Any]:
    """The config ``python -m robustnlu encoder=tiny <overrides>`` runs, as plain values (a copy
    of its own: composed once per list of overrides, as the same overrides compose the same config)."""
    return copy.deepcopy(_composed(tuple(overrides)))


@functools.cache
def _composed(overrides: tuple[str, ...]) -> dict[str, Any]:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["encoder=tiny", *overrides])
    with open_dict(cfg):
        cfg.paths.output_dir = "run"
    return plain(cfg)


def declared_cases() -> list[tuple[list[str], str, Scalar]]:
    """(overrides, key, scalar): each declared value once per declaration (a node the schema or
    a class declares; the spec objects live as long as the schema and the classes)."""
    seen, cases = set(), []
    for overrides in CONFIGS:
        values = composed(overrides)
        for key, scalar in ranged(schema("config"), "", values):
            if (key, id(scalar)) not in seen:
                seen.add((key, id(scalar)))
                cases.append((overrides, key, scalar))
    return cases


CASES = declared_cases()
#: (overrides, key, scalar, end): each finite end of each declared range
ENDS = [(o, k, s, end) for o, k, s in CASES if s.interval is not None
        for end, bound in (("low", s.interval.low), ("high", s.interval.high)) if math.isfinite(bound)]


def edge(scalar: Scalar, end: str) -> tuple[int | float, int | float]:
    """(the value the range accepts at ``end``: the end itself if closed, else the nearest value
    inside; the nearest value it refuses there)."""
    iv = scalar.interval
    bound, closed, inward = (iv.low, iv.closed_low, 1) if end == "low" else (iv.high, iv.closed_high, -1)
    if scalar.kind == "integer":
        bound = int(bound)
        return (bound, bound - inward) if closed else (bound + inward, bound)
    inside, outside = math.nextafter(bound, inward * math.inf), math.nextafter(bound, -inward * math.inf)
    return (bound, outside) if closed else (inside, bound)


def put(values: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """A copy of ``values`` with ``key`` (``a.b[0]``) set to ``value``."""
    values = copy.deepcopy(values)
    *parents, last = [int(p) if p.isdigit() else p for p in re.findall(r"[^.\[\]]+", key)]
    node = values
    for part in parents:
        node = node[part]
    node[last] = value
    return values


def refusal(values: Mapping[str, Any]) -> str | None:
    """The schema's one line for ``values``, None if it accepts them."""
    try:
        schema("config").check("", values, values)
    except ConfigError as err:
        return str(err)
    return None


def case_id(case: tuple) -> str:
    overrides, key, *rest = case
    return " ".join([*overrides[:1], key, *(r for r in rest if isinstance(r, str))])


@pytest.mark.parametrize("case", ENDS, ids=case_id)
def test_the_schema_refuses_just_outside_each_end_of_a_range_and_accepts_inside(case):
    overrides, key, scalar, end = case
    inside, outside = edge(scalar, end)
    values = composed(overrides)
    assert refusal(put(values, key, outside)) == f"{key}: {scalar.interval.describe()} (got {show(outside)})"
    problem = refusal(put(values, key, inside))  # a rule tying the value to another may refuse it, not its range
    assert problem is None or not problem.startswith(f"{key}: {scalar.interval.describe()}"), problem


#: (overrides, key, the value): the ends of the ranges of a method's node (and its group source
#: or adversary), and null where the node allows it
METHOD_EDGES = [(o, k, edge(s, end)[0]) for o, k, s, end in ENDS if k.startswith("method.")] + [
    (o, k, None) for o, k, s in CASES if k.startswith("method.") and s.null]


@pytest.fixture(scope="module")
def setup_parts(tokenizer):
    """What `SLUModule` gives an objective, for the tiny encoder: the model spec, a model with
    its encoder (R-PDRO copies its layers), and a set-up data module with 3 SeqDrift groups."""
    encoder_config = tiny_bert_config(composed([])["encoder"], len(tokenizer))
    texts = [f"play {w} song {i}" for i, w in enumerate(["rock", "jazz", "pop", "folk"] * 4)]
    dm = synthetic_datamodule(tokenizer, [i % 3 for i in range(len(texts))], texts)
    spec = ModelSpec(hidden_size=encoder_config.hidden_size, n_intents=len(dm.vocab.intents), n_tags=len(dm.vocab.tags),
                     vocab_size=len(tokenizer), encoder_config=encoder_config.to_dict())
    return spec, SimpleNamespace(encoder=AutoModel.from_config(encoder_config)), dm


@pytest.mark.filterwarnings("ignore:R-PDRO with batch size")
@pytest.mark.parametrize("case", METHOD_EDGES, ids=lambda c: f"{case_id(c)}={show(c[2])}")
def test_every_value_a_method_node_accepts_at_its_ends_builds_the_objective(case, setup_parts):
    overrides, key, value = case
    values = put(composed(overrides), key, value)
    assert refusal(values) is None
    spec, model, dm = setup_parts
    objective = instantiate(OmegaConf.create(values["method"]), intent_loss_scale=values["model"]["intent_loss_scale"],
                            spec=spec)
    objective.setup(dm, model)  # a group source fits here (LDA: scikit-learn checks its arguments then)


@pytest.mark.parametrize("prior", ["doc_topic_prior", "topic_word_prior"])
def test_the_lda_priors_end_where_scikit_learns_range_ends(prior, setup_parts):
    """The LDA group source fits at the declared upper end of a Dirichlet prior and scikit-learn
    refuses just above it (given to scikit-learn's model itself: LDATopics refuses it first):
    the declared range is scikit-learn's, not a narrower one."""
    interval = declared(LDATopics)[prior].spec.interval
    high = interval.high
    assert math.isfinite(high) and interval.closed_high
    _, _, dm = setup_parts
    values = composed(["method=topic_cvar"])["method"]["groups"]
    instantiate({**values, prior: high}).memberships(dm)
    above = instantiate(values)
    above.lda.set_params(**{prior: math.nextafter(high, math.inf)})
    with pytest.raises(ValueError, match=prior):  # scikit-learn's InvalidParameterError
        above.memberships(dm)


# ---------------------------------------------------------------------------- rules across keys
def methods_with_k() -> list[str]:
    """The methods of conf/method/ whose class declares a ``k``."""
    return [m for m in _options("method") if "k" in declared(get_class(composed([f"method={m}"])["method"]["_target_"]))]


def test_the_top_k_methods_are_the_ones_with_a_k():
    assert methods_with_k() == ["topk", "topk_ae", "topk_ae_bin", "topk_ae_prob", "topk_group"]


@pytest.mark.parametrize("method", methods_with_k())
def test_k_must_be_below_the_batch_size(method):
    """k = b keeps the whole batch of b (TopK is ERM: tests/robust/test_topk.py), so b - 1 is the
    largest k that asks a question of its own."""
    common = ["encoder=tiny", f"method={method}", "data.batch_size=16"]
    compose_run_config([*common, "method.k=15"])
    with pytest.raises(ConfigError) as err:
        compose_run_config([*common, "method.k=16"])
    assert str(err.value) == ("method.k: must be < data.batch_size (16): with k >= the batch, top-k keeps every loss "
                              "and selects nothing (got 16)")


def test_under_ddp_k_must_be_below_the_global_batch():
    """2 processes x 8 utterances: the objective ranks the gathered 16 (robustnlu/distributed.py)."""
    common = ["encoder=tiny", "method=topk", "trainer=ddp", "trainer.devices=2", "data.batch_size=8"]
    compose_run_config([*common, "method.k=15"])
    with pytest.raises(ConfigError) as err:
        compose_run_config([*common, "method.k=16"])
    assert str(err.value) == ("method.k: must be < the global batch, data.batch_size x 2 processes (8 x 2 = 16): with "
                              "k >= the batch, top-k keeps every loss and selects nothing (got 16)")
    with pytest.raises(ConfigError, match=r"^method\.k: must be < the global batch, data\.batch_size x 6 processes "):
        compose_run_config([*common, "+trainer.num_nodes=3", "method.k=48"])


@pytest.mark.filterwarnings("ignore:R-PDRO with batch size")
def test_the_ratio_adversary_keeps_at_most_the_encoders_layers(setup_parts):
    """The tiny encoder has 2 layers (conf/encoder/tiny.yaml), the shipped MiniLM 6."""
    spec, model, dm = setup_parts
    cfg = compose_run_config(["encoder=tiny", "method=rpdro", "method.adversary.n_layers=2"])
    objective = instantiate(cfg.method, intent_loss_scale=1.0, spec=spec)
    objective.setup(dm, model)
    assert objective.adversary.classifier.encoder.config.num_hidden_layers == 2
    with pytest.raises(ConfigError, match=r"^method\.adversary\.n_layers: must be <= the encoder's 2 layers \(got 3\)$"):
        compose_run_config(["encoder=tiny", "method=rpdro", "method.adversary.n_layers=3"])
    compose_run_config(["method=rpdro", "method.adversary.n_layers=6"])
    with pytest.raises(ConfigError, match=r"^method\.adversary\.n_layers: must be <= the encoder's 6 layers \(got 7\)$"):
        compose_run_config(["method=rpdro", "method.adversary.n_layers=7"])


#: ``python -m robustnlu`` where the ``encoder=hf`` model is not in the local cache yet, as for a
#: name the run downloads: reading its config from local files fails (the schema's
#: `encoder_layers` then knows no layer count); loading it (here: from its folder) works
NOT_CACHED = """
import runpy, sys, transformers
from_pretrained = transformers.AutoConfig.from_pretrained.__func__
def not_cached(cls, name, *args, **kwargs):
    if kwargs.get("local_files_only"):
        raise OSError(f"{name} is not in the local cache")
    return from_pretrained(cls, name, *args, **kwargs)
transformers.AutoConfig.from_pretrained = classmethod(not_cached)
sys.argv = ["robustnlu", *sys.argv[1:]]
runpy.run_module("robustnlu", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("encoder, n_layers, layers, before_the_run", [
    (["encoder=tiny"], 3, 2, True),                                 # the schema: conf/encoder/tiny.yaml's num_layers
    (["encoder=hf", f"encoder.name={embedded_model_path()}"], 7, 6, False),  # the run, once MiniLM is loaded
])
def test_too_many_adversary_layers_is_one_error_line_from_the_cli(tmp_path, encoder, n_layers, layers, before_the_run):
    """~10 s: exit 2, the one line naming the setting, its value and the encoder's layer count,
    no run directory; with the model not in the local cache, after the data was read."""
    data = write_snips_sample_jsonl(tmp_path / "data", n_train=32, n_eval=16)
    args = [*(o for o in FAST if not o.startswith("encoder=")), *encoder, *jsonl_overrides(data), "method=rpdro",
            f"method.adversary.n_layers={n_layers}", f"hydra.run.dir={tmp_path}/run"]
    proc = (run_cli(args, cwd=tmp_path) if before_the_run else
            subprocess.run([sys.executable, "-c", NOT_CACHED, *args], cwd=tmp_path, env=cli_env(),
                           capture_output=True, text=True, timeout=600))
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = f"error: method.adversary.n_layers: must be <= the encoder's {layers} layers (got {n_layers})"
    assert [ln for ln in proc.stderr.splitlines() if ln.strip()] == [line]
    assert ("dataset jsonl: 32 train" in proc.stdout) is not before_the_run  # the run's log
    assert not (tmp_path / "run").exists()
