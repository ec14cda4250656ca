"""The serving stacks added for issue 29 (SGLang, TensorRT-LLM, OpenVINO, vLLM before #28244), each against an
independent model of its cited source written here (mpmath for every correctly rounded float32 / float64
operation, ml_dtypes for the casts), or against transformers' own YaRN function where the stack computes what
transformers computes with other settings.  None of these kernels runs on a CPU here (CUDA / TensorRT / the
OpenVINO GPU plugin): their transcendental kernels are modelled correctly rounded, as the stacks' rows say.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import ml_dtypes
import mpmath
import numpy as np
import pytest

from precision_audit.config import load_config, stack_notes
from precision_audit.rope import STACKS, RopeSchedule, audit, cache_rounding_bound, run_recipe, stack, stored_format

DATA = Path(__file__).parent / "data"
F32 = np.float32
S = RopeSchedule(head_dim=128, base=10000.0)
POS = np.array([0, 1, 2, 255, 256, 257, 4095, 4173, 4174, 65519, 131071, 1000003])


def _f32(x: mpmath.mpf) -> float:
    """An mpmath value correctly rounded to float32 (through float64 with round-to-odd: exact for float32)."""
    with mpmath.workprec(300):
        return float(F32(float(mpmath.mpf(x))))  # 300 bits, then float64 (53 bits > 2*24+2): no double rounding


def _pow(x: float, y: float) -> mpmath.mpf:
    with mpmath.workprec(300):
        return mpmath.mpf(x) ** mpmath.mpf(y)


def _torch_style_inv_freq(base: float, d: int) -> np.ndarray:
    """``1.0 / base ** (arange(0, d, 2, float32) / d)`` with every float32 operation correctly rounded."""
    out = []
    for i in range(0, d, 2):
        e = _f32(mpmath.mpf(i) / d)
        p = _f32(_pow(float(F32(base)), e))
        out.append(_f32(mpmath.mpf(1) / mpmath.mpf(p)))
    return np.array(out, dtype=np.float64)


def test_sglang_keeps_the_float32_cache_and_ends_in_the_model_dtype() -> None:
    """SGLang on CUDA (base.py): inv_freq and angles as vLLM's float32 cache, cos/sin kept float32; q/k rotated in
    float32 and stored in the model dtype, so its rows are rows of that dtype (stored_format)."""
    out = run_recipe(stack("sglang", "bf16", S), S, POS)
    inv = _torch_style_inv_freq(S.base, S.rotary)
    assert np.array_equal(out["inv_freq"], inv)
    want = np.array([[_f32(mpmath.mpf(float(F32(p))) * mpmath.mpf(v)) for v in inv] for p in POS])
    assert np.array_equal(out["angle"], want)
    with mpmath.workprec(120):
        cos = np.array([[_f32(mpmath.cos(mpmath.mpf(a))) for a in row] for row in want[[3, 7, 11]]])
    assert np.array_equal(out["cos"][[3, 7, 11]], cos)  # stored float32: no cast to bfloat16
    assert stored_format(stack("sglang", "bf16")) == "bfloat16"
    assert stored_format(stack("sglang-fallback", "bf16")) == "bfloat16"
    fb = run_recipe(stack("sglang-fallback", "bf16", S), S, POS)
    assert np.array_equal(fb["cos"], fb["cos"].astype(ml_dtypes.bfloat16).astype(np.float64))  # the cast cache


def test_sglang_is_at_least_as_accurate_as_vllm() -> None:
    """The float32 cache removes the bfloat16 cache rounding: SGLang's rotation error is its angle error, below
    vLLM's (whose bfloat16 cache adds up to cache_rounding_bound), at every length."""
    rows = audit(S, [stack(n, "bf16", S) for n in ("vllm", "sglang")], [4096, 65536])
    by = {(r.recipe, r.length): r for r in rows}
    for L in (4096, 65536):
        assert by["sglang", L].max_rotation_error <= by["vllm", L].max_rotation_error
        gap = abs(by["sglang", L].max_rotation_error - by["sglang", L].max_angle_error)
        assert gap <= cache_rounding_bound("float32")  # only the float32 cos/sin rounding between them
        assert by["sglang", L].dtype == "bfloat16"


def test_tensorrt_llm_table_frequencies() -> None:
    """create_sinusoidal_positions_for_attention_plugin: ``scale / (theta ** (arange(0, d, 2) / d)).astype(f32)``:
    the exponent and the power in float64 (numpy), the power rounded to float32, the quotient in float32."""
    out = run_recipe(stack("tensorrt-llm", "fp16", S), S, POS)
    want = []
    for i in range(0, 128, 2):
        p64 = float(_pow(10000.0, (i / 128)))  # numpy's float64 power: correctly rounded stands in
        want.append(_f32(mpmath.mpf(1) / mpmath.mpf(float(F32(p64)))))
    assert np.array_equal(out["inv_freq"], np.array(want))
    lin = RopeSchedule(head_dim=64, base=10000.0, scaling="linear", factor=4.0)
    got = run_recipe(stack("tensorrt-llm", "fp16", lin), lin, POS)["inv_freq"]
    for i, v in zip(range(0, 64, 2), got):
        p32 = float(F32(float(_pow(10000.0, i / 64))))
        assert v == _f32(mpmath.mpf(float(F32(0.25))) / mpmath.mpf(p32))


