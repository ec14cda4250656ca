"""GGUF metadata: files written with gguf's own writer (tiny or no tensors), read back as config dicts.

Expected values are the ones written, llama.cpp's documented rules (notes/stacks-llamacpp.md), and for the
Llama-3.1 file the ``rope_freqs`` factors that llama.cpp's converter computes from tests/data/llama-3.1-8b.json:
``LlamaModel.generate_extra_tensors`` (llama.cpp@0c1e57098 ``conversion/llama.py``), re-stated in the same
float32 torch operations (``tests/referees/_ggml_model.py``), with a float64 evaluation of the same formula as an
independent check.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from referees import need  # tests/ helper: the referees' third-party packages and models
from referees._ggml_model import converter_llama3_factors

from precision_audit.config import load_config, load_config_dict
from precision_audit.config.gguf import pair_layout, read_gguf_metadata

gguf = need("gguf")

DATA = Path(__file__).parent / "data"


def _write(path: Path, arch: str, kv: dict[str, Any], tensors: dict[str, np.ndarray] | None = None) -> Path:
    """A GGUF file with the given metadata (method name -> value) and small float32 tensors."""
    w = gguf.GGUFWriter(str(path), arch)
    for method, value in kv.items():
        getattr(w, method)(value)
    for name, data in (tensors or {}).items():
        w.add_tensor(name, np.asarray(data, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _float64_factors(cfg: dict[str, Any]) -> np.ndarray:
    rs, dim = cfg["rope_scaling"], cfg["hidden_size"] // cfg["num_attention_heads"]
    inv = cfg["rope_theta"] ** (-np.arange(0, dim, 2) / dim)
    wl = 2 * np.pi / inv
    s = (rs["original_max_position_embeddings"] / wl - rs["low_freq_factor"]) \
        / (rs["high_freq_factor"] - rs["low_freq_factor"])
    mid = 1 / ((1 - s) / rs["factor"] + s)
    return np.where(wl < rs["original_max_position_embeddings"] / rs["high_freq_factor"], 1.0,
                    np.where(wl > rs["original_max_position_embeddings"] / rs["low_freq_factor"], rs["factor"], mid))


@pytest.fixture(scope="module")
def llama31() -> dict[str, Any]:
    return json.loads((DATA / "llama-3.1-8b.json").read_text())


def _llama31_file(tmp_path: Path, cfg: dict[str, Any]) -> tuple[Path, np.ndarray]:
    ff = converter_llama3_factors(cfg)
    kv = {"add_name": "Llama 3.1 8B", "add_context_length": cfg["max_position_embeddings"],
          "add_embedding_length": cfg["hidden_size"], "add_head_count": cfg["num_attention_heads"],
          "add_head_count_kv": cfg["num_key_value_heads"], "add_rope_dimension_count": 128,
          "add_rope_freq_base": cfg["rope_theta"]}  # what the converter writes: no scaling type for llama3
    return _write(tmp_path / "llama31.gguf", "llama", kv, {"rope_freqs.weight": ff}), ff


def test_llama31_converter_factors_match_float64_formula(llama31: dict[str, Any]) -> None:
    ff = converter_llama3_factors(llama31)
    assert ff.shape == (64,) and ff.dtype == np.float32
    # float32 evaluation vs float64: a handful of float32 roundings, amplified at most ~10x in the band
    np.testing.assert_allclose(ff, _float64_factors(llama31), rtol=2e-6)
    # pair i has wavelength 2 pi 500000**(i/64): below 2048 for i <= 28 (i < 64 ln(2048/2pi)/ln 5e5 = 28.2),
    # above 8192 for i >= 35 (64 ln(8192/2pi)/ln 5e5 = 34.99): 29 ones, 6 banded pairs, 29 eights
    assert (ff == 1).sum() == 29 and (ff == 8).sum() == 29 and ((ff > 1) & (ff < 8)).sum() == 6


def test_llama31_file(tmp_path: Path, llama31: dict[str, Any]) -> None:
    path, ff = _llama31_file(tmp_path, llama31)
    d = read_gguf_metadata(path)
    assert d["model_type"] == "llama" and d["_name_or_path"] == "Llama 3.1 8B"
    assert (d["rope_theta"], d["head_dim"], d["max_position_embeddings"]) == (500000.0, 128, 131072)
    assert (d["hidden_size"], d["num_attention_heads"], d["num_key_value_heads"]) == (4096, 32, 8)
    assert d["rope_scaling"] == {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    g = d["gguf"]
    assert g["freq_factors"] == ff.tolist()  # float32 values, bit for bit
    assert (g["pair_layout"], g["n_rot"], g["n_ctx_orig"], g["rope_scaling_type"]) == ("normal", 128, 131072, None)
    assert g["ggml_rope_ext"] == {"n_dims": 128, "mode": 0, "n_ctx_orig": 131072, "freq_base": 500000.0,
                                  "freq_scale": 1.0, "ext_factor": 0.0, "attn_factor": 1.0,
                                  "beta_fast": 32.0, "beta_slow": 1.0}
    json.dumps(d)  # plain data


def test_llama31_schedule_equals_config_json(tmp_path: Path, llama31: dict[str, Any]) -> None:
    path, _ = _llama31_file(tmp_path, llama31)
    from_gguf = load_config_dict(read_gguf_metadata(path), source=str(path))
    from_json = load_config(DATA / "llama-3.1-8b.json")
    assert from_gguf.kind == "rope" and from_gguf.max_position_embeddings == 131072
    assert from_gguf.rope[0][1] == from_json.rope[0][1]


def test_yarn_file(tmp_path: Path) -> None:
    """Qwen2.5-style YaRN: llama.cpp's freq_scale = 1/factor, ext_factor 1, attn_factor cancelling its mscale."""
    kv = {"add_context_length": 32768, "add_embedding_length": 5120, "add_head_count": 40,
          "add_rope_freq_base": 1e6, "add_rope_scaling_type": gguf.RopeScalingType.YARN,
          "add_rope_scaling_factor": 4.0, "add_rope_scaling_orig_ctx_len": 32768,
          "add_rope_scaling_yarn_beta_fast": 16.0}  # written, but llama.cpp's qwen2 loader does not read it
    d = read_gguf_metadata(_write(tmp_path / "q.gguf", "qwen2", kv))
    assert d["head_dim"] == 128 and d["rope_theta"] == 1e6
    assert d["rope_scaling"] == {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768,
                                 "beta_fast": 32.0, "beta_slow": 1.0}
    k = d["gguf"]["ggml_rope_ext"]
    assert (d["gguf"]["pair_layout"], k["mode"], k["freq_scale"], k["ext_factor"]) == ("neox", 2, 0.25, 1.0)
    # attn_factor * (1 + 0.1 ln 4) is YaRN's 0.1 ln 4 + 1 up to float32 rounding (the kernel multiplies it back)
    assert k["attn_factor"] * (1 + 0.1 * math.log(4)) == pytest.approx(1 + 0.1 * math.log(4), rel=2**-22)
    assert k["attn_factor"] == pytest.approx(1.0, rel=2**-22)
    assert load_config_dict(d).rope[0][1].scaling == "yarn"


