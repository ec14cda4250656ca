"""Pairwise RoPE errors: the rotation between positions D apart against D * theta_i.

The reference is written here, independently of the audit's chunked engine:
the stored cos/sin of each recipe are built stage by stage with a
round-to-nearest-even written in this file (float64 arithmetic, exact), the
cos/sin correctly rounded (float64 ``np.cos``/``np.sin``, and mpmath wherever
their one-ulp uncertainty could change the rounding), then the pair errors by
brute force in float64: the rotation from position m - D to m is
``atan2(s_m c_{m-D} - c_m s_{m-D}, c_m c_{m-D} + s_m s_{m-D})`` (products of
stored values are exact in float64), compared with ``D * theta_i mod 2 pi``
from mpmath.  Only the inverse frequencies come from the library
(:func:`stored_inv_freq`, tested against transformers and mpmath in
test_rope.py and test_schedules.py).  The audit claims ~4e-15 rad; the
comparisons allow 1e-13.
"""

from __future__ import annotations

import dataclasses
import json
import math

import mpmath
import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from precision_audit.cli import main
from precision_audit.rope import (
    PairError,
    RopeSchedule,
    audit,
    cache_rounding_bound,
    exact_angles,
    preset,
    row_distances,
    stored_inv_freq,
    wrap,
)

mpmath.mp.prec = 200
MP_2PI = 2 * mpmath.pi
TWO_PI = 2 * math.pi

# significant bits and the smallest exponent e (x = f * 2**e, 0.5 <= |f| < 1) of a normal number
BITS = {"float32": (24, -125), "bfloat16": (8, -125), "float16": (11, -13)}


def rne(x: np.ndarray, fmt: str) -> np.ndarray:
    """Round float64 values to ``fmt``, to nearest, ties to even (no overflow here); float64: unchanged.
    Division and multiplication by the power-of-two quantum are exact."""
    x = np.asarray(x, dtype=np.float64)
    if fmt == "float64":
        return x
    p, emin = BITS[fmt]
    _, e = np.frexp(x)
    q = np.ldexp(1.0, np.maximum(e, emin) - p)
    return np.rint(x / q) * q


def rne_mp(v: mpmath.mpf, fmt: str) -> float:
    """Round an mpmath value to ``fmt`` directly (no float64 step in between)."""
    p, emin = BITS[fmt]
    if v == 0:
        return 0.0
    _, e = mpmath.frexp(v)
    q = mpmath.ldexp(1, max(int(e), emin) - p)
    return float(mpmath.nint(v / q) * q)


def trig(fn: str, x: np.ndarray, fmt: str) -> np.ndarray:
    """cos or sin of ``x`` correctly rounded to ``fmt``: float64 numpy is within an ulp or two, so its rounding
    is certain unless 4 float64 ulps around it round differently; those few go to mpmath.  float64: numpy's
    value (the engine's too: the same machine on both sides)."""
    v = getattr(np, fn)(x)
    if fmt == "float64":
        return v
    r = rne(v, fmt)
    u = 4 * np.spacing(np.abs(v))
    unsure = np.flatnonzero(rne(v - u, fmt) != rne(v + u, fmt))
    flat, xs = r.reshape(-1), x.reshape(-1)
    for k in unsure:
        flat[k] = rne_mp(getattr(mpmath, fn)(mpmath.mpf(float(xs[k]))), fmt)
    return r


def stored(name: str, dtype: str, schedule: RopeSchedule, length: int) -> tuple[np.ndarray, np.ndarray]:
    """The stored (cos, sin) of preset ``name`` (product angle) for positions 0..length-1, stage by stage."""
    r = preset(name, dtype)
    inv = stored_inv_freq(r, schedule)
    pos = rne(np.arange(length, dtype=np.float64), r.positions)
    angle = rne(rne(pos[:, None] * inv[None, :], r.angle), r.trig)  # the product is exact in float64 here
    c, s = trig("cos", angle, r.trig), trig("sin", angle, r.trig)
    k = schedule.cos_sin_scale
    if k != 1.0:  # emb.cos() * attention_scaling in the trig format (a float32 factor), then the cast
        k32 = float(np.float32(k))
        c, s = rne(c * k32, r.trig), rne(s * k32, r.trig)  # 24-bit x 24-bit products: exact in float64
    return rne(c, r.cache), rne(s, r.cache)


def mp_wrapped(m: int, theta: float) -> float:
    """m * theta (float64 theta taken exactly) mod 2*pi in [-pi, pi], 200 bits."""
    v = mpmath.mpf(m) * mpmath.mpf(theta)
    return float(v - MP_2PI * mpmath.nint(v / MP_2PI))


def brute(cc: np.ndarray, ss: np.ndarray, theta: np.ndarray, d: int, length: int) -> tuple[float, float]:
    """Max and mean over m in [d, length) and every frequency of the pair error at distance d."""
    c0, s0, c1, s1 = cc[: length - d], ss[: length - d], cc[d:length], ss[d:length]
    rot = np.arctan2(s1 * c0 - c1 * s0, c1 * c0 + s1 * s0)
    x = rot - np.array([mp_wrapped(d, t) for t in theta])[None, :]
    err = np.abs(x - TWO_PI * np.rint(x / TWO_PI))
    err[np.isnan(err)] = math.pi  # a non-finite stored value: the phase is lost
    return float(err.max()), float(err.mean())


