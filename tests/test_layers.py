"""Per-layer facts: NoPE layers, sliding-window and chunked layers, and Llama 4's attention temperature.

Referees: transformers' own config classes (Llama4TextConfig, SmolLM3Config: their ``no_rope_layers``; the
``layer_types`` and ``sliding_window`` of every family whose rule the tool models; run here) and its mask overlays
(how far back a sliding or chunked layer attends);
the temperature's position term against closed forms (bfloat16 keeps 8 significant bits: spacing 32 on
[4096, 8192), so 8176 .. 8190 round up to 8192 (8176 a tie, to the even 8192); float16: spacing 4 there, 8190 a
tie rounding up, and values from 65520 on overflow to inf; float32 integers exact to 2**24).
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest

from precision_audit.config import load_config
from precision_audit.config.layers import AttnTemperature, layer_facts, temperature_audit, temperature_lines

DATA = Path(__file__).parent / "data"
T = AttnTemperature(8192, 0.1)


@pytest.mark.parametrize("name,cls,text", [("llama-4-scout-17b-16e-instruct.json", "Llama4TextConfig", True),
                                           ("smollm3-3b.json", "SmolLM3Config", False)])
def test_nope_layers_are_transformers(name, cls, text):
    transformers = pytest.importorskip("transformers")
    j = json.loads((DATA / name).read_text())
    j = j["text_config"] if text else j
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = getattr(transformers, cls)(**{k: v for k, v in j.items() if k != "model_type"})
        derived = getattr(transformers, cls)(**{k: v for k, v in j.items() if k not in ("model_type",
                                                                                          "no_rope_layers")})
    theirs = tuple(i for i, v in enumerate(cfg.no_rope_layers) if not v)
    assert layer_facts(j).nope_layers == theirs == tuple(i for i, v in enumerate(derived.no_rope_layers) if not v)
    m = load_config(DATA / name)
    assert m.layers.nope_layers == theirs and len(theirs) == cfg.num_hidden_layers // 4
    assert f"RoPE in {cfg.num_hidden_layers - len(theirs)} of {cfg.num_hidden_layers} layers (NoPE: 3, 7, " \
        in m.describe()


def test_llama4_facts():
    m = load_config(DATA / "llama-4-scout-17b-16e-instruct.json")
    f = m.layers
    assert f.interleaved and f.chunk_size == 8192 and f.temperature == T
    assert m.to_dict()["layers"]["temperature"] == {"floor_scale": 8192, "attn_scale": 0.1}
    assert load_config(DATA / "llama-3.1-8b.json").layers is None


def test_temperature_float32_is_exact_to_2_24():
    assert temperature_audit(T, "float32", 2**24)["wrong"] == 0


def test_temperature_bfloat16_closed_form():
    r = temperature_audit(T, "bfloat16", 8192)
    assert (r["wrong"], r["first_wrong"]) == (15, 8176)  # 8176 .. 8190
    assert r["max_scale_error"] == pytest.approx(0.1 * math.log(2), rel=1e-15)  # floor term 1 instead of 0
    # next boundary 16384: spacing 64 on [8192, 16384), 16352 a tie to the even 16384: 16352 .. 16382 (31)
    assert temperature_audit(T, "bfloat16", 16384)["wrong"] == 15 + 31


def test_temperature_float16_closed_form():
    r = temperature_audit(T, "float16", 65536)
    assert r["first_wrong"] == 8190 and r["first_nonfinite"] == 65520
    assert temperature_audit(T, "float16", 8192)["wrong"] == 1
    assert not math.isfinite(r["max_scale_error"])


def test_temperature_exact_matches_float64_closed_form():
    p = np.array([0, 8190, 8191, 16383, 10485759])
    want = [1.0, 1.0, 1 + 0.1 * math.log(2), 1 + 0.1 * math.log(3), 1 + 0.1 * math.log(1281)]
    np.testing.assert_allclose(T.exact(p), want, rtol=1e-15)


def test_temperature_lines():
    m = load_config(DATA / "llama-4-scout-17b-16e-instruct.json")
    lines = temperature_lines(m.layers, ["bfloat16", "float32", "float16"], 65536)
    assert "float32 from int64 positions (exact to 65536" in lines[0]
    assert lines[1].startswith("  positions in bfloat16:") and "first at 8176" in lines[1]
    assert "the scale is inf from position 65520" in lines[2]
    assert temperature_lines(load_config(DATA / "smollm3-3b.json").layers, ["bfloat16"], 4096) == []


@pytest.mark.parametrize("bad,match", [({"no_rope_layers": [1, 2]}, "must be a list of 0 / 1 flags"),
                                       ({"no_rope_layers": [1, 0, 1]}, "has 3 flags; num_hidden_layers is 4"),
                                       ({"no_rope_layer_interval": 0}, "no_rope_layer_interval 0 must be"),
                                       ({"floor_scale": -1}, "floor_scale -1 must be a finite number > 0")])
def test_bad_layer_fields(bad, match):
    with pytest.raises(ValueError, match=match):
        layer_facts({"model_type": "llama4_text", "num_hidden_layers": 4, "attn_temperature_tuning": True, **bad})


# (model_type, config class, fields): each family's rule for layer_types, exercised off its defaults
_WINDOW_FAMILIES = [
    ("gemma2", "Gemma2Config", {"num_hidden_layers": 5, "sliding_window": 512}),
    ("gemma3_text", "Gemma3TextConfig", {"num_hidden_layers": 13, "sliding_window": 1024}),
    ("gemma3_text", "Gemma3TextConfig", {"num_hidden_layers": 9, "sliding_window": 1024, "sliding_window_pattern": 3}),
    ("gemma3_text", "Gemma3TextConfig", {"num_hidden_layers": 6, "sliding_window": 1024,
                                         "use_bidirectional_attention": True}),
    ("cohere2", "Cohere2Config", {"num_hidden_layers": 8, "sliding_window": 4096}),
    ("cohere2", "Cohere2Config", {"num_hidden_layers": 8, "sliding_window": 4096, "sliding_window_pattern": 3}),
    ("gpt_oss", "GptOssConfig", {"num_hidden_layers": 6, "sliding_window": 128}),
    ("olmo3", "Olmo3Config", {"num_hidden_layers": 8, "sliding_window": 4096}),
    ("mistral", "MistralConfig", {"num_hidden_layers": 4, "sliding_window": 4096}),
    ("mistral", "MistralConfig", {"num_hidden_layers": 4, "sliding_window": None}),
    ("mixtral", "MixtralConfig", {"num_hidden_layers": 4, "sliding_window": 4096}),
    ("phi3", "Phi3Config", {"num_hidden_layers": 4, "sliding_window": 2047}),
    ("starcoder2", "Starcoder2Config", {"num_hidden_layers": 4, "sliding_window": 4096}),
    ("ministral", "MinistralConfig", {"num_hidden_layers": 4, "sliding_window": 4096}),
    ("qwen2", "Qwen2Config", {"num_hidden_layers": 6, "sliding_window": 4096, "use_sliding_window": True,
                              "max_window_layers": 4}),
    ("qwen2", "Qwen2Config", {"num_hidden_layers": 6, "sliding_window": 4096, "use_sliding_window": False}),
    ("qwen3", "Qwen3Config", {"num_hidden_layers": 6, "sliding_window": 4096, "use_sliding_window": True,
                              "max_window_layers": 2}),
    ("qwen2", "Qwen2Config", {"num_hidden_layers": 6, "sliding_window": 4096}),  # use_sliding_window: off
    ("exaone4", "Exaone4Config", {"num_hidden_layers": 8, "sliding_window": 4096}),
    ("exaone4", "Exaone4Config", {"num_hidden_layers": 8, "sliding_window": 64, "sliding_window_pattern": 3}),
    ("gemma3n_text", "Gemma3nTextConfig", {"num_hidden_layers": 7, "sliding_window": 64}),
    ("afmoe", "AfmoeConfig", {"num_hidden_layers": 9, "sliding_window": 64}),
    ("afmoe", "AfmoeConfig", {"num_hidden_layers": 9, "sliding_window": 64, "global_attn_every_n_layers": 3}),
    ("granite_swa", "GraniteSWAConfig", {"num_hidden_layers": 9, "sliding_window": 64}),
    ("granitemoe_swa", "GraniteMoeSWAConfig", {"num_hidden_layers": 9, "sliding_window": 64}),
    ("cwm", "CwmConfig", {"num_hidden_layers": 9, "sliding_window": 64}),
    ("gemma4_text", "Gemma4TextConfig", {"num_hidden_layers": 8, "sliding_window": 64}),
    # fields left out: the config class's own defaults (layer count, window)
    ("gemma3_text", "Gemma3TextConfig", {"sliding_window_pattern": 6}),
    ("gemma2", "Gemma2Config", {}),
    ("cohere2", "Cohere2Config", {"sliding_window": 512}),
    ("gpt_oss", "GptOssConfig", {"num_hidden_layers": 4}),
    ("mistral", "MistralConfig", {}),
    ("gemma4_text", "Gemma4TextConfig", {}),
]


@pytest.mark.parametrize("model_type,cls,fields", _WINDOW_FAMILIES,
                         ids=[f"{c}-{i}" for i, (_, c, _f) in enumerate(_WINDOW_FAMILIES)])
def test_sliding_layers_are_transformers(model_type, cls, fields):
    """Each modelled family's layer_types and window, from the config.json fields alone, as its config class
    derives them; the reach from transformers' mask overlays (called on indices)."""
    transformers = pytest.importorskip("transformers")
    masking = pytest.importorskip("transformers.masking_utils")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = getattr(transformers, cls)(**fields)
    f = layer_facts({"model_type": model_type, **fields})
    theirs = tuple(cfg.layer_types) if getattr(cfg, "layer_types", None) else None
    window = cfg.sliding_window or None  # Qwen2-MoE style 0 / None: off
    if theirs is None:  # no layer_types attribute: every layer is passed config.sliding_window
        theirs = ("sliding_attention" if window else "full_attention",) * cfg.num_hidden_layers
    assert f.layer_types in (theirs, ()) and (f.layer_types == theirs or "sliding_attention" not in theirs)
    if "sliding_attention" not in theirs:
        assert f.sliding_reach is None and f.max_distance("sliding_attention") is None
        return
    assert f.sliding_window == fields.get("sliding_window", cfg.sliding_window)  # as config.json gives it
    if fields.get("use_bidirectional_attention"):
        inner = masking.sliding_window_bidirectional_overlay(window)
    else:
        inner = masking.sliding_window_overlay(window)
    q = 10 * window
    seen = [q - k for k in range(q + 1) if inner(0, 0, q, k) and k <= q]
    assert f.sliding_reach == max(seen) and f.max_distance("sliding_attention") == max(seen)