def test_yarn_keys_read_per_architecture(tmp_path: Path) -> None:
    """grok's loader reads the yarn keys (beta_fast default 8); mistral3's reads the betas."""
    kv = {"add_context_length": 8192, "add_embedding_length": 6144, "add_head_count": 48,
          "add_rope_freq_base": 10000.0, "add_rope_scaling_type": gguf.RopeScalingType.YARN,
          "add_rope_scaling_factor": 2.0, "add_rope_scaling_orig_ctx_len": 4096}
    k = read_gguf_metadata(_write(tmp_path / "g.gguf", "grok", kv))["gguf"]["ggml_rope_ext"]
    assert (k["beta_fast"], k["beta_slow"], k["ext_factor"]) == (8.0, 1.0, 1.0)
    kv["add_rope_scaling_yarn_beta_fast"], kv["add_rope_scaling_yarn_beta_slow"] = 4.0, 0.5
    d = read_gguf_metadata(_write(tmp_path / "m.gguf", "mistral3", kv))
    assert (d["gguf"]["ggml_rope_ext"]["beta_fast"], d["rope_scaling"]["beta_slow"]) == (4.0, 0.5)


def test_linear_and_partial_and_key_length(tmp_path: Path) -> None:
    kv = {"add_context_length": 16384, "add_embedding_length": 2560, "add_head_count": 32,
          "add_key_length": 80, "add_rope_dimension_count": 32, "add_rope_freq_base": 10000.0,
          "add_rope_scaling_type": gguf.RopeScalingType.LINEAR, "add_rope_scaling_factor": 4.0}
    d = read_gguf_metadata(_write(tmp_path / "p.gguf", "phi2", kv))
    assert (d["head_dim"], d["partial_rotary_factor"], d["gguf"]["n_rot"]) == (80, 0.4, 32)
    assert d["rope_scaling"] == {"rope_type": "linear", "factor": 4.0}
    assert d["gguf"]["ggml_rope_ext"]["freq_scale"] == 0.25
    s = load_config_dict(d).rope[0][1]
    assert (s.scaling, s.rotary) == ("linear", 32)