YARN = RopeSchedule(head_dim=16, base=10000.0, scaling="yarn", factor=4.0, original_max_position_embeddings=256)
PLAIN = RopeSchedule(head_dim=16, base=10000.0)
PROPORTIONAL = RopeSchedule(head_dim=32, rotary_dim=8, scaling="proportional", base=1e6)  # 12 of 16 theta are 0


@pytest.mark.parametrize(("schedule", "name", "dtype"), [
    (PLAIN, "lowp", "bfloat16"), (PLAIN, "lowp", "float16"), (PLAIN, "lowp-inv-freq", "bfloat16"),
    (PLAIN, "lowp-inv-freq", "float16"), (PLAIN, "fp32", "bfloat16"), (PLAIN, "fp32", "float16"),
    (PLAIN, "fp64", "bfloat16"), (YARN, "fp32", "bfloat16"), (YARN, "lowp-inv-freq", "bfloat16"),
    (PROPORTIONAL, "lowp", "bfloat16"), (PROPORTIONAL, "fp32", "float16"),
])
def test_pairs_match_brute_force(schedule: RopeSchedule, name: str, dtype: str) -> None:
    # chunks of 256 positions: D <= 256 paired across chunks at the merge,
    # D > 256 from recomputed blocks; lengths 1500 and 700 end mid-chunk (fp16 angles stay below 1500: finite)
    lengths, ds = [700, 1500], (1, 16, 255, 256, 257, 699, 1499)
    rows = audit(schedule, preset(name, dtype), lengths, distances=ds, chunk=256)
    cc, ss = stored(name, dtype, schedule, max(lengths))
    theta = schedule.inv_freq()
    for row in rows:
        assert [p.distance for p in row.pair_errors] == [d for d in ds if d < row.length]
        for p in row.pair_errors:
            mx, mean = brute(cc, ss, theta, p.distance, row.length)
            assert p.max_rotation_error == pytest.approx(mx, abs=1e-13)
            assert p.mean_rotation_error == pytest.approx(mean, abs=1e-13)


def test_yarn_factor_does_not_enter_the_angle() -> None:
    # the attention factor scales cos/sin: the pair error is of the angle only (a magnitude error would
    # show as ~0.35 rad otherwise); same check as above, plus: scale really is not 1
    assert YARN.cos_sin_scale == pytest.approx(0.1 * math.log(4.0) + 1.0)
    (row,) = audit(YARN, preset("fp32", "bfloat16"), 600, distances=[1, 300])
    assert max(p.max_rotation_error for p in row.pair_errors) < 2 * cache_rounding_bound("bfloat16", YARN.cos_sin_scale)


@pytest.mark.parametrize(("name", "d"), [("fp32", 1), ("fp32", 4095), ("lowp-inv-freq", 1), ("lowp-inv-freq", 40000),
                                         ("lowp", 300)])
def test_mpmath_spot_checks(name: str, d: int) -> None:
    # a row of length d + 1 has one pair per frequency, (m, m - d) = (d, 0): its max and mean are those of the
    # two frequencies' errors, computed here entirely in mpmath from the stored values
    s = RopeSchedule(head_dim=4, base=10000.0)
    cc, ss = stored(name, "bfloat16", s, d + 1)
    errs = []
    for i, t in enumerate(s.inv_freq()):
        c0, s0, c1, s1 = (mpmath.mpf(float(v)) for v in (cc[0, i], ss[0, i], cc[d, i], ss[d, i]))
        x = mpmath.atan2(s1, c1) - mpmath.atan2(s0, c0) - mpmath.mpf(d) * mpmath.mpf(float(t))
        errs.append(abs(float(x - MP_2PI * mpmath.nint(x / MP_2PI))))
    (row,) = audit(s, preset(name, "bfloat16"), d + 1, distances=[d])
    (p,) = row.pair_errors
    assert p.max_rotation_error == pytest.approx(max(errs), abs=1e-14)
    assert p.mean_rotation_error == pytest.approx(sum(errs) / 2, abs=1e-14)


@pytest.mark.parametrize("engine", ["numpy", "torch"])
def test_chunk_boundaries_change_nothing(engine: str) -> None:
    # chunks of 256 positions (smaller than most distances, dividing no length) against one chunk, on 1 and 3
    # threads: maxima identical, means the same sums in another order
    s = RopeSchedule(head_dim=16, base=500000.0)
    recs = [preset("lowp", "bf16"), preset("lowp-inv-freq", "bf16"), preset("fp32", "fp16")]
    ds = (1, 100, 255, 256, 300, 699, 999)
    one = audit(s, recs, [1000, 700, 300], distances=ds, chunk=2**20, engine=engine)
    for workers in (1, 3):
        many = audit(s, recs, [1000, 700, 300], distances=ds, chunk=256, engine=engine, workers=workers)
        for a, b in zip(one, many):
            assert [(p.distance, p.max_rotation_error) for p in a.pair_errors] == \
                [(p.distance, p.max_rotation_error) for p in b.pair_errors]
            assert [p.mean_rotation_error for p in a.pair_errors] == \
                pytest.approx([p.mean_rotation_error for p in b.pair_errors], rel=1e-12)


