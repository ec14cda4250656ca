"""Per-layer facts: NoPE layers and Llama 4's attention temperature.

Referees: transformers' own config classes (Llama4TextConfig, SmolLM3Config: their ``no_rope_layers``, run here);
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
    assert load_config(DATA / "gemma-3-4b-it.json").layers is None


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