def _gemma3_kv(**extra: Any) -> dict[str, Any]:
    # Gemma 3 4B's numbers (tests/data/gemma-3-4b-it.json) as llama.cpp's converter writes them
    return {"add_context_length": 131072, "add_embedding_length": 2560, "add_head_count": 8, "add_key_length": 256,
            "add_block_count": 34, "add_rope_freq_base": 1e6, "add_rope_scaling_type": gguf.RopeScalingType.LINEAR,
            "add_rope_scaling_factor": 8.0, "add_sliding_window": 1024, **extra}


def test_gemma3_sliding_layers_as_llama_cpp_builds_them(tmp_path: Path) -> None:
    """llama.cpp's Gemma 3 (load_hparams: set_swa_pattern(6), sliding layers at base 10000, freq_scale 1): the
    same layers and schedules as the model's config.json (transformers' Gemma3TextConfig rule)."""
    d = read_gguf_metadata(_write(tmp_path / "g.gguf", "gemma3", _gemma3_kv()))
    assert (d["num_hidden_layers"], d["sliding_window"], d["rope_local_base_freq"]) == (34, 1024, 10000.0)
    m = load_config_dict(d)
    ref = load_config(DATA / "gemma-3-4b-it.json")
    assert m.layers.layer_types == ref.layers.layer_types and m.layers.sliding_reach == 1023
    for t in ("sliding_attention", "full_attention"):
        assert m.schedule_for(t) == ref.schedule_for(t)
    assert any("fixed base 10000" in n for n in d["gguf"]["notes"])


def test_sliding_window_pattern_keys(tmp_path: Path) -> None:
    """An explicit per-layer array (true: sliding) or period, and the file's own sliding base."""
    flags = [True, True, False, True, True, False]
    d = read_gguf_metadata(_write(tmp_path / "a.gguf", "gemma3", _gemma3_kv(
        add_block_count=6, add_sliding_window_pattern=flags, add_rope_freq_base_swa=20000.0)))
    assert d["layer_types"] == ["sliding_attention", "sliding_attention", "full_attention"] * 2
    assert d["rope_local_base_freq"] == 20000.0
    d = read_gguf_metadata(_write(tmp_path / "k.gguf", "newarch", _gemma3_kv(
        add_block_count=8, add_sliding_window_pattern=4)))
    assert load_config_dict(d).layers.layer_types == ("sliding_attention",) * 3 + ("full_attention",) \
        + ("sliding_attention",) * 3 + ("full_attention",)
    d = read_gguf_metadata(_write(tmp_path / "n.gguf", "llama", {"add_context_length": 4096,
                                                                 "add_embedding_length": 4096, "add_head_count": 32,
                                                                 "add_block_count": 2}))
    assert "sliding_window" not in d and d["num_hidden_layers"] == 2


