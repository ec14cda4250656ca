"""config.json parsing and the `config` command.

Expected schedule fields are derived by hand from the JSON numbers in each test
(e.g. head_dim = hidden_size // num_attention_heads = 4096 // 32); the
frequencies are checked against transformers' own rotary module built from the
same JSON (real third-party code, bit for bit against our torch engine, which
evaluates the same float32 formula with the same torch ops); position
collisions against a brute-force ml_dtypes cast.
"""

from __future__ import annotations

import importlib
import json
import math
import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from click.testing import CliRunner

from precision_audit.cli import main
from precision_audit.config import (
    ConfigRow,
    ModelConfig,
    alibi_verdict,
    audit_config,
    default_lengths,
    load_config,
    load_config_dict,
    rope_layer_types,
    rope_verdict,
    schedule_from_config,
)
from precision_audit.rope import cache_rounding_bound
from precision_audit.rope.schedules import RopeSchedule

DATA = Path(__file__).resolve().parent / "data"
CONFIGS = sorted(p.name for p in DATA.glob("*.json"))


def js(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def run(*args: str):
    return CliRunner().invoke(main, list(args))


# --------------------------------------------------------------------------- expected fields, by hand


def test_every_shipped_config_is_covered():
    assert set(CONFIGS) == set(EXPECTED)


def _llama2():
    j = js("llama-2-7b-hf.json")
    return {"all": dict(head_dim=j["hidden_size"] // j["num_attention_heads"], base=10000.0, scaling="default",
                        rotary_dim=4096 // 32)}, j["max_position_embeddings"]


def _llama31():
    j = js("llama-3.1-8b.json")
    rs = j["rope_scaling"]
    return {"all": dict(head_dim=4096 // 32, base=j["rope_theta"], scaling="llama3", factor=rs["factor"],
                        low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192)}, 131072


def _qwen2():
    j = js("qwen2-7b.json")
    return {"all": dict(head_dim=3584 // 28, base=1000000.0, scaling="default")}, j["max_position_embeddings"]


def _mistral():
    return {"all": dict(head_dim=4096 // 32, base=10000.0, scaling="default")}, 32768


def _phi35():
    j = js("phi-3.5-mini-instruct.json")
    rs = j["rope_scaling"]
    factor = 131072 / 4096  # max_position_embeddings / top-level original_max_position_embeddings
    return {"all": dict(head_dim=3072 // 32, scaling="longrope", original_max_position_embeddings=4096,
                        factor=factor, short_factor=tuple(rs["short_factor"]), long_factor=tuple(rs["long_factor"]),
                        cos_sin_scale=math.sqrt(1 + math.log(factor) / math.log(4096)))}, 131072


def _gemma4():
    t = js("gemma-4-31b-it.json")["text_config"]
    full = t["rope_parameters"]["full_attention"]
    rotated_pairs = int(full["partial_rotary_factor"] * t["global_head_dim"] // 2)  # 0.25 * 512 // 2 = 64
    return {"full_attention": dict(head_dim=t["global_head_dim"], base=1000000.0, scaling="proportional",
                                   rotary_dim=2 * rotated_pairs, n_freq=512 // 2),
            "sliding_attention": dict(head_dim=t["head_dim"], base=10000.0, scaling="default", rotary_dim=256)}, 262144


def _gpt_oss():
    return {"all": dict(head_dim=64, base=150000.0, scaling="yarn", factor=32.0, truncate=False, beta_fast=32.0,
                        beta_slow=1.0, original_max_position_embeddings=4096,
                        cos_sin_scale=0.1 * math.log(32.0) + 1)}, 131072


def _qwen25_coder_yarn():
    # YaRN as Qwen's model card tells users to add it: legacy "type", factor 4 over L0 32768
    return {"all": dict(head_dim=5120 // 40, base=1000000.0, scaling="yarn", factor=4.0, beta_fast=32.0,
                        beta_slow=1.0, original_max_position_embeddings=32768,
                        cos_sin_scale=0.1 * math.log(4.0) + 1)}, 32768


def _deepseek():
    j = js("deepseek-v3.json")
    return {"all": dict(head_dim=j["qk_rope_head_dim"], base=10000.0, scaling="yarn", factor=40.0, mscale=1.0,
                        mscale_all_dim=1.0, original_max_position_embeddings=4096, cos_sin_scale=1.0)}, 163840


def _qwen25_yarn():
    j = js("qwen2.5-coder-32b-instruct-yarn.json")
    rs = j["rope_scaling"]
    return {"all": dict(head_dim=5120 // 40, base=1000000.0, scaling="yarn", factor=rs["factor"], truncate=True,
                        beta_fast=32.0, beta_slow=1.0, original_max_position_embeddings=32768,
                        cos_sin_scale=0.1 * math.log(4.0) + 1)}, j["max_position_embeddings"]


def _llama4_scout():
    # Llama 4 Scout: llama3 with equal band factors (no blended band), factor 16 over L0 8192, context 10M
    t = js("llama-4-scout-17b-16e-instruct.json")["text_config"]
    return {"all": dict(head_dim=t["head_dim"], base=500000.0, scaling="llama3", factor=16.0, low_freq_factor=1.0,
                        high_freq_factor=1.0, original_max_position_embeddings=8192, cos_sin_scale=1.0)}, 10485760


def _gemma3():
    # Gemma 3 as shipped: rope_theta 1e6 with linear x8 on the full-attention layers, rope_local_base_freq 1e4 on
    # the sliding ones (transformers' Gemma3TextConfig builds the two)
    t = js("gemma-3-4b-it.json")["text_config"]
    return {"sliding_attention": dict(head_dim=t["head_dim"], base=10000.0, scaling="default"),
            "full_attention": dict(head_dim=t["head_dim"], base=1000000.0, scaling="linear", factor=8.0)}, 131072


def _gemma3_1b():
    # Gemma 3 1B: no rope_scaling, so both layer types default RoPE (1e6 full, 1e4 sliding), context 32K
    return {"sliding_attention": dict(head_dim=256, base=10000.0, scaling="default"),
            "full_attention": dict(head_dim=256, base=1000000.0, scaling="default")}, 32768


def _smollm3():
    return {"all": dict(head_dim=2048 // 16, base=5000000.0, scaling="default")}, 65536


def _mrope(context, base=1000000.0, head_dim=3584 // 28):
    # M-RoPE models: text positions audit as default RoPE (every section at the same id); sections in tests/test_mrope.py
    return lambda: ({"all": dict(head_dim=head_dim, base=base, scaling="default")}, context)


EXPECTED = {
    "qwen2-vl-7b-instruct.json": ("rope", _mrope(32768)),
    "qwen2.5-vl-7b-instruct.json": ("rope", _mrope(128000)),
    "qwen3-vl-4b-instruct.json": ("rope", _mrope(262144, base=5000000.0, head_dim=128)),
    "smollm2-135m.json": ("rope", lambda: ({"all": dict(head_dim=64, base=100000.0, scaling="default")}, 8192)),
    "gemma-3-4b-it.json": ("rope", _gemma3),
    "gemma-3-1b-it.json": ("rope", _gemma3_1b),
    "smollm3-3b.json": ("rope", _smollm3),
    "llama-4-scout-17b-16e-instruct.json": ("rope", _llama4_scout),
    "qwen2.5-coder-32b-instruct-yarn.json": ("rope", _qwen25_yarn),
    "llama-2-7b-hf.json": ("rope", _llama2),
    "llama-3.1-8b.json": ("rope", _llama31),
    "qwen2-7b.json": ("rope", _qwen2),
    "mistral-7b-v0.1.json": ("rope", _mistral),
    "phi-3.5-mini-instruct.json": ("rope", _phi35),
    "gemma-4-31b-it.json": ("rope", _gemma4),
    "gpt-oss-20b.json": ("rope", _gpt_oss),
    "deepseek-v3.json": ("rope", _deepseek),
    "qwen2.5-coder-32b-instruct-yarn.json": ("rope", _qwen25_coder_yarn),
    "bloom-7b1.json": ("alibi", lambda: (js("bloom-7b1.json")["n_head"], None)),
    "baichuan2-13b-base.json": ("alibi", lambda: (js("baichuan2-13b-base.json")["num_attention_heads"], 4096)),
    # relative and learned encodings (their fields against transformers' own classes: tests/test_config_relative.py)
    "t5-v1_1-xxl-encoder.json": ("relative", lambda: ({"scheme": "t5", "num_buckets": 32, "max_distance": 128},
                                                      None)),
    "deberta-v3-base.json": ("relative", lambda: ({"scheme": "deberta", "num_buckets": 256, "max_distance": 512},
                                                  512)),
    "gpt2.json": ("learned", lambda: ({"scheme": None}, js("gpt2.json")["n_positions"])),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_shipped_config_fields(name):
    m = load_config(DATA / name)
    kind, expect = EXPECTED[name]
    assert m.kind == kind
    if kind == "alibi":
        heads, ctx = expect()
        assert (m.num_heads, m.max_position_embeddings) == (heads, ctx)
        return
    if kind in ("relative", "learned"):
        fields, ctx = expect()
        assert {"scheme": m.scheme, **dict(m.scheme_params)} == fields and m.max_position_embeddings == ctx
        return
    per_type, ctx = expect()
    assert m.max_position_embeddings == ctx
    assert [t for t, _ in m.rope] == list(per_type)
    for t, s in m.rope:
        for field, want in per_type[t].items():
            got = {"n_freq": s.n_freq, "cos_sin_scale": s.cos_sin_scale}.get(field, getattr(s, field, None))
            if isinstance(want, (str, bool, tuple)):
                assert got == want, (t, field)
            else:
                assert got == pytest.approx(want, rel=1e-15), (t, field)


def test_config_dict_round_trips_to_json():
    d = load_config(DATA / "gemma-4-31b-it.json").to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["kind"] == "rope" and [r["layer_type"] for r in d["rope"]] == ["full_attention", "sliding_attention"]
    assert "read text_config (multimodal config)" in d["notes"]


# --------------------------------------------------------------------------- against transformers

TRANSFORMERS_MODULES = {  # file -> (transformers model_type of the rotary module, the config object's JSON)
    "llama-2-7b-hf.json": ("llama", lambda j: j),
    "llama-3.1-8b.json": ("llama", lambda j: j),
    "qwen2-7b.json": ("qwen2", lambda j: j),
    "mistral-7b-v0.1.json": ("mistral", lambda j: j),
    "phi-3.5-mini-instruct.json": ("phi3", lambda j: j),
    "gpt-oss-20b.json": ("gpt_oss", lambda j: j),
    "deepseek-v3.json": ("deepseek_v3", lambda j: j),
    "qwen2.5-coder-32b-instruct-yarn.json": ("qwen2", lambda j: j),
    "gemma-4-31b-it.json": ("gemma4", lambda j: j["text_config"]),
    "llama-4-scout-17b-16e-instruct.json": ("llama4", lambda j: j["text_config"]),
    "gemma-3-4b-it.json": ("gemma3", lambda j: j["text_config"]),
    "gemma-3-1b-it.json": ("gemma3", lambda j: j),
    "smollm3-3b.json": ("smollm3", lambda j: j),
}
_TEXT_TYPES = {"gemma4": "gemma4_text", "llama4": "llama4_text", "gemma3": "gemma3_text"}


def _rotary(model_type: str, cfg_json: dict):
    """transformers' rotary module built from the JSON, and the config object it was built from."""
    from transformers import CONFIG_MAPPING

    mt = _TEXT_TYPES.get(model_type, model_type)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = CONFIG_MAPPING[mt](**{k: v for k, v in cfg_json.items() if k != "model_type"})
    mod = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    (cls,) = [getattr(mod, n) for n in dir(mod) if n.endswith("RotaryEmbedding") and "Vision" not in n]
    return cls(cfg), cfg


@pytest.mark.parametrize("name", sorted(TRANSFORMERS_MODULES))
def test_schedule_is_what_transformers_builds(name):
    # transformers parses the same JSON and builds its rotary module; our torch engine evaluates the
    # schedule's float32 formula with the same torch ops, so every inverse frequency agrees bit for bit.
    # The one parser must give that schedule from every form of the config: the JSON file, the config
    # object the module was built from (read by attribute), that object's to_dict() (Gemma 4's full-attention
    # head_dim 512 survives there only in per_layer_config) and, for the module, schedule_from_config.
    model_type, pick = TRANSFORMERS_MODULES[name]
    mod, cfg = _rotary(model_type, pick(js(name)))
    m = load_config(DATA / name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        as_dict = cfg.to_dict()
    forms = {"object": dict(load_config_dict(cfg).rope), "to_dict": dict(load_config_dict(as_dict).rope)}
    for form, parsed in forms.items():
        assert list(parsed) == [t for t, _ in m.rope], form
    for layer_type, s in m.rope:
        prefix = "" if layer_type == "all" else f"{layer_type}_"
        theirs = getattr(mod, f"{prefix}inv_freq").double().numpy()
        scale = getattr(mod, f"{prefix}attention_scaling")
        module = schedule_from_config(cfg, None if layer_type == "all" else layer_type)
        for form, sched in [("json", s), *((f, p[layer_type]) for f, p in forms.items()), ("module", module)]:
            np.testing.assert_array_equal(sched.inv_freq_in("float32", engine="torch"), theirs,
                                          err_msg=f"{name} {layer_type} {form}")
            assert sched.cos_sin_scale == pytest.approx(scale, rel=1e-15), form


def test_config_objects_are_read_by_attribute():
    # transformers' default config objects (expected values read off the objects themselves, and the rotary
    # module transformers builds from the text config): a multimodal config's text_config object is entered;
    # MPT's attn_config object says ALiBi and its alibi_bias_max
    pytest.importorskip("transformers")
    from transformers import AutoConfig
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RotaryEmbedding

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gemma3, mpt = AutoConfig.for_model("gemma3"), AutoConfig.for_model("mpt")
        mod = Gemma3RotaryEmbedding(gemma3.text_config)
    m = load_config_dict(gemma3)
    assert "read text_config (multimodal config)" in m.notes
    assert (m.model_type, m.max_position_embeddings) == (gemma3.text_config.model_type,
                                                        gemma3.text_config.max_position_embeddings)
    for layer_type, s in m.rope:
        theirs = getattr(mod, f"{layer_type}_inv_freq").double().numpy()
        np.testing.assert_array_equal(s.inv_freq_in("float32", engine="torch"), theirs, err_msg=layer_type)
    a = load_config_dict(mpt)
    assert (a.kind, a.num_heads, a.max_position_embeddings, a.alibi_bias_max) == (
        "alibi", mpt.n_heads, mpt.max_seq_len, mpt.attn_config.alibi_bias_max)


# --------------------------------------------------------------------------- parsing rules


def test_legacy_keys_and_text_config():
    neox = {"model_type": "gpt_neox", "hidden_size": 2048, "num_attention_heads": 16, "rotary_pct": 0.25,
            "rotary_emb_base": 10000, "n_positions": 2048}
    m = load_config_dict(neox)
    s = m.schedule
    assert (s.head_dim, s.rotary_dim, m.max_position_embeddings, m.context_key) == (128, 32, 2048, "n_positions")
    nested = load_config_dict({"model_type": "llava", "text_config": {"model_type": "llama", "head_dim": 64,
                                                                     "seq_length": 1024}})
    assert (nested.model_type, nested.schedule.head_dim, nested.max_position_embeddings) == ("llama", 64, 1024)
    gptj = load_config_dict({"model_type": "gptj", "n_embd": 4096, "n_head": 16, "rotary_dim": 64})
    assert (gptj.schedule.head_dim, gptj.schedule.rotary_dim) == (256, 64)
    su = load_config_dict({"model_type": "phi3", "head_dim": 8, "max_position_embeddings": 8192,
                           "original_max_position_embeddings": 4096,
                           "rope_scaling": {"type": "su", "short_factor": [1, 1, 1, 1], "long_factor": [2, 2, 2, 2]}})
    assert (su.schedule.scaling, su.schedule.factor) == ("longrope", 2.0)


def test_multimodal_rope_keys_are_dropped_with_a_note():
    m = load_config_dict({"model_type": "qwen2_vl", "head_dim": 128,
                          "rope_scaling": {"type": "default", "mrope_section": [16, 24, 24]}})
    assert m.schedule.scaling == "default"
    assert any("mrope_section" in n for n in m.notes)


def test_a_layer_type_without_rope_parameters_parses_alike_in_both_entry_points(tmp_path):
    # transformers 5 maps a layer type with no rotary embedding to null: both readers skip it and agree on the
    # other; expected schedule by hand: head_dim 128, theta 1e6, no scaling (load_config_dict used to fail on
    # "unknown rope parameter 'full_attention'", treating the mapping as one set of parameters)
    cfg = {"model_type": "x", "head_dim": 128, "max_position_embeddings": 8192,
           "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                               "sliding_attention": None}}
    m = load_config_dict(cfg)
    assert [t for t, _ in m.rope] == ["full_attention"] and m.schedule == m.schedule_for("full_attention")
    assert "sliding_attention: no rope parameters (no rotary embedding)" in m.notes
    want = RopeSchedule(head_dim=128, base=1e6)
    assert schedule_from_config(cfg, "full_attention") == m.schedule_for("full_attention") == want
    assert rope_layer_types(cfg) == ("full_attention",)
    with pytest.raises(ValueError, match="'sliding_attention' has no rope parameters"):
        schedule_from_config(cfg, "sliding_attention")
    with pytest.raises(ValueError, match="no layer type has rope parameters"):
        load_config_dict({**cfg, "rope_parameters": {"full_attention": None, "sliding_attention": None}})
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    res = run("config", str(tmp_path), "-l", "256", "-d", "bf16", "-r", "fp32", "--json")
    assert res.exit_code == 0, res.output
    assert {r["layer_type"] for r in json.loads(res.output)["results"] if r["component"] == "rope"} == {
        "full_attention"}


def test_module_reading_differs_only_where_the_module_code_decides():
    # schedule_from_config reads one rotary module's config as transformers' rotary code does: no text_config,
    # no rotary_dim (GPT-J's rotated dims: the modules rotate head_dim x partial factor), hidden // heads
    # floored, mrope refused; load_config_dict describes the model
    gptj = {"model_type": "gptj", "n_embd": 4096, "n_head": 16, "rotary_dim": 64}
    assert (load_config_dict(gptj).schedule.rotary_dim, schedule_from_config(gptj).rotary_dim) == (64, 256)
    odd = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 96}
    assert schedule_from_config(odd).head_dim == 42  # 4096 // 96, as transformers computes it
    with pytest.raises(ValueError, match="not divisible"):
        load_config_dict(odd)
    mrope = {"model_type": "qwen2_vl", "head_dim": 128, "rope_scaling": {"type": "default", "mrope_section": [1]}}
    assert load_config_dict(mrope).schedule.scaling == "default"
    with pytest.raises(ValueError, match="multimodal rope"):
        schedule_from_config(mrope)
    nested = {"model_type": "llava", "text_config": {"model_type": "llama", "head_dim": 64}}
    assert load_config_dict(nested).schedule.head_dim == 64
    with pytest.raises(ValueError, match="no head_dim"):
        schedule_from_config(nested)


def test_per_layer_config_overrides_in_the_json_form():
    # transformers' to_dict() keeps Gemma 4's full-attention head_dim only as per_layer_config (layer index ->
    # overrides); the overrides of a layer type must agree (transformers' own rule for per_layer_config[type])
    cfg = {"model_type": "gemma4_text", "head_dim": 256, "layer_types": ["sliding_attention", "full_attention"] * 2,
           "per_layer_config": {"01": {"head_dim": 512}, "03": {"head_dim": 512}},
           "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                               "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}
    m = load_config_dict(cfg)
    assert (m.schedule_for("full_attention").head_dim, m.schedule_for("sliding_attention").head_dim) == (512, 256)
    assert "head_dim 512 from per_layer_config (head_dim)" in m.notes
    assert schedule_from_config(cfg, "full_attention") == m.schedule_for("full_attention")
    with pytest.raises(ValueError, match="the full_attention layers differ"):
        load_config_dict({**cfg, "per_layer_config": {"01": {"head_dim": 512}}})


@pytest.mark.parametrize("cfg, kind", [
    ({"model_type": "mpt", "n_heads": 32, "d_model": 4096, "max_seq_len": 2048, "attn_config": {"alibi": True}},
     "alibi"),
    ({"model_type": "falcon", "num_attention_heads": 71, "hidden_size": 4544, "alibi": False}, "rope"),
    ({"model_type": "falcon", "num_attention_heads": 8, "hidden_size": 512, "alibi": True}, "alibi"),
    ({"model_type": "baichuan", "num_attention_heads": 32, "hidden_size": 4096, "max_position_embeddings": 4096},
     "rope"),  # Baichuan2-7B
    ({"model_type": "baichuan", "num_attention_heads": 40, "hidden_size": 5120, "model_max_length": 4096},
     "alibi"),  # Baichuan2-13B
    ({"model_type": "x", "num_attention_heads": 4, "hidden_size": 64, "position_embedding_type": "alibi"}, "alibi"),
])
def test_alibi_detection(cfg, kind):
    m = load_config_dict(cfg)
    assert m.kind == kind
    if kind == "alibi":
        assert m.num_heads == next(cfg[k] for k in ("num_attention_heads", "n_heads") if k in cfg)
    if cfg["model_type"] == "mpt":
        assert m.max_position_embeddings == 2048


@pytest.mark.parametrize("cfg, message", [
    ({"model_type": "fancy", "n_embd": 768, "n_head": 12}, "cannot tell the position encoding of model_type 'fancy'"),
    ({"model_type": "llama", "hidden_size": 4096}, "no head_dim, and no hidden_size with num_attention_heads"),
    ({"model_type": "llama", "hidden_size": 100, "num_attention_heads": 3}, "hidden_size 100 is not divisible"),
    ({"model_type": "bloom", "hidden_size": 64}, "ALiBi model without num_attention_heads"),
    ({"model_type": "llama", "head_dim": 64, "rope_scaling": "yarn"}, "must be an object or null"),
    ({"model_type": "llama", "head_dim": 64, "rope_scaling": {"rope_type": "yarn", "factr": 4}},
     "unknown rope parameter 'factr'"),
    ({"model_type": "llama", "head_dim": 64, "max_position_embeddings": 0}, "max_position_embeddings 0 must be"),
    ({"model_type": "llama", "head_dim": 63}, "head_dim 63 must be a positive even integer"),
])
def test_malformed_configs_name_the_problem(cfg, message):
    with pytest.raises(ValueError, match="^cfg.json") as e:
        load_config_dict(cfg, source="cfg.json")
    assert message in str(e.value)


def test_model_config_validates():
    with pytest.raises(ValueError, match="kind 'sinusoid' must be one of rope, alibi, relative, learned"):
        ModelConfig(name="m", model_type="gpt2", kind="sinusoid")
    with pytest.raises(ValueError, match="kind 'relative' needs scheme t5, deberta or xlnet"):
        ModelConfig(name="m", model_type="t5", kind="relative")
    assert default_lengths(load_config(DATA / "bloom-7b1.json")) == (2048, 4096, 8192)  # FALLBACK_CONTEXT, 2x, 4x
    with pytest.raises(ValueError, match="pick one with layer_type"):
        load_config(DATA / "gemma-4-31b-it.json").schedule


# --------------------------------------------------------------------------- verdicts and audit


def test_verdict_rules():
    # RoPE is judged on pairwise errors (precision_audit.verdicts; tests/test_verdicts.py has the calibration):
    # degraded from pi/8, broken from pi/2 or with a collision; the absolute error never enters when pairs exist
    b = cache_rounding_bound("bfloat16")
    assert rope_verdict(math.pi, 0, pair_errors=[(1, 8 * b)]) == "safe"
    assert rope_verdict(math.pi, 0, pair_errors=[(1, math.pi / 8)]) == "degraded"
    assert rope_verdict(0.0, 0, pair_errors=[(4096, math.pi / 2)]) == "broken"
    assert rope_verdict(0.0, 1) == "broken"
    # without pairs, twice the absolute error bounds every pair (triangle inequality)
    assert rope_verdict(math.pi / 16, 0) == "degraded" and rope_verdict(0.19, 0) == "safe"
    assert rope_verdict(float("nan"), 0) == "broken"
    with pytest.raises(TypeError):  # it takes no cache bound (nor ALiBi's tolerance): the former third argument
        rope_verdict(2 * b, 0, b)  # type: ignore[misc]


def _distinct_bf16(n: int) -> int:
    return len(np.unique(np.arange(n, dtype=np.float64).astype(ml_dtypes.bfloat16)))


# relative and learned encodings have no float position-id rows: tests/test_config_relative.py audits them
@pytest.mark.parametrize("name", [n for n in CONFIGS if EXPECTED[n][0] in ("rope", "alibi")])
def test_every_shipped_config_audits(name):
    m = load_config(DATA / name)
    L = 1024
    rows = audit_config(m, [L], ["bfloat16"])
    recipes = {"rope": ("lowp", "lowp-inv-freq", "fp32", "fp64"), "alibi": ("lowp", "cast-output", "relative-cast",
                                                                          "fp32")}[m.kind]
    n_types = len(m.rope) if m.kind == "rope" else 1
    assert len(rows) == n_types * len(recipes) + 1
    for r in rows:
        if r.component == "rope":
            assert r.verdict == rope_verdict(r.max_rotation_error, r.colliding_positions, pair_errors=r.pair_errors)
        if r.component == "alibi":
            assert r.colliding_positions == L - r.min_distinct_biases
    pos = rows[-1]
    assert (pos.component, pos.colliding_positions, pos.verdict) == ("positions", L - _distinct_bf16(L), "broken")
    fp32 = [r for r in rows if r.recipe == "fp32"]
    assert fp32 and all(r.verdict == "safe" for r in fp32)  # the fix is safe at 1K in every model
    lowp = [r for r in rows if r.recipe == "lowp"]  # positions built in bf16 collide above 256
    assert lowp and all(r.verdict == "broken" and r.colliding_positions > 0 for r in lowp)


def test_alibi_rows_match_the_alibi_auditor():
    from precision_audit.alibi import audit_alibi

    rows = audit_config(load_config(DATA / "bloom-7b1.json"), [2048], ["bfloat16"], recipes=["cast-output"],
                        positions=False)
    (a,) = audit_alibi(32, "cast-output", 2048, "bfloat16")
    (r,) = rows
    assert (r.min_distinct_biases, r.max_run, r.max_abs_error) == (a.min_distinct_biases, a.max_run, a.max_abs_error)
    assert r.verdict == alibi_verdict(a) == "broken"


def test_audit_config_errors():
    m = load_config(DATA / "llama-2-7b-hf.json")
    with pytest.raises(ValueError, match="oracle's limit"):
        audit_config(m, [2**27])
    with pytest.raises(ValueError, match="unknown RoPE recipe 'cast-output'"):
        audit_config(m, [64], recipes=["cast-output"])
    with pytest.raises(ValueError, match="tolerance"):
        audit_config(m, [64], tolerance=0)
    with pytest.raises(ValueError, match="verdict 'fine'"):
        ConfigRow(component="rope", recipe="x", dtype="bfloat16", length=1, verdict="fine")


# --------------------------------------------------------------------------- CLI


def test_cli_json():
    res = run("config", str(DATA / "llama-3.1-8b.json"), "-l", "2048", "-d", "bf16", "-r", "fp32", "-r", "lowp",
              "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["auditor"] == "config" and doc["model"]["kind"] == "rope" and doc["model"]["rope"][0]["base"] == 500000
    comp = [(r["component"], r["recipe"], r["dtype"], r["length"]) for r in doc["results"]]
    assert comp == [("rope", "fp32", "bfloat16", 2048), ("rope", "lowp", "bfloat16", 2048),
                    ("positions", "position ids", "bfloat16", 2048)]
    for r in doc["results"]:
        assert {"component", "recipe", "dtype", "length", "max_rotation_error", "mean_rotation_error",
                "colliding_positions", "verdict"} <= set(r)
    assert doc["results"][2]["colliding_positions"] == 2048 - _distinct_bf16(2048)


def test_cli_table_alibi_and_layer_types():
    res = run("config", str(DATA / "baichuan2-13b-base.json"), "-l", "1k", "-d", "fp16")
    assert res.exit_code == 0, res.output
    assert "ALiBi, 40 heads; context 4096 (model_max_length)" in res.output
    assert "cast-output" in res.output and "min distinct" in res.output and "verdict" in res.output
    res = run("config", str(DATA / "gemma-4-31b-it.json"), "-l", "512", "-d", "bf16", "-r", "fp32", "--no-positions")
    assert res.exit_code == 0, res.output
    assert "full_attention" in res.output and "sliding_attention" in res.output and "layer" in res.output
    assert "positions" not in res.output.split("\n\n")[1]


def test_cli_default_lengths_are_context_2x_4x():
    res = run("config", str(DATA / "llama-2-7b-hf.json"), "-d", "bf16", "-r", "fp32", "--json")
    assert res.exit_code == 0, res.output
    assert sorted({r["length"] for r in json.loads(res.output)["results"]}) == [4096, 8192, 16384]


def test_cli_fail_on():
    args = ("config", str(DATA / "llama-2-7b-hf.json"), "-l", "1024", "-d", "bf16", "--no-positions")
    assert run(*args, "-r", "fp32", "--fail-on", "degraded").exit_code == 0
    # a downcast inv_freq drifts by D * (theta - bf16(theta)): 512 apart 0.63 rad (tests/test_verdicts.py's
    # calibration), between pi/8 and pi/2: degraded, not broken
    assert run(*args, "-r", "lowp-inv-freq", "--fail-on", "degraded").exit_code == 1
    assert run(*args, "-r", "lowp-inv-freq", "--fail-on", "broken").exit_code == 0


@pytest.mark.parametrize("content, message", [
    (None, "cannot read: No such file or directory"),
    ("{oops", "not valid JSON"),
    ("[1, 2]", "the top level must be a JSON object, got list"),
    ('{"model_type": "llama", "head_dim": 64, "rope_scaling": {"rope_type": "warp"}}', "unknown rope type 'warp'"),
    ('{"model_type": "fancy", "hidden_size": 64}', "cannot tell the position encoding"),
])
def test_cli_bad_files_exit_2(tmp_path, content, message):
    p = tmp_path / "config.json"
    if content is not None:
        p.write_text(content)
    res = run("config", str(p))
    assert res.exit_code == 2
    assert message in res.output and str(p) in res.output
    assert "Traceback" not in res.output


@pytest.mark.parametrize("args, message", [
    (["-l", "128M"], "exceeds the RoPE oracle's limit 2**26"),
    (["-r", "cast-output"], "unknown RoPE recipe 'cast-output'"),
    (["-d", "fp9"], "unknown dtype 'fp9'"),
    (["--tolerance", "0"], "Invalid value for '--tolerance'"),
])
def test_cli_bad_options_exit_2(args, message):
    res = run("config", str(DATA / "llama-2-7b-hf.json"), *args)
    assert res.exit_code == 2 and message in res.output, res.output


def test_cli_alibi_without_context_is_audited_at_the_fallback_context():
    res = run("config", str(DATA / "bloom-7b1.json"), "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert "declares no context length" in out["context_note"] and "--length" in out["context_note"]
    assert {r["length"] for r in out["results"]} == {2048, 4096, 8192}


def test_cli_directory_holding_config(tmp_path):
    (tmp_path / "config.json").write_text((DATA / "mistral-7b-v0.1.json").read_text())
    res = run("config", str(tmp_path), "-l", "256", "-d", "bf16", "-r", "fp32")
    assert res.exit_code == 0 and "mistralai/Mistral-7B-v0.1" in res.output


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in CONFIGS if EXPECTED[n][0] in ("rope", "alibi")])  # others: no fp32 path
def test_every_shipped_config_at_its_real_context(name):
    m = load_config(DATA / name)
    L = m.max_position_embeddings or 2048  # Bloom declares none; BLOOM was trained on 2048 tokens
    best = "fp64" if m.kind == "rope" else "fp32"  # float64 angles; the float32 ALiBi bias
    rows = audit_config(m, [L], ["bfloat16"], recipes=["fp32", best])
    assert all(r.length == L for r in rows)
    assert all(r.verdict == "safe" for r in rows if r.recipe == best)
    for r in rows:  # the verdict follows its rule at full length too
        if r.component == "rope":
            assert r.verdict == rope_verdict(r.max_rotation_error, r.colliding_positions, pair_errors=r.pair_errors)
            assert r.recipe != "fp64" or r.ratio < 1.0  # float64 angles leave only the cache's own rounding


def test_cli_torch_engine_agrees_with_numpy_on_verdicts():
    args = ("config", str(DATA / "qwen2-7b.json"), "-l", "1024", "-d", "bf16", "--json")
    a = json.loads(run(*args).output)["results"]
    b = json.loads(run(*args, "--engine", "torch").output)["results"]
    assert [(r["recipe"], r["verdict"], r["colliding_positions"]) for r in a] == \
        [(r["recipe"], r["verdict"], r["colliding_positions"]) for r in b]


def test_progress_total_counts_what_the_auditors_report():
    from precision_audit.config import work_to_scan

    seen = []
    m = load_config(DATA / "baichuan2-13b-base.json")
    audit_config(m, [512], ["bf16"], recipes=["fp32", "lowp"], positions=False, progress=seen.append)
    assert sum(seen) == work_to_scan(m, [512], ["bf16"], ["fp32", "lowp"]) == 2 * 512 * 2
    seen.clear()
    m = load_config(DATA / "gemma-4-31b-it.json")
    audit_config(m, [300, 600], ["bf16", "fp16"], recipes=["fp32"], positions=False, progress=seen.append)
    # RoPE: one pass per layer type's schedule (2) over 600 positions serves both dtypes
    assert sum(seen) == work_to_scan(m, [300, 600], ["bf16", "fp16"]) == 600 * 2


@pytest.mark.parametrize("context,defaults", [(2**27, "alone, above 2**22")])
def test_cli_default_lengths_beyond_the_oracle_say_so(tmp_path, context, defaults):
    # above 2**22 the context alone is audited; 2**27 is still beyond the oracle's 2**26
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "llama", "head_dim": 64, "max_position_embeddings": context}))
    res = run("config", str(p))
    assert res.exit_code == 2
    assert "exceeds the RoPE oracle's limit" in res.output and "default lengths are the config's context" in res.output
    assert defaults in res.output


def test_long_contexts_default_to_the_context_alone():
    from precision_audit.config import context_note, default_lengths

    scout = load_config(DATA / "llama-4-scout-17b-16e-instruct.json")
    assert default_lengths(scout) == (10485760,) and "audited at the context only" in context_note(scout)
    assert default_lengths(load_config(DATA / "gemma-4-31b-it.json")) == (262144, 524288, 1048576)


def test_mpt_config_audits_the_models_own_slopes():
    # MPT's alibi_bias_max = 16 halves every slope exponent's step: config must audit those slopes, not the
    # reference rule.  Referees: transformers' build_mpt_alibi_tensor (float32) for the slopes, and the ALiBi
    # auditor called with them for the rows.
    mpt = pytest.importorskip("transformers.models.mpt.modeling_mpt")
    from precision_audit.alibi import audit_alibi, mpt_slopes

    cfg = {"model_type": "mpt", "n_heads": 12, "d_model": 768, "max_seq_len": 2048,
           "attn_config": {"alibi": True, "alibi_bias_max": 16}}
    model = load_config_dict(cfg)
    bias = mpt.build_mpt_alibi_tensor(12, 2, alibi_bias_max=16).double().numpy()  # slope * (k - 1), k = 0, 1
    assert list(model.alibi_slopes()) == pytest.approx((-bias[:, 0, 0]).tolist(), rel=2**-23)
    assert model.alibi_slopes() == tuple(mpt_slopes(12, 16.0).tolist())
    rows = audit_config(model, [2048], ["bfloat16"], positions=False)
    want = audit_alibi(12, ["lowp", "cast-output", "relative-cast", "fp32"], [2048], "bfloat16",
                       slopes=model.alibi_slopes())
    assert [(r.recipe, r.min_distinct_biases, r.max_abs_error) for r in rows] == \
        [(a.recipe, a.min_distinct_biases, a.max_abs_error) for a in want]
    reference = audit_alibi(12, "cast-output", [2048], "bfloat16")[0]
    assert reference.min_distinct_biases != rows[1].min_distinct_biases  # the slopes matter here