def test_default_distances() -> None:
    # 1, 16, 256, 4096 and L/2, each capped at L - 1, deduplicated; length 1 has no pair
    assert row_distances(1) == ()
    assert row_distances(2) == (1,)
    assert row_distances(17) == (1, 8, 16)
    assert row_distances(8192) == (1, 16, 256, 4096)
    assert row_distances(2**20) == (1, 16, 256, 4096, 2**19)
    rows = audit(RopeSchedule(head_dim=8), preset("fp32", "bf16"), [1, 2, 17, 9000], workers=1)
    assert [tuple(p.distance for p in r.pair_errors) for r in rows] == [(), (1,), (1, 8, 16), (1, 16, 256, 4096, 4500)]
    assert audit(RopeSchedule(head_dim=8), preset("fp32", "bf16"), 100, distances=())[0].pair_errors == ()


def test_fp64_pairs_are_cache_rounding_only() -> None:
    # float64 angle and cos/sin: each position's rotation error is the cache rounding (<= the bound) plus
    # ~1e-12 (float64 angle at 32K); a pair's error is at most the sum of two
    s = RopeSchedule(head_dim=32)
    for dtype in ("bfloat16", "float16", "float32"):
        (row,) = audit(s, preset("fp64", dtype), 32768)
        bound = cache_rounding_bound(dtype)
        assert len(row.pair_errors) == 5
        for p in row.pair_errors:
            assert p.max_rotation_error <= 2 * bound + 1e-11
            assert 0 < p.mean_rotation_error < bound


@pytest.mark.parametrize("name", ["lowp", "lowp-inv-freq", "fp32", "fp64"])
def test_pair_error_at_most_twice_the_absolute(name: str) -> None:
    # e(m) - e(m - D) with |e| <= the absolute max: triangle inequality (wrapping only makes it smaller)
    (row,) = audit(RopeSchedule(head_dim=32), preset(name, "bf16"), 5000)
    for p in row.pair_errors:
        assert p.max_rotation_error <= 2 * row.max_rotation_error + 1e-15
        assert p.mean_rotation_error <= 2 * row.mean_rotation_error + 1e-15


def test_reference_figures_of_the_issue() -> None:
    # issue 28: base 1e4, head_dim 128, L = 32K, bf16 cache.  The audit against the brute force above, and the
    # brute-force figures at the precision the issue gives them (fp32: coherent errors stay at the cache
    # level at every distance; lowp-inv-freq: the downcast frequency's drift D * dtheta grows with D)
    s, L = RopeSchedule(head_dim=128, base=10000.0), 32768
    issue = {"fp32": (0.0043, {1: 0.0054, 16: 0.0054, 256: 0.0059, 4096: 0.0059}),
             "lowp-inv-freq": (3.142, {1: 0.0054, 16: 0.025, 256: 0.32, 4096: 2.6})}
    rows = audit(s, [preset(n, "bf16") for n in issue], L)
    theta = s.inv_freq()
    for row in rows:
        absolute, pairs = issue[row.recipe]
        assert float(f"{row.max_rotation_error:.2g}") == float(f"{absolute:.2g}")
        cc, ss = stored(row.recipe, "bfloat16", s, L)
        got = {p.distance: p for p in row.pair_errors}
        assert sorted(got) == [1, 16, 256, 4096, 16384]
        for d, p in got.items():
            mx, mean = brute(cc, ss, theta, d, L)
            assert p.max_rotation_error == pytest.approx(mx, abs=1e-13)
            assert p.mean_rotation_error == pytest.approx(mean, abs=1e-13)
            if d in pairs:
                assert float(f"{mx:.2g}") == float(f"{pairs[d]:.2g}")


def test_pair_error_record() -> None:
    assert PairError(4, 0.1, 0.01).to_dict() == {"distance": 4, "max_rotation_error": 0.1, "mean_rotation_error": 0.01,
                                                 "resolved_max_rotation_error": None}
    # a mean of errors that are all pi (non-finite rows) may round a few ulps above pi (deepseek-v3 in fp16 did)
    assert PairError(4, math.pi, 3.141592653590176).mean_rotation_error > math.pi
    for bad in [dict(distance=0), dict(distance=True), dict(distance=2.0), dict(max_rotation_error=4.0),
                dict(mean_rotation_error=-1.0), dict(max_rotation_error=float("nan"))]:
        kw = {"distance": 4, "max_rotation_error": 0.1, "mean_rotation_error": 0.01, **bad}
        with pytest.raises(ValueError, match=next(iter(bad))):
            PairError(**kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "16", [16, 0], [1000], [1001]])
def test_api_rejects_bad_distances(bad: object) -> None:
    with pytest.raises(ValueError, match="distance"):
        audit(RopeSchedule(head_dim=8), preset("fp32"), [500, 1000], distances=bad)  # type: ignore[arg-type]


def test_distance_between_lengths_only_in_longer_rows() -> None:
    rows = audit(RopeSchedule(head_dim=8), preset("fp32"), [500, 1000], distances=[600, 1])
    assert [[p.distance for p in r.pair_errors] for r in rows] == [[1], [1, 600]]