def test_defaults_without_rope_keys(tmp_path: Path) -> None:
    """No freq_base: llama.cpp's 10000; no dimension_count: embedding_length / head_count."""
    kv = {"add_context_length": 4096, "add_embedding_length": 4096, "add_head_count": 32}
    d = read_gguf_metadata(_write(tmp_path / "m.gguf", "mistral3", kv))
    assert (d["rope_theta"], d["head_dim"], d["rope_scaling"]) == (10000.0, 128, None)
    assert d["gguf"]["freq_factors"] is None and d["gguf"]["pair_layout"] == "normal"
    assert any("10000" in n for n in d["gguf"]["notes"])


def test_unrecognised_freq_factors_kept(tmp_path: Path) -> None:
    ff = np.linspace(1.0, 3.0, 64, dtype=np.float32)
    kv = {"add_context_length": 8192, "add_embedding_length": 4096, "add_head_count": 32,
          "add_rope_freq_base": 10000.0}
    d = read_gguf_metadata(_write(tmp_path / "x.gguf", "llama", kv, {"rope_freqs.weight": ff}))
    assert d["rope_scaling"] is None and d["gguf"]["freq_factors"] == ff.tolist()
    assert any("divides" in n for n in d["gguf"]["notes"])


def test_longrope_factor_tensors(tmp_path: Path) -> None:
    long_f, short_f = np.linspace(1, 40, 48, dtype=np.float32), np.ones(48, dtype=np.float32)
    kv = {"add_context_length": 131072, "add_embedding_length": 3072, "add_head_count": 32,
          "add_rope_freq_base": 10000.0, "add_rope_scaling_type": gguf.RopeScalingType.LONGROPE,
          "add_rope_scaling_orig_ctx_len": 4096}
    d = read_gguf_metadata(_write(tmp_path / "phi3.gguf", "phi3", kv,
                                  {"rope_factors_long.weight": long_f, "rope_factors_short.weight": short_f}))
    assert d["rope_scaling"] == {"rope_type": "longrope", "long_factor": long_f.tolist(),
                                 "short_factor": short_f.tolist(), "original_max_position_embeddings": 4096}
    assert d["gguf"]["pair_layout"] == "neox"


@pytest.mark.parametrize(("content", "match"), [
    (b"", "not a readable GGUF"),
    (b"{\"model_type\": \"llama\"}", "not a readable GGUF"),
    (b"GGUF\x03\x00\x00\x00", "not a readable GGUF"),
])
def test_not_gguf(tmp_path: Path, content: bytes, match: str) -> None:
    p = tmp_path / "bad.gguf"
    p.write_bytes(content)
    with pytest.raises(ValueError, match=match) as e:
        read_gguf_metadata(p)
    assert str(p) in str(e.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no such file"):
        read_gguf_metadata(tmp_path / "absent.gguf")


@pytest.mark.parametrize(("kv", "match"), [
    ({"add_embedding_length": 4096, "add_head_count": 32}, "llama.context_length"),
    ({"add_context_length": 4096}, "rope.dimension_count"),
    ({"add_context_length": 4096, "add_rope_dimension_count": 128, "add_rope_scaling_type":
      gguf.RopeScalingType.YARN}, "rope.scaling.factor"),
])
def test_missing_keys(tmp_path: Path, kv: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        read_gguf_metadata(_write(tmp_path / "k.gguf", "llama", kv))


def test_pair_layouts() -> None:
    """A few architectures from llama.cpp's llama_model_rope_type."""
    assert [pair_layout(a) for a in ("llama", "deepseek2", "qwen2", "gemma3", "phi3", "gpt-oss", "qwen2vl",
                                     "qwen3vl", "bloom", "???")] == \
        ["normal", "normal", "neox", "neox", "neox", "neox", "mrope", "imrope", "none", None]
