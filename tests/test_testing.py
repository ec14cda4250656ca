"""The pytest API (precision_audit.testing) and the README's "Guard your model in CI" example.

Live modules are transformers' own rotary classes (real third-party code) and
small protocol modules written here from the RoPE formula. Their measured
errors are compared with the rope auditor's presets on the same schedule: the
module as built runs the fp32 path, after .to(bfloat16) the lowp-inv-freq
path. torch's cos/sin are faithful, not correctly rounded, so a bf16 cache
value can round the other way than the auditor's near a midpoint: that moves
one rotation by at most 2 cache bounds (each of cos, sin by one bf16 ulp), the
tolerance on the max; the mean over 8K x 64 values moves far less.  That
tolerance hides the fp32 angle's own error (2.4e-4 rad at 8K against 2.8e-3 for
the bf16 cache); a float32 cache shows it, and
``test_fp32_path_told_from_fp64_path_in_a_float32_cache`` tells the two paths
apart there with bounds derived from float32's spacing.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import _thirdparty  # tests/ helper: third-party references, imported and run
import numpy as np
import pytest
import torch

from precision_audit.config import load_config
from precision_audit.rope import audit, cache_rounding_bound, preset, stored_inv_freq
from precision_audit.rope.schedules import RopeSchedule
from precision_audit.testing import (
    assert_config,
    assert_positions,
    assert_rope,
    assert_rope_module,
)
from precision_audit.hf import audit_rope_module

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"


def _llama(max_pos: int = 32768, **kw):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    return LlamaRotaryEmbedding(LlamaConfig(hidden_size=4096, num_attention_heads=32,
                                            max_position_embeddings=max_pos, **kw))


class Rotary(torch.nn.Module):
    """The rotary protocol from the RoPE formula; ``interleaved`` repeats each frequency twice."""

    def __init__(self, dim: int = 64, base: float = 10000.0, interleaved: bool = False, width: int | None = None):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / base ** (torch.arange(0, dim, 2).float() / dim))
        self.interleaved, self.width = interleaved, width

    def forward(self, x, position_ids):
        f = position_ids[..., None].float() * self.inv_freq.float()
        emb = f.repeat_interleave(2, dim=-1) if self.interleaved else torch.cat((f, f), dim=-1)
        emb = emb[..., : self.width] if self.width else emb
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


# --------------------------------------------------------------------------- live modules


def test_llama_module_matches_the_rope_auditor_as_built_and_after_cast():
    sched = RopeSchedule(head_dim=128, base=10000.0)
    L, b = 8192, cache_rounding_bound("bfloat16")
    for module, recipe in ((_llama(), "fp32"), (_llama().to(torch.bfloat16), "lowp-inv-freq")):
        (got,) = audit_rope_module(module, None, L, dtype="bfloat16")
        (want,) = audit(sched, preset(recipe, "bfloat16"), [L])
        assert got.max_rotation_error == pytest.approx(want.max_rotation_error, abs=2 * b), recipe
        assert got.mean_rotation_error == pytest.approx(want.mean_rotation_error, abs=1e-4), recipe
        assert got.colliding_positions == want.colliding_positions == 0
        assert got.verdict == want.verdict, recipe
    # after the cast: fast pairs radians off 4K apart, those that resolve the distance within 2**-8 * 8 pi
    assert got.verdict == "degraded"


def test_longrope_module_above_its_pretraining_context():
    # Phi-3.5 picks its long factors when the longest position exceeds 4096; every chunk carries position
    # length-1, as one full-length forward would, so all 8192 positions use the long factors like the
    # reference.  Without it the first chunk would use the short ones and fail by far.
    import json
    import warnings

    from transformers import Phi3Config
    from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = Phi3Config(**json.loads((DATA / "phi-3.5-mini-instruct.json").read_text()))
    module = Phi3RotaryEmbedding(cfg)
    assert_rope_module(module, length=8192, dtype="bfloat16", config=DATA / "phi-3.5-mini-instruct.json")
    assert_rope_module(module, length=8192, dtype="bfloat16")  # the schedule from module.config


def test_interleaved_and_half_width_layouts():
    sched = RopeSchedule(head_dim=64)
    (a,) = audit_rope_module(Rotary(interleaved=True), sched, 2048)
    (b,) = audit_rope_module(Rotary(), sched, 2048)
    (c,) = audit_rope_module(Rotary(width=32), sched, 2048)
    assert a.max_rotation_error == b.max_rotation_error == c.max_rotation_error
    assert a.verdict == "safe"


def test_module_errors_are_clear():
    with pytest.raises(ValueError, match="returns 48 cos columns; the schedule from its config has 32 frequencies"):
        audit_rope_module(Rotary(width=48), RopeSchedule(head_dim=64), 64)
    with pytest.raises(ValueError, match="has no .config; pass its schedule"):
        audit_rope_module(Rotary(), None, 64)
    with pytest.raises(ValueError, match="max_rotation_error -1"):
        assert_rope_module(Rotary(), length=64, config=RopeSchedule(head_dim=64), max_rotation_error=-1)
    with pytest.raises(ValueError, match="torch has no dtype for float6_e2m3fn"):
        audit_rope_module(Rotary(), RopeSchedule(head_dim=64), 64, dtype="float6_e2m3fn")


def test_explicit_limit_replaces_the_verdict():
    sched = RopeSchedule(head_dim=64)
    (a,) = audit_rope_module(Rotary(), sched, 4096)
    assert_rope_module(Rotary(), length=4096, config=sched, max_rotation_error=a.max_rotation_error)
    with pytest.raises(AssertionError, match=r"limit: max rotation error <= "):
        assert_rope_module(Rotary(), length=4096, config=sched, max_rotation_error=a.max_rotation_error / 2)


def _fp32_angle_error(t32: np.ndarray, theta: np.ndarray, length: int) -> float:
    """max |m * t - m * theta| over positions m < length, the product m * t rounded to float32.

    numpy's float32 multiply is IEEE (correctly rounded), as torch's is: no transcendental kernel, no
    machine-specific bits.  The reference m * theta is float64 (error <= 2**-41 at m * theta < 8192).
    """
    m = np.arange(length, dtype=np.float32)
    prod = (m[:, None] * np.asarray(t32, dtype=np.float32)[None, :]).astype(np.float64)
    return float(np.abs(prod - m.astype(np.float64)[:, None] * theta[None, :]).max())


def test_fp32_path_told_from_fp64_path_in_a_float32_cache():
    # In a bf16 cache both paths are within 2 cache bounds of each other (the bf16 rounding, 2.8e-3 rad,
    # hides an angle error of 2.4e-4), so the comparisons above cannot tell an fp32 angle from a float64
    # one.  In a float32 cache they differ by three orders of magnitude; the bounds, derived:
    #   * fp32 path: the angle m * t_i is a float32 product of exact position m and the float32 frequency
    #     t_i.  Its error is (product rounding) + m * (t_i - theta_i).  The largest angle (L-1) * theta_0 =
    #     8191 lies in [4096, 8192), where float32's spacing is 2**-11: the product rounding is at most
    #     half of that, 2**-12 = 2.4e-4 rad, plus (L-1) * max|t_i - theta_i| from the frequencies.  D, the
    #     max of that angle error over positions and pairs, is computed here with IEEE float32 products.
    #   * cos/sin of the float32 angle stored in float32 move a rotation by at most b32 =
    #     cache_rounding_bound("float32") (8.4e-8 rad) when correctly rounded (the auditor), 2 * b32 when
    #     faithful (torch's kernels: < 1 ulp per component).  So the fp32 row's max error is D +- b32, the
    #     module's D_module +- 2 * b32, and the fp64 path's (angle exact to ~1e-12) at most b32.
    L, sched = 8192, RopeSchedule(head_dim=128, base=10000.0)
    b32, slack = cache_rounding_bound("float32"), 1e-9  # slack: float64 reference angles, ~1e-12
    theta = sched.inv_freq()
    t_recipe = stored_inv_freq(preset("fp32", "float32"), sched)
    # the recipe's float32 frequencies 1 / 10000 ** (2i / 128): the exponent is exact (a power-of-two divisor),
    # the pow and the reciprocal correctly rounded (u = 2**-24 relative each), so |t_i - theta_i| <= 2u theta_i
    bound_t = 2.0**-23 * (1 + 2.0**-20) * theta
    assert np.all(np.abs(t_recipe - theta) <= bound_t)
    D = _fp32_angle_error(t_recipe, theta, L)
    assert D <= 2.0**-12 + (L - 1) * float(bound_t.max()) + slack
    assert D > 1000 * b32  # where the two paths differ: the angle error dwarfs the cache's rounding
    fp32, fp64 = audit(sched, [preset("fp32", "float32"), preset("fp64", "float32")], [L])
    assert abs(fp32.max_rotation_error - D) <= b32 + slack
    assert fp64.max_rotation_error <= b32 + slack
    module = _llama()  # real third-party code, as built: float32 inv_freq buffer, float32 product
    (got,) = audit_rope_module(module, sched, L, dtype="float32")
    D_module = _fp32_angle_error(module.inv_freq.numpy(), theta, L)  # its own buffer (torch's pow)
    assert abs(got.max_rotation_error - D_module) <= 2 * b32 + slack
    assert got.max_rotation_error > 1000 * b32 and got.colliding_positions == 0


def test_bad_arguments_name_the_argument():
    s, r = RopeSchedule(head_dim=64), Rotary()
    cases = [  # (call, error, message): a wrong type is a TypeError (also a ValueError), a wrong value a ValueError
        (lambda: assert_rope(s, "fp32", 64, tolerance=math.nan), ValueError, r"^tolerance nan must be a finite number > 0"),
        (lambda: assert_rope(s, "fp32", 64, tolerance=-1), ValueError, r"^tolerance -1 must be a finite number > 0"),
        (lambda: assert_rope(s, "fp32", 64, tolerance=0), ValueError, r"^tolerance 0 must be a finite number > 0"),
        (lambda: assert_rope(s, "fp32", 64, tolerance="8"), TypeError, r"^tolerance '8' must be a finite number"),
        (lambda: assert_rope(s, "fp32", 64, max_rotation_error=math.nan), ValueError, r"^max_rotation_error nan must"),
        (lambda: assert_rope(None, "fp32", 64), TypeError, r"^schedule None must be a RopeSchedule"),
        (lambda: assert_rope(s, ["fp32"], 64), TypeError, r"^recipe \['fp32'\] must be a preset name or a Recipe"),
        (lambda: assert_rope_module(r, length=64, config=s, tolerance=math.inf), ValueError, r"^tolerance inf must"),
        (lambda: audit_rope_module(None, s, 64), TypeError, r"^module None is not callable"),
        (lambda: audit_rope_module(r, s, 64, layer_type=3), TypeError, r"^layer_type 3 must be a string"),
        (lambda: audit_rope_module(r, s, 64, layer_type="full_attention"), ValueError,
         r"^layer_type 'full_attention' given, but Rotary.forward takes no layer_type"),
        (lambda: audit_rope_module(r, s, 64, chunk=0), ValueError, r"^chunk 0 must be at least 1"),
        (lambda: audit_rope_module(r, "", 64), ValueError, r"^schedule '' is not a usable path \(empty\)"),
        (lambda: audit_rope_module(r, 8, 64), TypeError, r"^schedule 8 is not a RopeSchedule"),
        (lambda: audit_rope_module(r, "a\0b", 64), ValueError, r"^schedule 'a\\x00b' is not a usable path"),
        (lambda: assert_config(""), ValueError, r"^path '' is not a usable path \(empty\)"),
        (lambda: assert_config(None), TypeError, r"^path None must be a config.json path, a config dict"),
        (lambda: assert_config(DATA / "llama-2-7b-hf.json", recipe=5), TypeError, r"^recipe 5 must be a string or None"),
        (lambda: assert_config(DATA / "llama-2-7b-hf.json", stack=5), TypeError, r"^stack 5 must be a string or None"),
        (lambda: assert_config(DATA / "llama-2-7b-hf.json", recipe="fp32", stack="vllm"), ValueError,
         r"^give recipe 'fp32' or stack 'vllm', not both"),
        (lambda: assert_rope(s, length=64), ValueError, r"^give a recipe \(a preset name or a Recipe\) or a stack"),
        (lambda: assert_rope(s, "fp32"), TypeError, r"^length must be given"),
        (lambda: assert_rope(s, length=64, stack="nosuch"), ValueError, r"^unknown stack 'nosuch'"),
        (lambda: assert_config(DATA / "llama-2-7b-hf.json", tolerance=-1), ValueError, r"^tolerance -1 must"),
        (lambda: assert_config(DATA / "llama-2-7b-hf.json", length=0), ValueError, r"^length 0 must be at least 1"),
        (lambda: assert_positions(8, "fp16", exact="no"), TypeError, r"^exact 'no' must be True or False"),
        (lambda: assert_positions(8, "fp16", max_run=1.5), TypeError, r"^max_run 1.5 must be an integer"),
    ]
    for call, error, match in cases:
        with pytest.raises(error, match=match):
            call()


@pytest.mark.parametrize("dtype, length, first, to", [
    # the first integer that rounds above the largest finite value (unbounded exponent, ties to even), from
    # each spec: OCP MX FP4 E2M1 max 6 = 1.1b * 2**2, next 8: 7 is the tie and goes to the even 8; FP6 E2M3
    # max 7.5, next 8; FP6 E3M2 max 28 = 1.11b * 2**4, next 32: the tie 30 goes to 32; IEEE binary16 max
    # 65504, next 65536: the tie 65520 goes up; OFP8 E4M3 max 448, next 480: the tie 464 goes to 448, 465 up
    ("float4_e2m1fn", 100, 7, "saturate to 6"),
    ("float6_e2m3fn", 64, 8, "saturate to 7.5"),
    ("float6_e3m2fn", 64, 30, "saturate to 28"),
    ("float16", 65536, 65520, "inf"),
    ("float8_e4m3fn", 1024, 465, "nan"),
])
def test_overflow_fails_whether_inf_nan_or_saturation(dtype, length, first, to):
    # exact=False allows collisions (positions rounding onto each other), never overflow: a saturated
    # position (float4: 7..99 all stored as 6) is as wrong as inf
    for kw in ({"exact": False}, {"max_run": length}):
        with pytest.raises(AssertionError) as e:
            assert_positions(length, dtype, **kw)
        head = str(e.value).splitlines()[0]
        assert head.endswith(f"{length - first} positions ({first}..{length - 1}) overflow ({to})"), head
    assert_positions(first, dtype, exact=False)  # 0..first-1: collisions at most, no overflow


# --------------------------------------------------------------------------- the README example


def _readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    m = re.search(r"<!-- guard-example: [^>]*-->\n```python\n(.*?)```", text, re.S)
    assert m, "README has no guard-example block"
    return m.group(1)


def test_readme_guard_example_runs(monkeypatch):
    monkeypatch.chdir(ROOT)
    ns: dict = {}
    exec(compile(_readme_example(), "README.md", "exec"), ns)
    tests = sorted(k for k in ns if k.startswith("test_"))
    assert tests == ["test_config_fp32_path", "test_position_ids_stay_exact", "test_rotary_after_model_cast",
                     "test_rotary_as_built"]
    ns["test_rotary_as_built"]()
    ns["test_config_fp32_path"]()
    ns["test_position_ids_stay_exact"]()
    with pytest.raises(AssertionError) as e:
        ns["test_rotary_after_model_cast"]()
    msg = str(e.value).splitlines()
    readme = (ROOT / "README.md").read_text()
    # the README shows this failure: the same first line, column header and verdict
    assert msg[0] == ("rotary module LlamaRotaryEmbedding fails at length 32768 in bfloat16 (limit: verdict safe: "
                      "no colliding positions, pairwise rotation errors < pi/8 = 0.3927 rad)")
    assert "E   AssertionError: " + msg[0] in readme and "E   " + msg[2] in readme
    assert msg[4].split()[:2] == ["bfloat16", "32768"] and msg[4].split()[-2:] == ["0", "degraded"]
    assert math.pi / 8 == pytest.approx(0.3927, abs=5e-5)  # the limit the message states


# --------------------------------------------------------------------------- configs, recipes, positions


def test_assert_config_rope_and_alibi():
    assert_config(DATA / "llama-2-7b-hf.json")
    assert_config(load_config(DATA / "gemma-4-31b-it.json"), length=1024)  # every layer type's schedule
    with pytest.raises(AssertionError) as e:
        assert_config(DATA / "llama-2-7b-hf.json", recipe="lowp")
    assert "broken" in str(e.value) and "colliding" in str(e.value)
    assert_config(DATA / "bloom-7b1.json", length=2048, recipe="fp32")
    with pytest.raises(AssertionError, match="fails on recipe cast-output") as e:
        assert_config(DATA / "bloom-7b1.json", length=2048, recipe="cast-output")
    assert "min distinct" in str(e.value)
    with pytest.raises(ValueError, match="RoPE models only"):
        assert_config(DATA / "bloom-7b1.json", length=2048, max_rotation_error=0.1)
    assert_config(DATA / "bloom-7b1.json")  # no context declared: judged at FALLBACK_CONTEXT (2048), fp32 safe
    with pytest.raises(AssertionError, match="fails on recipe cast-output"):
        assert_config(DATA / "bloom-7b1.json", recipe="cast-output")


def test_assert_rope():
    s = RopeSchedule(head_dim=128)
    assert_rope(s, "fp64", 65536, dtype="float16")
    with pytest.raises(AssertionError, match="RoPE recipe lowp fails at length 1024 in bfloat16") as e:
        assert_rope(s, "lowp", 1024)
    assert "broken" in str(e.value) and "positions integers rounded to bfloat16" in str(e.value)


def _distinct(n: int, dtype: str) -> int:
    import ml_dtypes

    t = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}[dtype]
    with np.errstate(over="ignore"):
        return len(np.unique(np.arange(n, dtype=np.float64).astype(t)))


def test_assert_positions():
    assert_positions(2048, "float16")
    with pytest.raises(AssertionError) as e:
        assert_positions(2050, "float16")  # 2049 rounds to 2048 (ties to even): one collision
    assert f"{2050 - _distinct(2050, 'float16')} positions collide" in str(e.value) and "1st inexact" in str(e.value)
    assert 2050 - _distinct(2050, "float16") == 1
    assert_positions(8192, "bfloat16", max_run=33)
    with pytest.raises(AssertionError, match=r"want max run <= 32"):
        assert_positions(8192, "bfloat16", max_run=32)
    assert_positions(65504, "float16", exact=False)  # collisions allowed
    assert_positions(65520, "float16", exact=False)  # 65519 still rounds to 65504
    with pytest.raises(AssertionError, match="want no overflow"):
        assert_positions(65536, "float16", exact=False)  # 65520 and up round to inf
    with pytest.raises(ValueError, match="max_run 0"):
        assert_positions(8, "float16", max_run=0)


def test_collisions_always_fail_even_with_a_generous_limit():
    s = RopeSchedule(head_dim=64)
    with pytest.raises(AssertionError, match="broken"):
        assert_rope(s, "lowp", 4096, max_rotation_error=math.pi)


def test_transformers_config_object_read_as_transformers_reads_it():
    # Gemma 4's full-attention rotary uses head_dim 512 (global_head_dim), which the config object's
    # to_dict() leaves out: the module's own config must still give its schedule (256 frequencies, the
    # count of the module's inv_freq buffer, real third-party code)
    cls = _thirdparty.private("transformers.models.gemma4.modeling_gemma4", "Gemma4TextRotaryEmbedding")
    cfg = _thirdparty.private("transformers", "Gemma4TextConfig")()
    module = cls(cfg)
    (a,) = audit_rope_module(module, None, 1024, layer_type="full_attention")
    assert module.full_attention_inv_freq.numel() == 256
    assert a.verdict == "safe" and a.colliding_positions == 0
