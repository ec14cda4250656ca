"""Attention effect of RoPE recipes: rotated-logit error vs offset, relative-position invariance.

Expected values come from real third-party code (transformers' Llama ``apply_rotary_pos_emb`` and
``rotate_half``, imported and run on full vectors), exact angles from mpmath, or bounds derived in the
comments.
"""

from __future__ import annotations

import math

import ml_dtypes
import mpmath
import numpy as np
import pytest

from precision_audit.rope.attention import AttentionRow, attention_errors, default_distances
from precision_audit.rope import Recipe, RopeSchedule, cache_rounding_bound, preset, recipe_stages

mpmath.mp.prec = 120


def hf_scores(rec: Recipe, s: RopeSchedule, q: np.ndarray, k: np.ndarray, ms: np.ndarray, dist: int) -> np.ndarray:
    """transformers' Llama apply_rotary_pos_emb (which calls its rotate_half) on the stored cos/sin.

    Run in float64 torch (elementwise IEEE multiply/add, the same on every CPU); cos/sin laid out as
    transformers' rotary module does, cat(freqs, freqs); the pass-through dims of partial rotary are
    added as a plain dot product.
    """
    torch = pytest.importorskip("torch")
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    r = s.rotary
    g = s.cos_sin_scale
    sm = recipe_stages(rec, s.inv_freq(), ms, g)
    sn = recipe_stages(rec, s.inv_freq(), ms - dist, g)

    def rotated(v: np.ndarray, st: dict) -> np.ndarray:
        cos = torch.from_numpy(np.concatenate([st["cos"]] * 2, 1))[None]  # (batch 1, seq, r)
        sin = torch.from_numpy(np.concatenate([st["sin"]] * 2, 1))[None]
        x = torch.from_numpy(np.ascontiguousarray(v[:r])).expand(1, 1, len(ms), r)  # (batch, heads, seq, r)
        out, _ = llama.apply_rotary_pos_emb(x, x, cos, sin)
        return out[0, 0].numpy()

    assert llama.rotate_half(torch.tensor([1.0, 2.0, 3.0, 4.0])).tolist() == [-3.0, -4.0, 1.0, 2.0]
    return (rotated(q, sm) * rotated(k, sn)).sum(1) + q[r:] @ k[r:]


def mp_exact_score(s: RopeSchedule, q: np.ndarray, k: np.ndarray, dist: int) -> float:
    """Exact logit of the rotated pair at offset dist: rotations by the exact angles, in mpmath."""
    nf, r, g = s.n_freq, s.rotary, mpmath.mpf(s.cos_sin_scale)
    tot = mpmath.mpf(0)
    for i, t in enumerate(s.inv_freq()):
        phi = mpmath.mpf(dist) * mpmath.mpf(float(t))
        c, sn = mpmath.cos(phi), mpmath.sin(phi)
        q1, q2, k1, k2 = (mpmath.mpf(float(v)) for v in (q[i], q[nf + i], k[i], k[nf + i]))
        tot += g * g * ((q1 * k1 + q2 * k2) * c - (q2 * k1 - q1 * k2) * sn)
    tot += sum(mpmath.mpf(float(a)) * mpmath.mpf(float(b)) for a, b in zip(q[r:], k[r:]))
    return float(tot)


@pytest.mark.parametrize("schedule", [RopeSchedule(head_dim=8), RopeSchedule(head_dim=12, rotary_dim=8),
                                      RopeSchedule(head_dim=8, scaling="yarn", factor=4.0)])
