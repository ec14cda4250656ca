"""The rotary GEMM in TF32 (issue 53): the ``transformers-tf32`` and ``transformers-tl-dot`` stacks, the
``config --matmul-precision high`` switch, and the transformers rows against transformers run on CUDA.

Referees: the recorded NVIDIA H200 outputs in ``tests/data/h200/`` (this project's scripts; see
``tests/data/SOURCES.md``) and closed forms (an 11-bit by 11-bit product has at most 22 significant bits, so
the float32 multiply of one GEMM term is exact).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from precision_audit.cli import main
from precision_audit.config import load_config, model_stacks
from precision_audit.rope import (SETTINGS, STACKS, audit, cache_rounding_bound, recipe_stages, select_stacks,
                                  setting_stacks, stack)
from precision_audit.rope.schedules import schedule_from_rope_parameters

DATA = Path(__file__).parent / "data"
H200 = DATA / "h200"
LLAMA = DATA / "llama-3.1-8b.json"
# the schedule transformers_cuda_rows.py built its LlamaRotaryEmbedding from
LLAMA31 = schedule_from_rope_parameters({"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                         "original_max_position_embeddings": 8192}, head_dim=128)
TF32_STACKS = {"transformers-tf32": ("tf32", "cublas_high_k16"),
               "transformers-tl-dot": ("tf32-rz", "triton_dot_default")}


def test_stacks_are_the_gemm_path() -> None:
    assert setting_stacks("matmul-precision-high") == list(TF32_STACKS)
    for name, (fmt, _) in TF32_STACKS.items():
        r = stack(name, "bf16")
        assert r.stages == {"positions": fmt, "inv_freq": fmt, "angle": "float32", "trig": "float32",
                            "cache": "bfloat16"}
        assert STACKS[name].setting in SETTINGS and STACKS[name].fix and "48450" in STACKS[name].fix
    # not in the groups a user gets without asking for the setting
    for group in ("all", "train", "serve"):
        assert not set(TF32_STACKS) & set(select_stacks([group], ["default"])[0])
    with pytest.raises(ValueError, match="setting"):
        setting_stacks("medium")


def test_gemm_product_on_the_recorded_operands() -> None:
    # The GEMM's two operands as the H200 rounded them (positions and inv_freq, both recorded), multiplied: the
    # tool's angle stage is that product, and it is exact (closed form: 11 x 11 significant bits fit float32).
    pos = np.load(H200 / "tf32_positions_h200.npz")
    vals = np.load(H200 / "tf32_values_h200.npz")
    n0 = int(vals["parts"][0])
    inv32 = vals["x_head"][n0 : n0 + 64]  # Llama-3.1's 64 inv_freq (base 5e5), float32 as torch computes them
    inv_bits = inv32.view(np.int32).astype(np.int64)
    idx = np.arange(0, 131072, 97)
    for name, (fmt, key) in TF32_STACKS.items():
        inv_rec = (inv_bits + vals[f"{key}_minus_x"][n0 : n0 + 64]).astype(np.int32).view(np.float32)
        st = recipe_stages(stack(name, "bf16"), inv32.astype(np.float64), idx)
        np.testing.assert_array_equal(st["positions"], pos[key][idx].astype(np.float64))
        np.testing.assert_array_equal(st["inv_freq"], inv_rec.astype(np.float64))
        exact = pos[key][idx].astype(np.float64)[:, None] * inv_rec.astype(np.float64)[None, :]
        np.testing.assert_array_equal(st["angle"], exact)
        assert np.array_equal(exact.astype(np.float32).astype(np.float64), exact)  # float32 holds it: exact


def test_the_h200_cases_that_stay_exact_are_recorded() -> None:
    # Documented, not modelled as a loss: on the H200 transformers' own K = 1 GEMM stayed exact under "high" at
    # batch 1-16, as did tl.dot with input_precision ieee / tf32x3 and every "highest" GEMM.
    res = json.loads((H200 / "tf32_modes.json").read_text())["results"]
    for key, r in res.items():
        if "highest" in key or key.startswith("transformers shape high") or key in ("triton tl.dot ieee",
                                                                                  "triton tl.dot tf32x3",
                                                                                  "cublas high K=1",
                                                                                  "cublas bmm b=2 high K=1",
                                                                                  "cublas bmm b=2 high K=2"):
            assert (r["exact"], r["max_err"]) == (131072, 0.0), key
        elif key in ("cublas high K=2", "triton tl.dot default") or "high K=" in key:
            assert r["exact"] == 8192, key  # the TF32 count (closed form: tests/test_tf32.py)


def _row(name: str, dtype: str, length: int):
    [row] = audit(LLAMA31, [stack(name, dtype, LLAMA31)], [length], distances=[1])
    return row


def _cuda_rows() -> dict[tuple[bool, str, int], dict]:
    rows = json.loads((H200 / "transformers_cuda_rows.json").read_text())["results"]
    return {(r["cast_to_bf16"], r["cos_sin_dtype"], r["length"]): r for r in rows}


# The bound: the tool evaluates cos/sin correctly rounded in float32; CUDA's cosf / sinf are within 2 ulp (CUDA
# Math API, single precision functions), so a CUDA float32 component is at most 2.5 float32 ulps from the exact
# value against the tool's 0.5: each component 3 ulps apart at most, the rotation at most asin of 3 * sqrt(2)
# ulps, i.e. 6 x the float32 cache bound (half an ulp per component).  Cast to bfloat16, two float32 values that
# close round to the same bfloat16 value or to neighbours: one bfloat16 spacing per component, 2 x the bfloat16
# cache bound.  Every row's max and mean are within that of the recorded ones.
def _bound(dtype: str) -> float:
    return 6 * cache_rounding_bound(dtype) if dtype == "float32" else 2 * cache_rounding_bound(dtype)


@pytest.mark.parametrize("cast, dtype", [(False, "bfloat16"), (False, "float32"), (True, "bfloat16")])
def test_transformers_rows_against_cuda(cast: bool, dtype: str) -> None:
    want = _cuda_rows()[(cast, dtype, 131072)]
    row = _row("transformers-cast" if cast else "transformers", dtype, 131072)
    b = _bound(dtype)
    assert abs(row.max_rotation_error - want["max_rot_err"]) <= b
    assert abs(row.mean_rotation_error - want["mean_rot_err"]) <= b
    if not cast:  # observed: to every printed digit (bf16 0.01121 / 5.933e-4), far inside the bound
        assert f"{row.max_rotation_error:.4g} {row.mean_rotation_error:.4g}" == \
               f"{want['max_rot_err']:.4g} {want['mean_rot_err']:.4g}"


@pytest.mark.slow
@pytest.mark.parametrize("cast", [False, True])
def test_transformers_rows_against_cuda_at_1m(cast: bool) -> None:
    want = _cuda_rows()[(cast, "bfloat16", 1 << 20)]
    row = _row("transformers-cast" if cast else "transformers", "bfloat16", 1 << 20)
    assert abs(row.max_rotation_error - want["max_rot_err"]) <= _bound("bfloat16")
    assert abs(row.mean_rotation_error - want["mean_rot_err"]) <= _bound("bfloat16")


def test_tf32_rows_lose_local_order() -> None:
    # at 131072 positions 8192 are exact: every other position shares its rounded position with a neighbour
    # (closed form for the ids: 131072 - 8193 colliding to nearest, 131072 - 8192 truncated)
    rows = {name: _row(name, "bfloat16", 131072) for name in TF32_STACKS}
    assert rows["transformers-tf32"].colliding_positions == 131072 - 8193
    assert rows["transformers-tl-dot"].colliding_positions == 131072 - 8192
    for r in rows.values():
        assert r.verdict == "broken" and r.max_rotation_error > 3.0
    short = {name: _row(name, "bfloat16", 2048) for name in TF32_STACKS}  # exact positions: only inv_freq's rounding
    for name, r in short.items():
        assert r.colliding_positions == 0, name


def test_model_stacks_matmul_precision() -> None:
    m = load_config(LLAMA)
    plain = model_stacks(m)[0]
    high = model_stacks(m, matmul_precision="high")[0]
    assert high == plain + list(TF32_STACKS)
    with pytest.raises(ValueError, match="matmul_precision"):
        model_stacks(m, matmul_precision="medium")


def test_config_cli_matmul_precision_high() -> None:
    res = CliRunner().invoke(main, ["config", str(LLAMA), "-l", "128K", "--stack", "transformers",
                                    "--matmul-precision", "high", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    by = {s["path"]: s for s in doc["summary"]}
    assert list(by) == ["transformers", *TF32_STACKS]
    assert "48450" in json.dumps(by["transformers-tf32"])
    # judged: the TF32 paths fail --fail-on broken
    res = CliRunner().invoke(main, ["config", str(LLAMA), "-l", "128K", "--stack", "transformers",
                                    "--matmul-precision", "high", "--fail-on", "broken"])
    assert res.exit_code == 1
    res = CliRunner().invoke(main, ["config", str(LLAMA), "-l", "128K", "--matmul-precision", "medium"])
    assert res.exit_code == 2 and "medium" in res.output
    # with a recipe named, the TF32 stacks run beside it (and no other stack)
    doc = json.loads(CliRunner().invoke(main, ["config", str(LLAMA), "-l", "2K", "-r", "fp32", "--no-positions",
                                               "--matmul-precision", "high", "--json"]).output)
    assert {s["path"] for s in doc["summary"]} == {"fp32", *TF32_STACKS}
    bloom = CliRunner().invoke(main, ["config", str(DATA / "bloom-7b1.json"), "--matmul-precision", "high"])
    assert bloom.exit_code == 2 and "ALiBi" in bloom.output