def test_cli_json_schema() -> None:
    res = CliRunner().invoke(main, ["rope", "-l", "2K", "-l", "300", "--head-dim", "16", "-r", "fp32",
                                    "--distance", "1", "--distance", "1K", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)["results"]
    assert [[p["distance"] for p in r["pair_errors"]] for r in rows] == [[1], [1, 1024]]
    for r in rows:
        for p in r["pair_errors"]:
            assert set(p) == {"distance", "max_rotation_error", "mean_rotation_error", "resolved_max_rotation_error"}
            assert 0 < p["mean_rotation_error"] <= p["max_rotation_error"] < 0.01
            assert 0 < p["resolved_max_rotation_error"] <= p["max_rotation_error"]


def test_cli_table_and_defaults() -> None:
    res = CliRunner().invoke(main, ["rope", "-l", "8K", "--head-dim", "16", "-r", "lowp-inv-freq"])
    assert res.exit_code == 0, res.output
    assert "pairwise: max rotation error" in res.output
    header = next(line for line in res.output.splitlines() if "D=1 " in line + " ")
    assert header.split()[3:] == ["D=1", "D=16", "D=256", "D=4K"]  # 4096 = L/2 deduplicated
    res = CliRunner().invoke(main, ["rope", "-l", "8K", "--head-dim", "16", "-r", "fp32", "--no-pairs", "--json"])
    assert res.exit_code == 0 and json.loads(res.output)["results"][0]["pair_errors"] == []


@pytest.mark.parametrize("args", [["--distance", "0"], ["--distance", "-3"], ["--distance", "1.5"],
                                  ["--distance", "abc"], ["--distance", "8K"], ["--distance", "9000"],
                                  ["--distance", "4", "--no-pairs"]])
def test_cli_bad_distance_exits_2(args: list[str]) -> None:
    res = CliRunner().invoke(main, ["rope", "-l", "8K", "-l", "1K", "--head-dim", "16", "-r", "fp32", *args])
    assert res.exit_code == 2
    errors = [line for line in res.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and ("distance" in errors[0] or "--no-pairs" in errors[0])
    assert "Traceback" not in res.output


def test_live_module_pairs_match_brute_force() -> None:
    # a transformers rotary module after module.to(bf16): its cos/sin from one call over every position (here),
    # the pair errors by the brute force above; the audit calls it in chunks of 256 positions (8 frequencies),
    # D <= 256 paired across chunks, D > 256 from another call at positions m - D
    pytest.importorskip("transformers")
    import torch

    from precision_audit.hf import audit_model_type, build_rotary_module, find_rotary_classes
    from precision_audit.hf import audit_rope_module

    cfg = {"model_type": "llama", "head_dim": 16, "hidden_size": 64, "num_attention_heads": 4, "rope_theta": 10000.0}
    rows = audit_model_type("llama", [1000], config=cfg, cast_module=True, distances=[1, 300])
    assert [p.distance for p in rows[0].pair_errors] == [1, 300]
    (cls,) = find_rotary_classes("llama")[:1]
    module, conf = build_rotary_module(cls)
    module = module.to(torch.bfloat16)
    s = RopeSchedule(head_dim=int(conf.hidden_size // conf.num_attention_heads),
                     base=float(conf.rope_parameters["rope_theta"]))
    L, ds = 700, (1, 16, 255, 256, 300, 699)
    (row,) = audit_rope_module(module, s, L, match=False, chunk=256, distances=ds)
    with torch.no_grad():
        c, sn = module(torch.zeros(1, L, 1, dtype=torch.bfloat16), torch.arange(L)[None])
    cc, ss = (t[0, :, : s.n_freq].double().numpy() for t in (c, sn))
    assert [p.distance for p in row.pair_errors] == list(ds)
    for p in row.pair_errors:
        mx, mean = brute(cc, ss, s.inv_freq(), p.distance, L)
        assert p.max_rotation_error == pytest.approx(mx, abs=1e-13)
        assert p.mean_rotation_error == pytest.approx(mean, abs=1e-13)


def test_config_and_hf_rope_carry_pairs() -> None:
    # the same figures through config (a llama config.json) as through the rope auditor on its schedule
    from precision_audit.config import audit_config, load_config

    model = load_config("tests/data/llama-3.1-8b.json")
    rows = [r for r in audit_config(model, [4096], ["bfloat16"], recipes=["fp32"], positions=False,
                                    distances=[1, 2048]) if r.component == "rope"]
    ((_, s),) = model.rope
    (ref,) = audit(s, preset("fp32", "bfloat16"), 4096, distances=[1, 2048])
    assert [r.pair_errors for r in rows] == [ref.pair_errors]
    res = CliRunner().invoke(main, ["config", "tests/data/llama-3.1-8b.json", "-l", "2K", "-r", "fp32", "--json",
                                    "--distance", "16", "--no-positions"])
    assert res.exit_code == 0, res.output
    assert [[p["distance"] for p in r["pair_errors"]] for r in json.loads(res.output)["results"]] == [[16]]
    res = CliRunner().invoke(main, ["config", "tests/data/llama-3.1-8b.json", "-l", "2K", "-r", "fp32",
                                    "--distance", "2K"])
    assert res.exit_code == 2 and "distance 2048 must be below" in res.output


def test_hf_rope_cli_pairs() -> None:
    pytest.importorskip("transformers")
    res = CliRunner().invoke(main, ["hf-rope", "-m", "llama", "-l", "2K", "--distance", "1", "--distance", "1K",
                                    "--json"])
    assert res.exit_code == 0, res.output
    (row,) = json.loads(res.output)["results"]
    assert [p["distance"] for p in row["pair_errors"]] == [1, 1024]
    # transformers as built is the fp32 recipe in bf16 (torch kernels): pairs within two cache bounds
    assert all(p["max_rotation_error"] <= 2 * cache_rounding_bound("bfloat16") + 1e-6 for p in row["pair_errors"])
    res = CliRunner().invoke(main, ["hf-rope", "-m", "llama", "-l", "2K", "--distance", "0"])
    assert res.exit_code == 2


def test_assert_rope_max_pair_error() -> None:
    from precision_audit.testing import assert_rope

    s = RopeSchedule(head_dim=32)
    # lowp-inv-freq at 1024, head_dim 32: the drift D * dtheta reaches ~0.05 rad at D = 256 (the brute force
    # above), far above the D = 1 figure (a cache-level error, < 2 bounds = 0.0055 rad)
    (row,) = audit(s, preset("lowp-inv-freq", "bf16"), 1024, distances=[1, 256])
    cc, ss = stored("lowp-inv-freq", "bfloat16", s, 1024)
    d1, d256 = (brute(cc, ss, s.inv_freq(), d, 1024)[0] for d in (1, 256))
    assert d1 < 2 * cache_rounding_bound("bfloat16") < 0.02 < d256
    with pytest.raises(AssertionError, match="pairwise error <= 0.02 rad at D = 1, 256"):
        assert_rope(s, "lowp-inv-freq", 1024, max_rotation_error=math.inf, max_pair_error=0.02, distances=[1, 256])
    assert row.max_rotation_error < math.pi / 2 and row.colliding_positions == 0  # no phase lost: only pairs fail
    assert_rope(s, "lowp-inv-freq", 1024, max_rotation_error=math.inf, max_pair_error=0.02, distances=[1])
    with pytest.raises(ValueError, match="max_pair_error"):
        assert_rope(s, "fp32", 1024, max_pair_error=-1.0)


@pytest.mark.parametrize("name", ["llama.cpp-cpu", "llama.cpp-cuda", "mlx", "vllm"])
def test_stack_pairs_match_their_stored_values(name: str) -> None:
    # stacks whose angle is not position * inv_freq (repeated products, powf): the audit's chunked pairs (chunks of
    # 256 positions, so both the merge and the recomputed blocks) against the brute force on the stack's own
    # stored values (run_recipe, the numpy engine's single pass over every position)
    from precision_audit.rope import run_recipe, stack

    s = RopeSchedule(head_dim=16, base=10000.0)
    # llama.cpp CUDA's fast-math intrinsics make its rows bounds (tests/test_stacks_cuda.py): the exact pairs are
    # those of its correctly rounded stand-in, the same recipe without them
    rec = dataclasses.replace(stack(name, "bfloat16", s), fast_math=())
    ds = (1, 200, 256, 700)
    (row,) = audit(s, rec, 1000, distances=ds, chunk=256)
    st = run_recipe(rec, s, np.arange(1000))
    for p in row.pair_errors:
        mx, mean = brute(st["cos"], st["sin"], s.inv_freq(), p.distance, 1000)
        assert p.max_rotation_error == pytest.approx(mx, abs=1e-13)
        assert p.mean_rotation_error == pytest.approx(mean, abs=1e-13)
    (bound,) = audit(s, stack(name, "bfloat16", s), 1000, distances=ds)
    assert all(b.max_rotation_error >= p.max_rotation_error for b, p in zip(bound.pair_errors, row.pair_errors))


def test_non_finite_rows_count_pi() -> None:
    # lowp in float16: positions from 65520 round to inf, so angles and cos/sin are nan there; each pair that
    # touches such a row has error pi (as the absolute errors count it).  fp16 max 65504; 65519.x rounds down.
    s = RopeSchedule(head_dim=4, base=10000.0)
    L, ds = 65600, (1, 50, 300)
    (row,) = audit(s, preset("lowp", "float16"), L, distances=ds, chunk=256)
    with np.errstate(invalid="ignore", over="ignore"):
        pos = np.arange(L, dtype=np.float64).astype(np.float16).astype(np.float64)  # IEEE cast: inf from 65520
        assert np.isinf(pos[65520:]).all() and np.isfinite(pos[:65520]).all()
        inv = stored_inv_freq(preset("lowp", "float16"), s)
        angle = rne(pos[:, None] * inv[None, :], "float16")  # finite positions: products below 65504
        angle[~np.isfinite(pos)] = np.nan  # inf * inv = inf; cos(inf) = nan
        cc = trig("cos", np.nan_to_num(angle), "float16")
        ss = trig("sin", np.nan_to_num(angle), "float16")
        cc[np.isnan(angle)], ss[np.isnan(angle)] = np.nan, np.nan
    for p in row.pair_errors:
        mx, mean = brute(cc, ss, s.inv_freq(), p.distance, L)
        assert mx == math.pi == p.max_rotation_error
        assert p.mean_rotation_error == pytest.approx(mean, abs=1e-13)


TWIN_CASES = [  # (head_dim, recipes, lengths, audit keywords): chunks of 512 positions (nf 8) unless said
    (16, [("lowp", "bf16"), ("fp32", "fp16"), ("lowp-inv-freq", "bf16")], [1024, 4096], {"chunk": 512}),
    (16, [("lowp", "bf16"), ("fp32", "fp16")], [512, 1024, 2048, 4096, 4096], {"chunk": 512}),
    # positions [1024, 2048) paired at D = 1024; the rest of [2048, 6000) recomputed, after the waiting chunks
    (16, [("lowp", "bf16")], [4096, 6000], {"chunk": 512, "distances": (1, 256, 1024)}),
    # D = 2048 pairs [2048, 2560) only; [512, 2048) merged between (until 3000 < 2D)
    (16, [("lowp", "bf16"), ("fp32", "fp16")], [3000], {"chunk": 512, "distances": (1, 256, 2048)}),
    # two recipes that share every stage share one cache job, and its stats (formed once, merged twice)
    (16, [("fp32", "bf16"), ("lowp", "bf16"), ("fp32", "bf16")], [2048, 4096], {"chunk": 512}),
    # nan in the cache (e4m3 overflow), chunks of 2048 positions, D = 32768
    (16, [("lowp", "e4m3"), ("lowp", "fp16"), ("lowp-inv-freq", "e5m2")], [65536], {"chunk": 2048}),
]


@pytest.mark.parametrize(("head_dim", "names", "lengths", "kw"), TWIN_CASES)
@pytest.mark.parametrize("workers", [1, 3])
def test_twin_chunks_give_the_recomputed_rows(head_dim: int, names: list, lengths: list, kw: dict,
                                              workers: int) -> None:
    # The longest recomputed distance (L/2 by default) is paired from the chunks D earlier, computed just before
    # by the same worker (rope/units.py, _twin), instead of recomputing positions m - D: the same signed errors
    # in the same blocks, reductions merged in position order, so every row is the recomputation's to the bit.
    import importlib

    audit_mod = importlib.import_module("precision_audit.rope.audit")
    s = RopeSchedule(head_dim=head_dim)
    recs = [preset(n, d) for n, d in names]
    seen = []
    orig = audit_mod._twin
    try:
        audit_mod._twin = lambda *a: seen.append(orig(*a)) or seen[-1]
        twin = [r.to_dict() for r in audit(s, recs, lengths, workers=workers, **kw)]
        audit_mod._twin = lambda *a: None
        again = [r.to_dict() for r in audit(s, recs, lengths, workers=workers, **kw)]
    finally:
        audit_mod._twin = orig
    assert any(t is not None for t in seen)
    assert twin == again


@settings(max_examples=30, deadline=None, derandomize=True)
@given(aligned=st.lists(st.integers(1, 16), min_size=1, max_size=3), extra=st.one_of(st.none(), st.integers(1, 4096)),
       fracs=st.lists(st.one_of(st.floats(0.0, 1.0), st.just(0.5)), min_size=1, max_size=4),
       chunk_rows=st.sampled_from([256, 512, 1024]), workers=st.integers(1, 3))
def test_twin_and_linked_pairs_are_the_merge_pairs(aligned: list, extra: int | None, fracs: list, chunk_rows: int,
                                                   workers: int) -> None:
    # Random lengths, distances and chunk sizes: rows with the twin pairing and the cross pairs formed by the
    # workers (rope/units.py: _twin, _Links) against rows with neither (every pair recomputed or formed at the
    # merge, in position order): identical to the bit, nan included.
    import importlib

    audit_mod = importlib.import_module("precision_audit.rope.audit")
    lengths = [256 * k for k in aligned] + ([extra] if extra else [])  # whole chunks (twins) and not
    top = max(lengths)
    ds = sorted({max(1, min(top - 1, int(f * top))) for f in fracs}) if top > 1 else None
    s = RopeSchedule(head_dim=16)
    recs = [preset("lowp", "e4m3"), preset("lowp-inv-freq", "bf16"), preset("fp32", "fp16")]
    kw = dict(chunk=chunk_rows, workers=workers, distances=ds if ds else ())
    fast = [r.to_dict() for r in audit(s, recs, lengths, **kw)]
    twin, done = audit_mod._twin, audit_mod._Links.done
    try:
        audit_mod._twin = lambda *a: None
        audit_mod._Links.done = lambda self, a, b, stats, scratch=None: None
        slow = [r.to_dict() for r in audit(s, recs, lengths, **kw)]
    finally:
        audit_mod._twin, audit_mod._Links.done = twin, done
    assert fast == slow


# --------------------------------------------------------------------------- the rotation pass: each position once
# A live module's or an apply kernel's pass (rotation_pass) computes each chunk once, a chunk D later right after
# its twin, and merges the chunks' figures in position order.  The reference below holds every position's stored
# row and signed error in memory at once (no chunks, no order): maxima, counts and the first non-finite position
# must be the same to the bit; means are sums of the same terms in another order (the pass: per chunk, then the
# chunks' sums in position order; here one numpy sum), so they may differ by a few hundred ulps: rel 1e-13.

SPLIT = dict(lengths=[300, 1000, 1700, 2500], distances=(1, 16, 300, 700, 1200), chunk=256)  # 3 above a chunk
DEFAULTS = dict(lengths=[1024, 4096], distances=None, chunk=256)  # L/2 = 512 and 2048, 4095 above a chunk


def every_position(rows: np.ndarray, e: np.ndarray, length: int, distances: tuple[int, ...] | None) -> dict:
    """The figures of positions 0..length-1 from all their stored rows and signed errors at once: max and mean of
    |e| (non-finite: pi), positions whose row equals the previous one's (nan equal to nan), the first position
    with a non-finite error, and per distance D (the defaults 1, 16, 256, 4096, L/2 capped at L - 1, or the
    asked ones below L) max and mean over m in [D, L) and every pair of |wrap(e(m) - e(m - D))|."""
    e, r = e[:length], rows[:length]
    err = np.abs(e)
    err[~np.isfinite(err)] = math.pi
    same = ((r[1:] == r[:-1]) | (np.isnan(r[1:]) & np.isnan(r[:-1]))).all(axis=1)
    bad = np.flatnonzero((~np.isfinite(e)).any(axis=1))
    if distances is None:
        ds = sorted({min(d, length - 1) for d in (1, 16, 256, 4096, length // 2)} - {0})
    else:
        ds = [d for d in distances if d < length]
    pairs = []
    for d in ds:
        x = np.abs(wrap(e[d:] - e[: length - d]))
        x[np.isnan(x)] = math.pi
        pairs.append((d, float(x.max()), float(x.mean())))
    return {"max": float(err.max()), "mean": float(err.mean()), "collisions": int(same.sum()),
            "first_nonfinite": int(bad[0]) if bad.size else None, "pairs": pairs}


def assert_figures(row: object, ref: dict) -> None:
    """A row (ModuleRow, KernelRow) against :func:`every_position`'s figures."""
    assert row.max_rotation_error == ref["max"] and row.colliding_positions == ref["collisions"]
    assert getattr(row, "first_nonfinite", ref["first_nonfinite"]) == ref["first_nonfinite"]
    assert row.mean_rotation_error == pytest.approx(ref["mean"], rel=1e-13, abs=0)
    assert [p.distance for p in row.pair_errors] == [d for d, _, _ in ref["pairs"]]
    for p, (_, mx, mean) in zip(row.pair_errors, ref["pairs"]):
        assert p.max_rotation_error == mx
        assert p.mean_rotation_error == pytest.approx(mean, rel=1e-13, abs=0)


def chunks_of(lengths: list[int], chunk: int) -> list[tuple[int, int]]:
    """The calls of the pass: ``chunk`` positions at most, cut at every length (the documented contract)."""
    out, a = [], 0
    for L in sorted(lengths):
        while a < L:
            out.append((a, min(L, a + chunk)))
            a = out[-1][1]
    return out


def torch_neox(theta: np.ndarray, positions_dtype: object = None) -> object:
    """A NeoX apply kernel in plain torch: float32 angles (positions cast to ``positions_dtype`` first: bf16
    collides above 256), cos/sin cast to the data's dtype, the rotation in that dtype."""
    import torch

    inv = torch.tensor(theta, dtype=torch.float32)

    def rope(q: object, k: object, positions: object) -> tuple[object, object]:
        p = positions if positions_dtype is None else positions.to(positions_dtype)
        a = p[:, None].float() * inv
        cos, sin = torch.cat((a, a), -1).cos().to(q.dtype), torch.cat((a, a), -1).sin().to(q.dtype)
        h = q.shape[-1] // 2
        return [x * cos + torch.cat((-x[:, h:], x[:, :h]), -1) * sin for x in (q, k)]

    return rope


def numpy_with_nan(schedule: RopeSchedule, bad: int) -> object:
    """A float64 numpy kernel with an error: angles 1e-3 rad too far per 1000 positions (coherent), and nan from
    position ``bad`` on (pair errors pi across it)."""
    nf = schedule.n_freq

    def rope(q: np.ndarray, k: np.ndarray, positions: np.ndarray) -> list[np.ndarray]:
        a = np.outer(positions * (1 + 1e-6), schedule.inv_freq())
        c, s = np.cos(a), np.sin(a)
        c[positions >= bad] = np.nan
        return [np.concatenate([x[:, :nf] * c - x[:, nf:] * s, x[:, :nf] * s + x[:, nf:] * c], 1) for x in (q, k)]

    return rope


@pytest.mark.parametrize("setting", [SPLIT, DEFAULTS], ids=["asked", "defaults"])
@pytest.mark.parametrize("kernel", ["bf16-positions", "fp32-angles", "numpy-nan"])
def test_kernel_pass_runs_each_position_once_and_matches_every_position(kernel: str, setting: dict) -> None:
    from precision_audit.trace import audit_rotary_kernel, pair_dims

    torch = pytest.importorskip("torch")
    s = RopeSchedule(head_dim=16, base=10000.0)
    top = max(setting["lengths"])
    fn, tensors, dtype = {
        "bf16-positions": (torch_neox(s.inv_freq_in("float32"), torch.bfloat16), "torch", "bfloat16"),
        "fp32-angles": (torch_neox(s.inv_freq_in("float32")), "torch", "bfloat16"),
        "numpy-nan": (numpy_with_nan(s, 1900), "numpy", "float64"),
    }[kernel]
    calls: list[np.ndarray] = []

    def counted(q: object, k: object, positions: object) -> object:
        calls.append(np.asarray(positions).copy())
        return fn(q, k, positions)

    rows = audit_rotary_kernel(counted, s, setting["lengths"], dtype, tensors=tensors, chunk=setting["chunk"],
                               distances=setting["distances"])
    assert calls[0].tolist() == list(range(64))  # the layout probe, then each position once
    assert np.array_equal(np.sort(np.concatenate(calls[1:])), np.arange(top))
    # the reference: the kernel's rotation of (1, 0) pairs, called on the same chunks, every position in memory
    x, y = pair_dims("neox", s.rotary)
    out = []
    for a, b in chunks_of(setting["lengths"], setting["chunk"]):
        q = np.zeros((b - a, 16))
        q[:, x] = 1.0
        if tensors == "torch":
            qt = torch.tensor(q, dtype=torch.bfloat16)
            out.append(fn(qt, qt.clone(), torch.arange(a, b))[0].double().numpy())
        else:
            out.append(fn(q, q.copy(), np.arange(a, b))[0])
    q = np.concatenate(out)
    with np.errstate(invalid="ignore"):
        e = wrap(np.arctan2(q[:, y], q[:, x]) - exact_angles(np.arange(top), s.inv_freq()))
    for row in rows:
        assert_figures(row, every_position(q, e, row.length, setting["distances"]))
    if kernel == "numpy-nan":
        assert rows[-1].first_nonfinite == 1900 and rows[-1].pair_errors[-1].max_rotation_error == math.pi
    if kernel == "bf16-positions":
        assert rows[-1].colliding_positions > 0


@pytest.mark.parametrize("setting", [SPLIT, DEFAULTS], ids=["asked", "defaults"])
@pytest.mark.parametrize("cast", [False, True], ids=["as-built", "cast-bf16"])
def test_module_pass_runs_each_position_once_and_matches_every_position(cast: bool, setting: dict) -> None:
    # transformers' LlamaRotaryEmbedding (as built, and after .to(bfloat16): its inv_freq buffer downcast)
    pytest.importorskip("transformers")
    import torch

    from precision_audit.hf import audit_rope_module, build_rotary_module, find_rotary_classes

    module, conf = build_rotary_module(find_rotary_classes("llama")[0])
    module = module.to(torch.bfloat16) if cast else module
    s = RopeSchedule(head_dim=int(conf.hidden_size // conf.num_attention_heads),
                     base=float(conf.rope_parameters["rope_theta"]))
    top, nf = max(setting["lengths"]), s.n_freq
    calls: list[np.ndarray] = []

    def counted(x: object, position_ids: object) -> object:
        calls.append(position_ids[0, 1:].numpy().copy())  # each call also holds the last position first
        return module(x, position_ids)

    rows = audit_rope_module(counted, s, setting["lengths"], match=False, chunk=setting["chunk"],
                             distances=setting["distances"])
    assert np.array_equal(np.sort(np.concatenate(calls)), np.arange(top))
    cs = []
    for a, b in chunks_of(setting["lengths"], setting["chunk"]):
        with torch.no_grad():
            c, sn = module(torch.zeros(1, b - a + 1, 1, dtype=torch.bfloat16),
                           torch.cat([torch.tensor([top - 1]), torch.arange(a, b)])[None])
        cs.append(np.concatenate([t[0, 1:, :nf].double().numpy() for t in (c, sn)], 1))
    cc = np.concatenate(cs)
    assert module.attention_scaling == 1.0
    e = wrap(np.arctan2(cc[:, nf:], cc[:, :nf]) - exact_angles(np.arange(top), s.inv_freq()))
    for row in rows:
        assert_figures(row, every_position(cc, e, row.length, setting["distances"]))


@pytest.mark.parametrize(("lengths", "distances", "chunk"), [
    ([300, 1000, 1700, 2500], (1, 16, 300, 700, 1200), 256), ([1024, 4096], None, 256), ([2000], (1, 999), 300),
    ([1000, 1001, 2600], (1, 5, 400, 1300, 2599), 7 * 37), ([4096], None, 100),
])
def test_pair_pass_orders_and_holds(lengths: list[int], distances: tuple[int, ...] | None, chunk: int) -> None:
    # PairPass alone on random signed errors (some nan): the twin order, rows held until paired (or re-run,
    # when holding would exceed held_bytes), the same bits either way, and every-position figures
    from precision_audit.rope.pairs import PairPass

    nf = 3
    e = np.random.default_rng(7).uniform(-math.pi, math.pi, (max(lengths), nf))
    e[1500:1502, 1] = np.nan
    found = []
    for held_bytes in (64 * 2**20, 0):
        pp = PairPass(lengths, distances, chunk, nf, held_bytes=held_bytes)
        assert sorted(pp.order) == list(range(len(pp.chunks)))
        reruns: list[tuple[int, int]] = []
        most = 0
        for j in pp.order:
            a, b = pp.chunks[j]
            pp.add(e[a:b], a, b, shifted=lambda x, y: reruns.append((x, y)) or e[x:y])
            most = max(most, pp.held)
        assert pp.held == 0 and bool(reruns) == bool(pp.rerun)
        if held_bytes == 0:
            assert pp.twin is None and pp.order == list(range(len(pp.chunks))) and most <= 2 * chunk
        elif pp.twin is not None:
            assert pp.twin not in pp.rerun
        found.append([pp.errors(L) for L in sorted(lengths)])
        for L, errs in zip(sorted(lengths), found[-1]):
            ref = every_position(np.zeros((L, 1)) + np.arange(L)[:, None], e, L, distances)["pairs"]
            assert [p.distance for p in errs] == [d for d, _, _ in ref]
            for p, (_, mx, mean) in zip(errs, ref):
                assert p.max_rotation_error == mx and p.mean_rotation_error == pytest.approx(mean, rel=1e-13)
    assert found[0] == found[1]  # held or re-run: the same bits


def test_pair_pass_refuses_wrong_chunks() -> None:
    from precision_audit.rope.pairs import PairPass

    pp = PairPass([8], [4], chunk=2, nf=1)
    e = np.zeros((8, 1))
    with pytest.raises(ValueError, match="not a chunk"):
        pp.add(e[1:3], 1, 3)
    pp.add(e[0:2], 0, 2)
    with pytest.raises(ValueError, match="not a chunk"):
        pp.add(e[0:2], 0, 2)
    with pytest.raises(ValueError, match="asked before positions 2..3"):
        pp.errors(8)