def test_chunked_reach_is_transformers():
    """Llama 4's RoPE layers attend in chunks: the farthest key a query sees is chunk - 1 back (the overlay)."""
    torch = pytest.importorskip("torch")
    masking = pytest.importorskip("transformers.masking_utils")
    inner = masking.chunked_overlay(8192, torch.zeros(1, dtype=torch.long))
    far = max(q - k for q in (8191, 8192, 3 * 8192 - 1) for k in range(q + 1) if bool(inner(0, 0, q, k)))
    m = load_config(DATA / "llama-4-scout-17b-16e-instruct.json")
    assert m.layers.max_distance("all") == far == 8191


def test_windowed_rows_judge_only_what_the_layer_sees():
    """Gemma 3's sliding layers: the rows carry pairs up to 1023 apart (and their verdict is the rule's on
    them); the full-attention layers keep every default distance. The same audit with those distances asked
    explicitly gives the same rows (an independent path through rope.audit)."""
    from precision_audit.config import audit_config
    from precision_audit.rope import audit
    from precision_audit.verdicts import rope_verdict

    m = load_config(DATA / "gemma-3-4b-it.json")
    rows = audit_config(m, [32768], ["bfloat16"], recipes=["lowp-inv-freq"], positions=False)
    by = {r.layer_type: r for r in rows}
    sl, full = by["sliding_attention"], by["full_attention"]
    assert [p.distance for p in sl.pair_errors] == [1, 16, 256, 1023] and sl.max_distance == 1023
    assert [p.distance for p in full.pair_errors] == [1, 16, 256, 4096, 16384] and full.max_distance is None
    ref = audit(m.schedule_for("sliding_attention"), ["lowp-inv-freq"], [32768], ["bfloat16"],
                distances=[1, 16, 256, 1023])[0]
    assert ref.pair_errors == sl.pair_errors
    assert sl.verdict == rope_verdict(ref.max_rotation_error, ref.colliding_positions, pair_errors=ref.pair_errors)