def test_tensorrt_llm_llama3_bands_in_float64() -> None:
    """apply_llama3_scaling on the float32 table frequencies, every operation in float64 (Python floats, numpy < 2
    as TensorRT-LLM pins it), the result rounded once to float32; written element by element as the source loops."""
    s = load_config(DATA / "llama-3.1-8b.json").schedule
    rs = json.loads((DATA / "llama-3.1-8b.json").read_text())["rope_scaling"]
    got = run_recipe(stack("tensorrt-llm", "bf16", s), s, POS)["inv_freq"]
    L0, lo, hi, f = rs["original_max_position_embeddings"], rs["low_freq_factor"], rs["high_freq_factor"], rs["factor"]
    for k, i in enumerate(range(0, 128, 2)):
        inv = float(F32(1.0 / F32(float(_pow(500000.0, i / 128)))))
        wavelen = 2 * math.pi / inv
        if wavelen < L0 / hi:
            new = inv
        elif wavelen > L0 / lo:
            new = inv / f
        else:
            smooth = (L0 / wavelen - lo) / (hi - lo)
            new = (1 - smooth) * inv / f + smooth * inv
        assert got[k] == float(F32(new)), k


def test_tensorrt_llm_kernel_divides_by_the_power() -> None:
    """rotary_embedding_coefficient: ``t_step / pow(base, zid / (float) rot_embed_dim)`` in float32."""
    out = run_recipe(stack("tensorrt-llm-kernel", "bf16", S), S, POS)
    for k, i in enumerate(range(0, 128, 2)):
        e = _f32(mpmath.mpf(i) / 128)
        t = _f32(_pow(10000.0, e))
        col = [_f32(mpmath.mpf(float(F32(p))) / mpmath.mpf(t)) for p in POS]
        assert np.array_equal(out["angle"][:, k], col), k


def _transformers_yarn(path: Path, truncate: bool) -> np.ndarray:
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    raw = json.loads(path.read_text())
    raw["rope_scaling"] = dict(raw["rope_scaling"], truncate=truncate)
    raw.pop("quantization_config", None)
    inv, _ = ROPE_INIT_FUNCTIONS["yarn"](transformers.GptOssConfig(**raw), "cpu")
    return inv.double().numpy()


@pytest.mark.parametrize("name", ["vllm-pre-28244", "tensorrt-llm"])
def test_rounded_ramp_stacks_compute_transformers_truncated_yarn(name: str) -> None:
    """vLLM before #28244 and TensorRT-LLM's create_sinusoidal_positions_yarn round the ramp bounds whatever the
    config says: on gpt-oss (truncate=False declared) their frequencies are transformers' own YaRN frequencies
    with truncate=True (torch's float32 pow on this CPU: within 2 float32 ulps), not the declared ones."""
    model = load_config(DATA / "gpt-oss-20b.json")
    s = model.schedule
    got = run_recipe(stack(name, "bf16", s), s, POS[:3])["inv_freq"]
    rounded, declared = _transformers_yarn(DATA / "gpt-oss-20b.json", True), _transformers_yarn(
        DATA / "gpt-oss-20b.json", False)
    ulp = np.spacing(rounded.astype(np.float32)).astype(np.float64)
    assert (np.abs(got - rounded) <= 2 * ulp).all()
    assert (np.abs(got - declared) > 1e-3 * declared).sum() >= 8  # the ramp's pairs
    note, fix = stack_notes(model, [name])[name]
    assert "(8, 18)" in note and "8.0928, 17.3980" in note and fix


def test_openvino_position_ids_in_float16() -> None:
    """openvino#34716: position ids converted i32 -> f16 before the frequency MatMul: 4173 -> 4172 and
    4174 -> 4176 (float16 spacing 4 in [4096, 8192), ties to even); the fixed path keeps them exact, but its
    inv_freq constant is still f16 (compressed), so its angles drift as m * (theta - fl16(theta))."""
    bad = run_recipe(stack("openvino", "fp16", S), S, np.array([4173, 4174, 2049]))
    assert bad["positions"].tolist() == [4172.0, 4176.0, 2048.0]
    good = run_recipe(stack("openvino-fixed", "fp16", S), S, np.array([4173, 4174]))
    assert good["positions"].tolist() == [4173.0, 4174.0]
    inv16 = _torch_style_inv_freq(10000.0, 128).astype(np.float16).astype(np.float64)
    assert np.array_equal(good["inv_freq"], inv16)
    rows = audit(S, [stack(n, "fp16", S) for n in ("openvino", "openvino-fixed", "vllm")], [4096])
    by = {r.recipe: r for r in rows}
    # float16 keeps 0..2048 (2049 values), 2050..4094 at spacing 2 (1023) and 4095 -> 4096 (tie to even): 3073
    # distinct positions among 4096, so 1023 rows repeat the previous one
    assert by["openvino"].colliding_positions == 4096 - (2049 + 1023 + 1)
    assert by["openvino-fixed"].colliding_positions == 0 and by["openvino-fixed"].max_rotation_error > 0.1


def test_every_new_stack_cites_its_source_and_role() -> None:
    for name in ("vllm-pre-28244", "sglang", "sglang-fallback", "tensorrt-llm", "tensorrt-llm-kernel", "openvino",
                 "openvino-fixed"):
        row = STACKS[name]
        assert row.roles == ("serve",) and ("/" in row.source or "#" in row.source), name