@pytest.mark.parametrize("name", ["lowp", "fp32"])
def test_matches_independent_rotate_half_and_mpmath(schedule, name):
    # same seeded q, k as the module (numpy default_rng(seed), q then k), every shift, one pair
    L, dist = 600, 37
    rec = preset(name, "bf16")
    # apply in float64: the rotation itself exact to float64, so the error is the stored cos/sin's alone
    (row,) = attention_errors(schedule, rec, L, [dist], pairs=1, shifts=L, seed=3, apply="float64")
    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, schedule.head_dim))[0]
    k = rng.standard_normal((1, schedule.head_dim))[0]
    ms = np.arange(dist, L)
    scores = hf_scores(rec, schedule, q, k, ms, dist)
    exact = mp_exact_score(schedule, q, k, dist)
    assert row.shifts == L - dist
    assert row.max_logit_error == pytest.approx(np.abs(scores - exact).max(), rel=1e-9, abs=1e-12)
    assert row.mean_logit_error == pytest.approx(np.abs(scores - exact).mean(), rel=1e-9, abs=1e-12)
    assert row.score_spread == pytest.approx(scores.max() - scores.min(), rel=1e-9, abs=1e-12)
    assert row.logit_rms == pytest.approx(abs(exact), rel=1e-12)


def test_float64_recipe_is_exact_and_invariant():
    # all stages float64: the logit is exact to float64 rounding and depends on m - n only
    s = RopeSchedule(head_dim=64)
    rows = attention_errors(s, Recipe("f64", *["fp64"] * 5), 50000, pairs=4, shifts=256)
    assert all(r.max_logit_error < 1e-9 and r.score_spread < 1e-9 for r in rows)


def test_characteristic_behaviour():
    # lowp loses positions (bf16 keeps 1 position in 32 above 4096), so logits at a fixed offset vary
    # with the shift by O(|q||k|); lowp-inv-freq keeps exact positions and a consistent (wrong) theta, so
    # the logit is nearly shift-invariant (spread bounded by the per-row rotation errors below) but off.
    s = RopeSchedule(head_dim=64)
    L, dist = 32768, 4096
    lowp, inv, fp32 = attention_errors(
        s, [preset("lowp", "bf16"), preset("lowp-inv-freq", "bf16"), preset("fp32", "bf16")], L, [dist],
        pairs=4, shifts=512)
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((4, 64)), rng.standard_normal((4, 64))
    zq = np.hypot(q[:, :32], q[:, 32:])
    zk = np.hypot(k[:, :32], k[:, 32:])
    weight = (zq * zk).sum(1).max()  # max over pairs of sum_i |z_q,i| |z_k,i|
    # per row: angle off by <= half an fp32 ulp of m theta (< 2**-24 * L) plus the cache's rounding bound,
    # length off by <= sqrt(2) * 2**-9 (bf16 half-ulps); two rows, two shifts compared
    eps = 2.0**-24 * L + cache_rounding_bound("bf16")
    delta = math.sqrt(2) * 2.0**-9
    spread_bound = 2 * weight * (2 * eps + 2 * delta + 4 * delta**2)
    assert inv.score_spread <= spread_bound
    assert fp32.score_spread <= spread_bound
    row_bound = weight * (2 * eps + 2 * delta + delta**2)
    assert fp32.max_logit_error <= row_bound
    # lowp-inv-freq is consistent but wrong: every row follows the logit of the bf16 frequencies theta',
    # sum_i (q1 k1 + q2 k2) cos(D theta'_i) - (q2 k1 - q1 k2) sin(D theta'_i), within row_bound (the same
    # per-row deviations as fp32).  So its error is at least that logit's distance from the exact one minus
    # row_bound, and this derived lower bound exceeds what the spread bound allows.
    theta = s.inv_freq()
    wrong = theta.astype(ml_dtypes.bfloat16).astype(np.float64)

    def logits(t: np.ndarray) -> np.ndarray:
        a, b = q[:, :32], q[:, 32:]
        c, e = k[:, :32], k[:, 32:]
        return (a * c + b * e) @ np.cos(dist * t) - (b * c - a * e) @ np.sin(dist * t)

    lower = np.abs(logits(wrong) - logits(theta)).max() - row_bound
    assert inv.max_logit_error >= lower > spread_bound >= inv.score_spread
    # lowp builds positions in bf16: above 4096 they are multiples of 32 (of 128 above 16384), so the offset
    # its rows encode, bf16(m) - bf16(m - 4096), moves with the shift by tens of tokens; at theta_0 = 1 that
    # turns pair 0 by several radians.  spread_bound holds only for exact positions, and lowp breaks it.
    assert lowp.score_spread > spread_bound