def test_gemma3_1b_sliding_layers_see_511_back():
    """The public Gemma 3 1B config (sliding_window 512, sliding_window_pattern 6, 26 layers): Gemma3TextConfig's
    layer_types, and the sliding rows judged on pairs up to 511 apart only."""
    transformers = pytest.importorskip("transformers")
    from precision_audit.config import audit_config

    raw = json.loads((DATA / "gemma-3-1b-it.json").read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = tuple(transformers.Gemma3TextConfig(**{k: v for k, v in raw.items() if k != "model_type"})
                       .layer_types)
    m = load_config(DATA / "gemma-3-1b-it.json")
    assert m.layers.layer_types == theirs and theirs.count("sliding_attention") == 22
    assert m.layers.describe() == "22 of 26 layers attend a sliding window (sliding_window 512: up to 511 back)"
    rows = audit_config(m, [8192], ["bfloat16"], recipes=["lowp-inv-freq"], positions=False)
    by = {r.layer_type: r for r in rows}
    assert by["sliding_attention"].max_distance == 511 and by["full_attention"].max_distance is None
    assert max(p.distance for p in by["sliding_attention"].pair_errors) == 511


def test_window_reaching_the_length_changes_nothing():
    from precision_audit.config import audit_config

    m = load_config(DATA / "gemma-3-4b-it.json")
    rows = audit_config(m, [1024], ["bfloat16"], recipes=["lowp-inv-freq"], positions=False)
    assert all(r.max_distance is None for r in rows)
    assert [p.distance for p in rows[0].pair_errors] == [1, 16, 256, 512, 1023]


@pytest.mark.parametrize("cls", ["Gemma3TextConfig", "Cohere2Config", "Exaone4Config"])
def test_any_family_with_an_integer_sliding_window_pattern_follows_the_classes_that_read_it(cls):
    # a model_type the project does not know, with the field every transformers class that reads it (Gemma 3,
    # Cohere 2, EXAONE 4) reads the same way: one full-attention layer at the end of every k
    transformers = pytest.importorskip("transformers")
    fields = {"num_hidden_layers": 10, "sliding_window": 256, "sliding_window_pattern": 3}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = tuple(getattr(transformers, cls)(**fields).layer_types)
    f = layer_facts({"model_type": "somenewlm", **fields})
    assert f.layer_types == theirs and f.max_distance("sliding_attention") == 255
    assert f.describe() == "7 of 10 layers attend a sliding window (sliding_window 256: up to 255 back)"


def test_gemma3_config_without_a_layer_count_judges_its_sliding_layers_within_the_window():
    # the public Gemma 3 4B config as a new user might write it, without num_hidden_layers: Gemma3TextConfig
    # builds its default 26 layers (every 6th full, sliding_window_pattern 6); the sliding layers' rows judge
    # pairs up to 1023 apart, the full ones every default distance
    from precision_audit.config import audit_config, load_config_dict

    raw = json.loads((DATA / "gemma-3-4b-it.json").read_text())
    del raw["text_config"]["num_hidden_layers"]
    m = load_config_dict(raw, name="gemma-3-no-layer-count")
    assert m.layers.layer_types == tuple("full_attention" if (i + 1) % 6 == 0 else "sliding_attention"
                                         for i in range(26))
    assert "not modelled" not in m.layers.describe()
    assert m.layers.describe().startswith("22 of 26 (num_hidden_layers not given: the config class's default) ")
    rows = audit_config(m, [32768], ["bfloat16"], recipes=["lowp-inv-freq"], positions=False)
    by = {r.layer_type: r for r in rows}
    assert by["sliding_attention"].max_distance == 1023 and by["full_attention"].max_distance is None
    assert max(p.distance for p in by["sliding_attention"].pair_errors) == 1023


def test_a_config_object_keeps_its_own_fields():
    # a live config object already holds its class's defaults: an explicit null window stays off (Mistral v0.2+)
    transformers = pytest.importorskip("transformers")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        off, on = (transformers.MistralConfig(num_hidden_layers=2, sliding_window=w) for w in (None, 64))
    assert layer_facts(off).sliding_reach is None and layer_facts(off).layer_types == ()
    assert layer_facts(on).max_distance("all") == 63
    assert layer_facts({"model_type": "mistral", "num_hidden_layers": 2, "sliding_window": None}).sliding_reach is None


def test_unknown_family_window_is_said_not_used():
    f = layer_facts({"model_type": "somenewlm", "num_hidden_layers": 4, "sliding_window": 256})
    assert f.sliding_reach is None and f.max_distance("all") is None
    assert "sliding_window 256 declared, but which layers use it is not modelled" in f.describe()
    g = layer_facts({"model_type": "somenewlm", "num_hidden_layers": 2, "sliding_window": 256,
                     "layer_types": ["sliding_attention", "sliding_attention"]})
    assert g.max_distance("all") == 255


def test_bad_layer_types():
    with pytest.raises(ValueError, match="layer_types"):
        layer_facts({"model_type": "gemma2", "num_hidden_layers": 3, "layer_types": ["sliding_attention"]})
