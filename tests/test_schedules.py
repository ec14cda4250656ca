"""Every rope type against the real third-party code: transformers' ROPE_INIT_FUNCTIONS and rotary modules.

Referees (all imported and run, never copied):
* transformers' ``ROPE_INIT_FUNCTIONS`` (and a model's ``compute_default_rope_parameters``):
  the torch engine runs the same float32 operations on the same machine, so it must agree
  bit for bit; the numpy engine (every operation correctly rounded) within a bound derived
  below; the float64 reference within the float32 evaluation's own error.
* transformers' rotary modules built from public configs (no weights): their cos/sin at
  positions 0..L-1 for a bfloat16 model, rotation error against float64 angles, as built and
  after ``module.to(torch.bfloat16)`` (what ``model.to`` does), against ``precision-audit rope``.
* mpmath, for the correctly rounded float32 evaluation of one formula, step by step.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import _thirdparty  # tests/ helper: third-party references, imported and run
from _engine_bound import assert_engines_within_bound, engine_bound
import mpmath
import numpy as np
import pytest

from precision_audit.rope import audit, preset
from precision_audit.rope.schedules import ROPE_TYPES, RopeSchedule, schedule_from_rope_parameters, ulp_distance

DATA = Path(__file__).parent / "data"
PHI35 = json.loads((DATA / "phi-3.5-mini-instruct.json").read_text())


def _tf(name: str) -> Any:
    """A transformers attribute ``module:name``, or skip with the reason (names move between releases)."""
    mod, _, attr = name.rpartition(":")
    return _thirdparty.private(mod, attr)


# name -> (config class, rotary module class, config kwargs, our schedule, forward extra args)
# Public configs: Llama-2-7B, Llama-3.1-8B, Qwen2-7B, the Qwen2.5 YaRN recipe, gpt-oss-20b, DeepSeek-V3,
# Phi-3.5-mini-instruct, Gemma 4 (transformers' default text config); linear and dynamic: parameter sets.
def _cases() -> dict[str, tuple[str, str, dict[str, Any], RopeSchedule, tuple[Any, ...]]]:
    llama = ("transformers:LlamaConfig", "transformers.models.llama.modeling_llama:LlamaRotaryEmbedding")
    qwen2 = ("transformers:Qwen2Config", "transformers.models.qwen2.modeling_qwen2:Qwen2RotaryEmbedding")
    dims = dict(hidden_size=4096, num_attention_heads=32)
    rp_llama3 = dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                     original_max_position_embeddings=8192)
    rp_qyarn = dict(rope_type="yarn", rope_theta=1000000.0, factor=4.0, original_max_position_embeddings=32768)
    rp_gptoss = dict(rope_type="yarn", rope_theta=150000.0, factor=32.0, beta_fast=32.0, beta_slow=1.0,
                     truncate=False, original_max_position_embeddings=4096)
    rp_dsv3 = dict(rope_type="yarn", rope_theta=10000.0, factor=40.0, mscale=1.0, mscale_all_dim=1.0, beta_fast=32.0,
                   beta_slow=1.0, original_max_position_embeddings=4096)
    rp_phi = dict(rope_type="longrope", rope_theta=PHI35["rope_theta"],
                  original_max_position_embeddings=PHI35["original_max_position_embeddings"],
                  short_factor=PHI35["rope_scaling"]["short_factor"], long_factor=PHI35["rope_scaling"]["long_factor"])
    return {
        "default-llama2": (*llama, dict(head_dim=128, **dims, max_position_embeddings=4096,
                                        rope_parameters=dict(rope_type="default", rope_theta=10000.0)),
                           RopeSchedule(head_dim=128, base=10000.0), ()),
        "default-qwen2": (*qwen2, dict(hidden_size=3584, num_attention_heads=28, max_position_embeddings=131072,
                                       rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
                          RopeSchedule(head_dim=128, base=1000000.0), ()),
        "linear": (*llama, dict(head_dim=128, **dims, max_position_embeddings=16384,
                                rope_parameters=dict(rope_type="linear", rope_theta=10000.0, factor=4.0)),
                   RopeSchedule(head_dim=128, scaling="linear", factor=4.0), ()),
        "dynamic": (*llama, dict(head_dim=128, **dims, max_position_embeddings=4096,
                                 rope_parameters=dict(rope_type="dynamic", rope_theta=10000.0, factor=2.0)),
                    schedule_from_rope_parameters(dict(rope_type="dynamic", rope_theta=10000.0, factor=2.0),
                                                  head_dim=128, max_position_embeddings=4096), ()),
        "yarn-qwen2.5": (*qwen2, dict(hidden_size=3584, num_attention_heads=28, max_position_embeddings=131072,
                                      rope_parameters=rp_qyarn),
                         schedule_from_rope_parameters(rp_qyarn, head_dim=128), ()),
        "yarn-gpt-oss": ("transformers:GptOssConfig",
                         "transformers.models.gpt_oss.modeling_gpt_oss:GptOssRotaryEmbedding",
                         dict(head_dim=64, max_position_embeddings=131072, rope_parameters=rp_gptoss),
                         schedule_from_rope_parameters(rp_gptoss, head_dim=64), ()),
        "yarn-deepseek-v3": ("transformers:DeepseekV3Config",
                             "transformers.models.deepseek_v3.modeling_deepseek_v3:DeepseekV3RotaryEmbedding",
                             dict(qk_rope_head_dim=64, max_position_embeddings=163840, rope_parameters=rp_dsv3),
                             schedule_from_rope_parameters(rp_dsv3, head_dim=64), ()),
        "longrope-phi-3.5": ("transformers:Phi3Config", "transformers.models.phi3.modeling_phi3:Phi3RotaryEmbedding",
                             dict(hidden_size=3072, num_attention_heads=32, max_position_embeddings=131072,
                                  original_max_position_embeddings=4096, rope_parameters=dict(rp_phi)),
                             schedule_from_rope_parameters(rp_phi, head_dim=96, max_position_embeddings=131072), ()),
        "llama3": (*llama, dict(head_dim=128, **dims, max_position_embeddings=131072, rope_parameters=rp_llama3),
                   schedule_from_rope_parameters(rp_llama3, head_dim=128), ()),
        "proportional-gemma4": ("transformers:Gemma4TextConfig",
                                "transformers.models.gemma4.modeling_gemma4:Gemma4TextRotaryEmbedding", {},
                                schedule_from_rope_parameters(dict(rope_type="proportional", rope_theta=1000000.0,
                                                                   partial_rotary_factor=0.25), head_dim=512),
                                ("full_attention",)),
    }


CASES = _cases()


def test_cases_cover_every_rope_type():
    assert {c[3].scaling for c in CASES.values()} == set(ROPE_TYPES)


def _build(name: str) -> tuple[Any, RopeSchedule, tuple[Any, ...]]:
    cfg_cls, mod_cls, kwargs, sched, extra = CASES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = _tf(cfg_cls)(**kwargs)
        return (_tf(mod_cls), cfg), sched, extra


def _init_fn(name: str, cfg: Any) -> Any:
    """transformers' own inverse-frequency function for this case (the module's rope_init_fn)."""
    kind = CASES[name][3].scaling
    if kind == "default":
        return lambda c, seq_len=None: _tf(CASES[name][1]).compute_default_rope_parameters(c)
    fn = _tf("transformers.modeling_rope_utils:ROPE_INIT_FUNCTIONS")[kind]
    if name == "proportional-gemma4":
        return lambda c, seq_len=None: fn(c.per_layer_config["full_attention"], "cpu", seq_len=seq_len,
                                          layer_type="full_attention")
    return lambda c, seq_len=None: fn(c, "cpu", seq_len=seq_len)


# seq_len values: None (init) and, where the frequencies depend on it, one above the pretraining context,
# passed as a tensor as the module's forward does (dynamic NTK then grows its base in float32 tensor math)
SEQ_LENS = {"dynamic": [None, 20000], "longrope-phi-3.5": [None, 8192]}


@pytest.mark.parametrize("name", list(CASES))
def test_torch_engine_is_rope_init_bit_for_bit(name):
    # Real third-party code: transformers computes inv_freq with float32 torch ops on this machine; our
    # torch engine evaluates the same formula with the same ops, so the bits must agree exactly.
    import torch

    (mod_cls, cfg), sched, _ = _build(name)
    fn = _init_fn(name, cfg)
    for n in SEQ_LENS.get(name, SEQ_LENS.get(sched.scaling, [None])):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            inv, att = fn(cfg, seq_len=None if n is None else torch.tensor(n))
        ours = sched.inv_freq_in("float32", n, engine="torch")
        np.testing.assert_array_equal(ours, inv.double().numpy(), err_msg=f"{name} seq_len={n}")
        assert sched.cos_sin_scale == pytest.approx(att, rel=1e-15)


@pytest.mark.parametrize("name", list(CASES))
def test_numpy_engine_within_derived_bound_of_rope_init(name):
    # Every float32 operation of the formula rounds by <= 2**-24 relative; the exponent 2i/d is rounded
    # too, which moves base ** x by ln(base) * x * 2**-24 <= ln(base) * 2**-24.  torch's pow is faithful
    # (< 1 ulp, i.e. < 2**-23 relative).  The formulas chain at most 6 more roundings (factor, blend,
    # reciprocal), so both evaluations lie within (ln(base) + 8) * 2**-24 of the exact value: twice
    # that between them.  The float64 reference is the exact value to ~1e-15.
    import torch

    (mod_cls, cfg), sched, _ = _build(name)
    fn = _init_fn(name, cfg)
    tol = (math.log(sched.base) + 8) * 2.0**-24
    for n in SEQ_LENS.get(name, SEQ_LENS.get(sched.scaling, [None])):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            inv, _ = fn(cfg, seq_len=None if n is None else torch.tensor(n))
        theirs = inv.double().numpy()
        ours = sched.inv_freq_in("float32", n)
        ref = sched.inv_freq(n)
        nz = ref != 0
        np.testing.assert_array_equal(ours[~nz], 0.0)
        np.testing.assert_allclose(ours[nz], ref[nz], rtol=tol)
        np.testing.assert_allclose(theirs[nz], ref[nz], rtol=tol)
        assert np.all(ours == np.float32(ours))  # float32 values


@pytest.mark.parametrize("name", list(CASES))
def test_engines_within_derived_ulp_bound(name):
    # The numpy engine against transformers' own float32 frequencies (the torch engine's, bit for bit above),
    # within the per-frequency bound derived in tests/_engine_bound.py (nothing there is measured).
    import torch

    (mod_cls, cfg), sched, _ = _build(name)
    fn = _init_fn(name, cfg)
    for n in SEQ_LENS.get(name, SEQ_LENS.get(sched.scaling, [None])):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            inv, _ = fn(cfg, seq_len=None if n is None else torch.tensor(n))
        ulps, _ = engine_bound(sched, n)
        dist = ulp_distance(sched.inv_freq_in("float32", n), inv.double().numpy(), "float32")
        assert np.all(dist <= ulps), (name, n, dist.tolist(), ulps.tolist())
        assert_engines_within_bound(sched, n)


def test_engine_bound_counts_the_formula_operations():
    # The running bound on chains of * and / equals the hand count: u = 2**-24 relative per correctly rounded
    # operation, 2u for torch's pow; default 1 / base ** x: numpy 2u + torch 3u = 5u; linear (/ factor): 7u;
    # a relative gap of k u is k/2 to k float32 ulps (by the mantissa).  pow(base, 0) = 1 in both: 0 ulps.
    for sched, k in ((RopeSchedule(head_dim=128, base=10000.0), 5), (CASES["linear"][3], 7)):
        ulps, radians = engine_bound(sched)
        assert ulps[0] == 0 and radians[0] == 0.0
        assert ulps[1:].max() == k and np.all(ulps[1:] >= k / 2)
        theta = sched.inv_freq()
        np.testing.assert_allclose(radians[1:], k * 2.0**-24 * theta[1:], rtol=1e-4)  # + 2**-40 per op


def test_numpy_engine_rounds_every_operation_correctly():
    # Independent oracle: mpmath at 24 bits rounds each operation to nearest (ties to even) as
    # float32 does, for 1 / base ** (2i / d) with base 500000 (exact in float32): exponent, power, reciprocal.
    s = RopeSchedule(head_dim=128, base=500000.0)
    got = s.inv_freq_in("float32")
    with mpmath.workprec(24):
        for i in range(64):
            x = mpmath.mpf(2 * i) / 128  # rounded to 24 bits
            p = mpmath.power(mpmath.mpf(500000), x)
            with mpmath.workprec(200):
                exact_p = mpmath.power(mpmath.mpf(500000), x)
            p = +exact_p  # the power of the rounded exponent, rounded once to 24 bits
            want = mpmath.mpf(1) / p
            assert got[i] == float(want), i


def test_single_rounding_differs_from_formula():
    # "exact value rounded to float32" and "formula evaluated in float32" are different code paths:
    # the formula rounds three times, so some frequencies of Llama-3's schedule lie an ulp or more away.
    s = CASES["llama3"][3]
    once = np.float32(s.inv_freq()).astype(np.float64)
    dist = ulp_distance(s.inv_freq_in("float32"), once, "float32")
    assert dist.max() >= 1 and (dist > 0).sum() >= 8


def _module_errors(mod: Any, L: int, sched: RopeSchedule, extra: tuple[Any, ...]) -> tuple[float, float]:
    """Rotation error of a live module's bf16 cos/sin against float64 angles (max, mean) over 0..L-1.

    precision_audit.hf runs the module for positions 0..L-1 in chunks (each call also holds L-1, as one
    forward over the whole sequence does: dynamic and longrope modules choose their frequencies from the
    largest position id) and divides out the module's attention scaling.
    """
    from precision_audit.hf import audit_rope_module

    (row,) = audit_rope_module(mod, sched, L, dtype="bfloat16", layer_type=extra[0] if extra else None, match=False)
    return row.max_rotation_error, row.mean_rotation_error


def _check_module(name: str, L: int, cast: bool) -> None:
    import torch

    (mod_cls, cfg), sched, extra = _build(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mod = mod_cls(cfg)
    if cast:
        mod = mod.to(torch.bfloat16)
    worst, mean = _module_errors(mod, L, sched, extra)
    rec = preset("lowp-inv-freq" if cast else "fp32", "bf16")
    (ours,) = audit(sched, rec, L)
    (torch_row,) = audit(sched, rec, L, engine="torch")
    # the acceptance bounds: numpy engine 5 % (mean) / 10 % (max), torch engine 1 %.  The numpy
    # engine's pow is correctly rounded, this machine's (the module's) is faithful: their float32 theta_i
    # must first lie within the derived bound of tests/_engine_bound.py (ulps per frequency); the angle
    # m * theta_i then moves by at most (L - 1) times that bound in radians, and so may the max rotation error.
    d_theta = assert_engines_within_bound(sched, sched.frequency_key(L))
    assert ours.mean_rotation_error == pytest.approx(mean, rel=0.05), (name, L, cast)
    assert abs(ours.max_rotation_error - worst) <= 0.10 * worst + (L - 1) * d_theta, (name, L, cast)
    assert torch_row.mean_rotation_error == pytest.approx(mean, rel=0.01), (name, L, cast)
    assert torch_row.max_rotation_error == pytest.approx(worst, rel=0.01), (name, L, cast)


@pytest.mark.parametrize("cast", [False, True], ids=["built", "cast-bf16"])
@pytest.mark.parametrize("name", list(CASES))
def test_module_matches_audit_32k(name, cast):
    pytest.importorskip("torch")
    _check_module(name, 32768, cast)


@pytest.mark.parametrize("cast", [False, True], ids=["built", "cast-bf16"])
def test_dynamic_module_below_max_position_keeps_downcast_buffer(cast):
    # at or below max_position_embeddings the dynamic module keeps its (cast) buffer
    pytest.importorskip("torch")
    _check_module("dynamic", 4096, cast)


@pytest.mark.slow
@pytest.mark.parametrize("cast", [False, True], ids=["built", "cast-bf16"])
@pytest.mark.parametrize("name", list(CASES))
def test_module_matches_audit_128k(name, cast):
    pytest.importorskip("torch")
    _check_module(name, 131072, cast)


# --------------------------------------------------------------------------- parsing and validation


def test_rope_parameters_accept_legacy_type_and_config_factor():
    # Phi-3.5's config writes rope_scaling with "type" and no factor: factor = 131072 / 4096 = 32,
    # attention factor sqrt(1 + ln 32 / ln 4096) (LongRoPE)
    s = schedule_from_rope_parameters(PHI35["rope_scaling"], head_dim=96, base=PHI35["rope_theta"],
                                      max_position_embeddings=PHI35["max_position_embeddings"],
                                      original_max_position_embeddings=PHI35["original_max_position_embeddings"])
    assert (s.scaling, s.original_max_position_embeddings, s.factor, s.base) == ("longrope", 4096, 32.0, 10000.0)
    assert s.cos_sin_scale == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)), rel=1e-15)


def test_deepseek_mscale_attention_factor_is_one():
    # mscale == mscale_all_dim: the attention factor is m(s, 1) / m(s, 1) = 1 (not 0.1 ln 40 + 1 = 1.369)
    s = CASES["yarn-deepseek-v3"][3]
    assert s.cos_sin_scale == 1.0
    assert RopeSchedule(head_dim=64, scaling="yarn", factor=40.0).cos_sin_scale == pytest.approx(
        0.1 * math.log(40) + 1)


def test_yarn_truncate_false_changes_frequencies():
    # gpt-oss: the ramp ends are not rounded to whole dims, so the blended frequencies move
    s = CASES["yarn-gpt-oss"][3]
    t = RopeSchedule(**{**{f: getattr(s, f) for f in ("head_dim", "base", "factor",
                                                     "original_max_position_embeddings")}, "scaling": "yarn"})
    a, b = s.inv_freq(), t.inv_freq()
    assert (a != b).sum() >= 5 and np.all((a == b) | (np.abs(a / b - 1) > 1e-6))


@pytest.mark.parametrize("params,message", [
    ({"rope_type": "rope9"}, "unknown rope type 'rope9'; valid: default, linear"),
    ({"rope_type": "linear"}, "rope type 'linear' needs a factor"),
    ({"rope_type": "yarn", "factr": 2}, "unknown rope parameter 'factr'"),
    ({"rope_type": "yarn"}, "yarn without a factor needs max_position_embeddings"),
    ({"rope_type": "longrope", "factor": 2.0, "short_factor": [1.0], "long_factor": [1.0]},
     "short_factor has 1 values; rotary_dim 64 needs 32"),
    ({"rope_type": "llama3", "factor": 8, "low_freq_factor": 4, "high_freq_factor": 1},
     "llama3 needs high_freq_factor >= low_freq_factor"),
    ({"rope_type": "default", "partial_rotary_factor": 1.5}, "partial_rotary_factor 1.5 must be <= 1"),
    ({"rope_type": "yarn", "factor": -1}, "scaling factor -1 must be a finite number > 0"),
    ({"rope_type": "linear", "factor": 2, "short_factor": [1.0]}, "short_factor applies to longrope only"),
    ("{not json", "rope parameters are not valid JSON"),
    ({"rope_type": 3}, "rope_type 3 must be a string"),
])
def test_rope_parameters_errors(params, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        schedule_from_rope_parameters(params, head_dim=64)


@pytest.mark.parametrize("kw,message", [
    # a float32 0: FlashInfer's blend constant -1 / (high / low - 1) divided by it (found by the random CLI fuzz)
    ({"low_freq_factor": 8.801573759410631e-279},
     r"low_freq_factor 8.801573759410631e-279 must lie in \[2\*\*-32, 2\*\*32\]"),
    ({"high_freq_factor": 1e39}, r"high_freq_factor 1e\+39 must lie in"),
    # equal band factors with a wavelength exactly on the edge L0 / low: the blend weight is 0/0 in every exact
    # evaluation (8192 / (8192 / fl(2 pi)) == fl(2 pi), pair 0's wavelength)
    ({"low_freq_factor": 8192 / (2 * math.pi), "high_freq_factor": 8192 / (2 * math.pi),
      "original_max_position_embeddings": 8192}, "the wavelength of pair 0 is exactly L0 / low_freq_factor"),
    ({"factor": 2.0 ** 33}, "scaling factor 8589934592.0 must lie in"),
    ({"base": 2.0 ** 40 + 1}, r"base 1099511627777.0 must be at most 2\*\*40"),
])
def test_schedule_parameters_stay_in_float32_range(kw, message):
    with pytest.raises(ValueError, match=message):
        RopeSchedule(**{"head_dim": 8, "scaling": "llama3", "factor": 8.0, **kw})


@pytest.mark.parametrize("scaling", ["linear", "llama3", "yarn", "dynamic", "proportional"])
def test_range_corners_run_on_every_stack_without_overflow(scaling):
    # The corners of SCALE_RANGE and MAX_BASE: every stack's float32 arithmetic stays finite (the suite turns numpy's
    # overflow / divide warnings into errors), so the limits are the ones the validation states
    from precision_audit import rope
    from precision_audit.rope.schedules import MAX_BASE, SCALE_RANGE
    from precision_audit.rope.stacks import select_stacks

    names = select_stacks(["all"], [scaling])[0]
    lo, hi = SCALE_RANGE
    kw = {"llama3": [dict(low_freq_factor=lo, high_freq_factor=hi)], "yarn": [dict(beta_slow=lo, beta_fast=hi)]}
    for base, factor in [(MAX_BASE, lo), (MAX_BASE, hi), (1.5, lo), (1.5, hi)]:
        for extra in kw.get(scaling, [{}]):
            f = max(factor, 1.0) if scaling == "yarn" else factor
            s = RopeSchedule(head_dim=8, base=base, scaling=scaling, factor=f, **extra)
            for row in rope.audit(s, names, [4096], ["bfloat16"]):
                assert np.isfinite(row.max_rotation_error), (scaling, base, factor, row.recipe)


def test_inv_freq_engines_validate():
    with pytest.raises(ValueError, match="unknown engine 'jax'"):
        RopeSchedule().inv_freq_in("float32", engine="jax")
    with pytest.raises(ValueError, match="has no torch dtype"):
        RopeSchedule().inv_freq_in("float6_e2m3fn", engine="torch")


# --------------------------------------------------------------------------- command line


def _rope_cli(*args: str) -> Any:
    from click.testing import CliRunner

    from precision_audit.cli import main

    return CliRunner().invoke(main, ["rope", *args])


def test_cli_out_of_range_factor_exits_2_with_one_line():
    # The random CLI fuzz's find (CI, session 31): a low_freq_factor that is 0 in float32 made a stack's float32 blend
    # divide by zero (exit 1); the schedule now refuses it
    from click.testing import CliRunner

    from precision_audit.cli import main

    res = CliRunner().invoke(main, ["attention", "--length", "1", "--scaling", "llama3", "--low-freq-factor",
                                    "8.801573759410631e-279", "--stack", "all"])
    assert res.exit_code == 2, res.output  # click's usage error: one "Error:" line naming the value
    assert res.output.strip().splitlines()[-1].startswith("Error: low_freq_factor 8.801573759410631e-279 must lie in")


def test_cli_rope_parameters_equal_single_options():
    # --rope-parameters takes a config's object as is; the same schedule from single options gives the same rows
    rp = json.dumps(dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
                         high_freq_factor=4.0, original_max_position_embeddings=8192))
    a = _rope_cli("-l", "4096", "-r", "fp32", "--rope-parameters", rp, "--json")
    b = _rope_cli("-l", "4096", "-r", "fp32", "--base", "500000", "--scaling", "llama3", "--factor", "8", "--json")
    assert a.exit_code == 0 and b.exit_code == 0, a.output + b.output
    ra, rb = json.loads(a.output)["results"], json.loads(b.output)["results"]
    assert ra == rb and ra[0]["scaling"] == "llama3" and ra[0]["how"]["inv_freq"] == "formula in float32"
    (row,) = audit(CASES["llama3"][3], preset("fp32", "bf16"), 4096)
    assert ra[0]["max_rotation_error"] == row.max_rotation_error


def test_cli_longrope_factor_lists_and_json_file(tmp_path):
    f = tmp_path / "rope.json"
    rp = {**PHI35["rope_scaling"], "original_max_position_embeddings": 4096}
    f.write_text(json.dumps(rp))
    a = _rope_cli("-l", "8192", "--head-dim", "96", "-r", "fp32", "--max-position-embeddings", "131072",
                  "--rope-parameters", f"@{f}", "--json")
    short, long = (",".join(map(str, rp[k])) for k in ("short_factor", "long_factor"))
    b = _rope_cli("-l", "8192", "--head-dim", "96", "-r", "fp32", "--scaling", "longrope", "--factor", "32",
                  "--original-max-position-embeddings", "4096", "--short-factor", short, "--long-factor", long,
                  "--json")
    assert a.exit_code == 0 and b.exit_code == 0, a.output + b.output
    assert json.loads(a.output)["results"] == json.loads(b.output)["results"]
    assert "attention_factor=1.19024" in json.loads(a.output)["schedule"]  # sqrt(1 + ln 32 / ln 4096)


def test_cli_engine_torch_reports_ulps():
    pytest.importorskip("torch")
    res = _rope_cli("-l", "2048", "-r", "fp32", "--engine", "torch", "--scaling", "dynamic", "--factor", "2",
                    "--max-position-embeddings", "1024")
    assert res.exit_code == 0, res.output
    assert "torch engine: this machine's float32 inv_freq formula is" in res.output
    js = json.loads(_rope_cli("-l", "2048", "-r", "fp32", "--engine", "torch", "--json").output)
    ulps = js["inv_freq_ulps"]["float32"]
    assert js["engine"] == "torch" and len(ulps) == 64 and all(u >= 0 for u in ulps)


@pytest.mark.parametrize("args,message", [
    (["--rope-parameters", "{bad"], "not valid JSON"),
    (["--rope-parameters", "[1, 2]"], "must be a JSON object"),
    (["--rope-parameters", '{"rope_type": "linear", "factor": 2}', "--scaling", "yarn"],
     "--rope-parameters already gives the schedule; drop --scaling"),
    (["--rope-parameters", '{"rope_type": "alibi"}'], "unknown rope type 'alibi'"),
    (["--rope-parameters", "@/nonexistent/rope.json"], "cannot read '/nonexistent/rope.json'"),
    (["--scaling", "longrope"], "longrope needs short_factor"),
    (["--short-factor", "1,x"], "'1,x' is not a comma-separated list of numbers"),
    (["--stages", "angle=bf16@fp32"], "only inv_freq takes @FORMAT or @exact"),
    (["--stages", "inv_freq=bf16@fp9"], "unknown dtype 'fp9'"),
    (["--engine", "torch", "--dtype", "fp4"], "torch has no dtype for float4_e2m1fn"),
])
def test_cli_rope_errors(args, message):
    res = _rope_cli("-l", "16", *args)
    assert res.exit_code == 2, res.output
    assert message in res.output
    assert "Traceback" not in res.output


def test_cli_inv_freq_how_in_stages():
    js = json.loads(_rope_cli("-l", "512", "--stages", "inv_freq=bf16@exact", "--stages", "inv_freq=bf16",
                              "--json").output)
    hows = [r["how"]["inv_freq"] for r in js["results"]]
    assert hows == ["exact value rounded to bfloat16", "formula in float32, stored in bfloat16"]


@pytest.mark.parametrize("low,high", [(1.0, 1.0), (1.0, 1.00000001)])  # Llama 4 Scout; equal in float32
def test_llama3_equal_band_factors_are_transformers_bands(low, high):
    # Llama 4 Scout's rope_scaling: no blended band; transformers' _compute_llama3_parameters (run here) divides by
    # high - low and keeps finite frequencies; ours agree bit for bit (torch engine) and, in float64, follow the
    # closed form: theta_i / 16 where 2 pi / theta_i > 8192, theta_i elsewhere (no wavelength near the edge)
    pytest.importorskip("transformers")
    from transformers import Llama4TextConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    rs = {"rope_type": "llama3", "factor": 16.0, "low_freq_factor": low, "high_freq_factor": high,
          "original_max_position_embeddings": 8192}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = Llama4TextConfig(hidden_size=5120, num_attention_heads=40, head_dim=128, rope_theta=500000.0,
                               rope_scaling=dict(rs))
        theirs, _ = ROPE_INIT_FUNCTIONS["llama3"](cfg)
    s = schedule_from_rope_parameters({**rs, "rope_theta": 500000.0}, head_dim=128)
    assert s.equal_band_factors
    np.testing.assert_array_equal(s.inv_freq_in("float32", engine="torch"), theirs.double().numpy())
    theta = np.array([float(mpmath.power(500000, -mpmath.mpf(2 * i) / 128)) for i in range(64)])
    long = 2 * np.pi / theta > 8192
    assert int(long.sum()) == 29 and np.min(np.abs(2 * np.pi / theta - 8192)) > 20
    np.testing.assert_allclose(s.inv_freq(), np.where(long, theta / 16, theta), rtol=1e-15)