def test_default_distances_and_errors():
    assert default_distances(1) == [0]
    assert default_distances(1000)[-3:] == [256, 512, 999]
    s = RopeSchedule(head_dim=8)
    with pytest.raises(ValueError, match="distance 10 not in"):
        attention_errors(s, preset("fp32"), 10, [10])
    with pytest.raises(ValueError, match="pairs 0"):
        attention_errors(s, preset("fp32"), 10, [1], pairs=0)
    with pytest.raises(ValueError, match="seed -1 must be a non-negative integer"):
        attention_errors(s, preset("fp32"), 10, [1], seed=-1)
    with pytest.raises(ValueError, match="no recipe given"):
        attention_errors(s, [], 10)
    with pytest.raises(TypeError, match="distances 'zz' must be an iterable of integers"):
        attention_errors(s, preset("fp32"), 10, "zz")
    with pytest.raises(TypeError, match="distance 1.5 must be an integer"):
        attention_errors(s, preset("fp32"), 10, [1.5])
    with pytest.raises(ValueError, match="shifts 65537 must be at most 65536"):
        attention_errors(s, preset("fp32"), 10, [1], shifts=2**16 + 1)
    with pytest.raises(ValueError, match="distance 5"):
        AttentionRow("r", "bfloat16", 5, 8, 5, 1, 1, 0.0, 0.0, 0.0, 1.0)


def test_attention_cli_json_and_errors():
    import json

    from click.testing import CliRunner

    from precision_audit.cli import main

    res = CliRunner().invoke(main, ["attention", "-l", "4096", "-d", "float64", "-r", "fp64", "-r", "lowp",
                                    "--distance", "1", "--distance", "3000", "--pairs", "2", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["auditor"] == "attention"
    rows = {(r["recipe"], r["distance"]): r for r in doc["results"]}
    assert set(rows) == {(r, d) for r in ("fp64", "lowp") for d in (1, 3000)}
    # float64 everywhere: only float64 rounding separates the logit from the exact one
    assert all(rows["fp64", d]["max_logit_error"] < 1e-9 for d in (1, 3000))
    # lowp in float64 is fp64 too: positions and inv_freq exact, product rounded once in float64
    assert rows["lowp", 3000]["score_spread"] < 1e-9
    bad = CliRunner().invoke(main, ["attention", "-l", "100", "--distance", "100"])
    assert bad.exit_code == 2 and "distance 100 not in [0, length 100)" in bad.output


def test_default_apply_stage_is_the_cache_format():
    # a recipe's apply stage defaults to its cache format, elementwise: the same rows as asking for it
    s = RopeSchedule(head_dim=16)
    rec = preset("fp32", "bf16")
    assert (rec.apply, rec.apply_mode) == ("bfloat16", "elementwise")
    a = attention_errors(s, rec, 300, [7], pairs=2)
    b = attention_errors(s, rec, 300, [7], pairs=2, apply="bf16", mode="elementwise")
    assert a == b and a[0].apply == "bfloat16"
    # q/k rotated in bf16 cost more than the cache alone: at least the bf16 rounding of the stored product
    c = attention_errors(s, rec, 300, [7], pairs=2, apply="float64")
    assert a[0].max_logit_error > c[0].max_logit_error


def test_apply_stage_from_stages_text():
    from precision_audit.rope import parse_stages

    r = parse_stages("apply=fp16@fp32", "bf16")
    assert (r.apply, r.apply_mode) == ("float16", "fp32-then-cast")
    assert r.how["apply"] == "rotation in float32, cast to float16"
    r = parse_stages("apply=bf16@fused", "bf16")  # triton's contraction (tests/test_kernels_recorded.py)
    assert (r.apply, r.apply_mode) == ("bfloat16", "fused")
    assert r.how["apply"] == "q*cos + rotate_half(q)*sin in bfloat16, x1's product fused into the sum"
    with pytest.raises(ValueError, match="the @ forms are apply=F@fp32 .* and apply=F@fused"):
        parse_stages("apply=fp16@bf16")
