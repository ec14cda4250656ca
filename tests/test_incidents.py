"""The incident catalog: every measured figure pinned against an independent computation.

The oracle here never calls the tool's rounding: ``rne`` rounds float64 values
to p significant bits with frexp/rint (round half to even; exact for inputs
that are products of two <= 26-bit numbers, as every product below is), and
binade facts are integer arithmetic.  Frequencies come from mpmath.  Where a
float64 cos/sin enters (one float64 rounding, 1e-16), the tolerance says so.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import mpmath
import numpy as np
import pytest
from click.testing import CliRunner

from precision_audit.rope.attention import apply_errors, apply_rotation, attention_errors
from precision_audit.cli import main
from precision_audit.incidents import (
    CATALOG,
    VERDICTS,
    IncidentResult,
    angle_overflow,
    catalog_markdown,
    incident_names,
    reproduce,
)
from precision_audit.rope import Recipe, RopeSchedule, preset

mpmath.mp.prec = 100
FP16_MAX = 65504.0


def rne(x, p: int, *, max_finite: float | None = None) -> np.ndarray:
    """Round float64 values to p significant bits, ties to even (normal range), inf beyond max_finite."""
    x = np.asarray(x, dtype=np.float64)
    m, e = np.frexp(x)  # x = m * 2**e, 0.5 <= |m| < 1
    out = np.ldexp(np.rint(np.ldexp(m, p)), e - p)
    if max_finite is not None:
        out = np.where(np.abs(out) > max_finite, np.copysign(np.inf, x), out)
    return out


def fp16(x):
    """fp16: 11 bits, subnormals below 2**-14 on a fixed 2**-24 grid, inf from 65520."""
    x = np.asarray(x, dtype=np.float64)
    return np.where(np.abs(x) < 2.0**-14, np.ldexp(np.rint(np.ldexp(x, 24)), -24), rne(x, 11, max_finite=FP16_MAX))


def bf16(x):
    return rne(x, 8)


def fp32(x):
    return rne(x, 24)


def thetas(dim: int, base: float) -> np.ndarray:
    return np.array([float(mpmath.mpf(base) ** (-mpmath.mpf(2 * i) / dim)) for i in range(dim // 2)])


def wrapped_error(angle: np.ndarray, m: np.ndarray, th: np.ndarray) -> np.ndarray:
    """|angle - m*theta| wrapped to [0, pi]; float64 m*theta is within 1e-12 rad for m < 2**20."""
    d = angle - m[:, None] * th[None, :]
    return np.abs(d - 2 * np.pi * np.rint(d / (2 * np.pi)))


@pytest.fixture(scope="module")
def results(incident_results) -> dict[str, IncidentResult]:
    """Every entry reproduced (once per session: conftest's ``incident_results``)."""
    return incident_results


def test_catalog_has_the_reports_with_references(results):
    assert set(incident_names()) >= {"baichuan", "gpt-neox-1003", "transformers-25681", "transformers-29285",
                                      "modded-nanogpt-39", "candle-3520", "cactus-688", "mlx-lm-1076"}
    for name, r in results.items():
        assert r.verdict in VERDICTS
        assert (r.verdict == "differs") == bool(r.reasons)
        assert r.verdict_line.startswith(r.verdict)
        assert r.published and r.measured and r.explanation and r.fix and r.stack
        assert 2023 <= r.year <= 2026 and set(r.headline) <= set(r.measured) and r.headline
        repo, _, num = r.reference.partition("#")
        if num:  # a GitHub report: its issue / pull request address
            assert "/" in repo and num.isdigit() and r.url == f"https://github.com/{repo}/issues/{num}"
        else:  # an article or a paper: its own address, where one is known
            assert name == "baichuan" or r.url.startswith("https://")
        d = r.to_dict()
        assert {"name", "reference", "year", "stack", "published", "measured", "verdict", "verdict_line",
                "explanation", "fix"} <= set(d)
        json.dumps(d)


def test_verdict_lines(results):
    # an entry without checks is 'not recomputable' with its reason; a failing check makes 'differs: <reasons>'
    assert results["transformer-engine-1245"].verdict_line == "not recomputable: qualitative (a loss gap, no figure)"
    c = results["candle-3520"]
    assert c.verdict_line == "differs: " + "; ".join(c.reasons)
    assert results["gpt-neox-1003"].verdict_line == "reproduced"
    assert results["vllm-27722"].verdict_line.startswith("reproduced (not recomputable: ")


def test_incident_validation(results):
    inc = CATALOG["gpt-neox-1003"]
    with pytest.raises(ValueError, match="must be owner/repo#number"):
        replace(inc, reference="gpt-neox issue 1003")
    with pytest.raises(ValueError, match="year 1999 out of range"):
        replace(inc, year=1999)
    with pytest.raises(ValueError, match="stack and fix must be given"):
        replace(inc, fix="")
    with pytest.raises(ValueError, match="verdict 'maybe' must be one of"):
        replace(results["baichuan"], verdict="maybe")


def test_catalog_markdown(results):
    text = catalog_markdown(list(results.values()))
    lines = text.splitlines()
    assert lines[0] == "| id | year | stack | code path | published | measured | verdict | fix |"
    assert len(lines) == 2 + len(results)
    assert all(line.count(" | ") >= 7 for line in lines)  # 8 cells each ('|' inside a cell is escaped)
    row = next(line for line in lines if "vllm-27722" in line)
    assert "low = 8.092779" in row and "pairwise_error_4096 = 0.9042" in row and "vllm#28244" in row


def test_unknown_incident_is_a_value_error():
    with pytest.raises(ValueError, match="unknown incident 'x'; valid: baichuan"):
        reproduce("x")


# ---------------------------------------------------------------- baichuan


def test_baichuan(results):
    m = results["baichuan"].measured
    # bf16 exact integers: all of 0..256, then 128 per binade [2**k, 2**(k+1)) for k = 8..12
    assert m["bf16_exact_positions_8192"] == 257 + 127 + 4 * 128 == 896
    assert m["bf16_exact_share_8192"] == 896 / 8192
    assert results["baichuan"].verdict == "reproduced"


# ---------------------------------------------------------------- gpt-neox-1003


def test_gpt_neox_1003(results):
    m, th, pos = results["gpt-neox-1003"].measured, thetas(32, 10000), np.arange(2048.0)
    # inv_freq[1] = 10000**(-1/16) = 0.56234..; fp16 spacing in [0.5, 1) is 2**-11
    k = round(th[1] * 2**11)
    assert k == 1152 and 1857 * k / 2**11 == 1044.5625
    assert m["angle_fp16_1857_1"] == 1045.0  # [1024, 2048): spacing 1, 1044.5625 -> 1045
    assert m["angle_fp32_1857_1"] == float(fp32(1857 * fp32(th[1])))
    assert abs(m["angle_fp32_1857_1"] - 1044.2678) < 5e-5  # the report's printout
    # the whole table: fp16 path against the fp32 path, cos of each rounded to its format
    a16 = fp16(pos[:, None] * fp16(th)[None, :])
    a32 = fp32(pos[:, None] * fp32(th)[None, :])
    diff = np.abs(fp16(np.cos(a16)) - fp32(np.cos(a32)))
    assert abs(m["max_abs_cos_diff"] - diff.max()) <= 2**-11  # one fp16 ulp of the cos (subnormal/double rounding)
    assert list(m["max_abs_cos_diff_at"]) == [int(i) for i in np.unravel_index(diff.argmax(), diff.shape)]
    assert abs(m["max_abs_cos_diff"] - 0.7819) < 1e-4
    assert results["gpt-neox-1003"].verdict == "reproduced"


# ---------------------------------------------------------------- transformers-25681 / 29285


def test_transformers_25681(results):
    m, th, pos = results["transformers-25681"].measured, thetas(128, 10000), np.arange(2048.0)
    # rows collide when bf16 positions collide: count m with rne8(m) == rne8(m - 1)
    p = bf16(pos)
    assert m["bf16_colliding_positions"] == int(np.count_nonzero(p[1:] == p[:-1])) == 1407
    a = fp16(fp16(pos)[:, None] * fp16(th)[None, :])
    rot = wrapped_error(np.arctan2(fp16(np.sin(a)), fp16(np.cos(a))), pos, th)
    assert abs(m["fp16_max_rotation_error"] - rot.max()) < 1e-3  # cos/sin rounding: < 2**-10 rad
    assert results["transformers-25681"].verdict == "reproduced"


def test_transformers_29285(results):
    r = results["transformers-29285"]
    m, th = r.measured, thetas(256, 10000)
    for n, key in ((2048, "fp16_max_angle_error_2048"), (8192, "fp16_max_angle_error_8192")):
        pos = np.arange(float(n))
        err = wrapped_error(fp16(fp16(pos)[:, None] * fp16(th)[None, :]), pos, th)
        assert m[key] == pytest.approx(err.max(), abs=1e-5)
    pos = np.arange(8192.0)
    err = wrapped_error(bf16(bf16(pos)[:, None] * bf16(th)[None, :]), pos, th)
    assert m["bf16_max_angle_error_8192"] == pytest.approx(err.max(), abs=1e-5)
    # verdict: the bf16 claim holds, the "fp16 does not occur" claim does not
    assert r.verdict == "differs" and len(r.reasons) == 1 and r.reasons[0].startswith("fp16:")


# ---------------------------------------------------------------- modded-nanogpt-39


def test_modded_nanogpt_39(results):
    r = results["modded-nanogpt-39"]
    m, th = r.measured, thetas(128, 10000)
    # the bug's apply, by hand for band [0, 1024): fp32 angle and cos/sin, bf16 cache, bf16 elementwise ops
    q = bf16(np.random.default_rng(0).standard_normal((8, 128)))
    pos = np.unique(np.linspace(0, 1022, num=512).round())
    pos = np.concatenate([pos, pos + 1])
    a = fp32(pos[:, None] * fp32(th)[None, :])
    c, s = bf16(fp32(np.cos(a))), bf16(fp32(np.sin(a)))
    x1, x2 = q[:, None, :64], q[:, None, 64:]
    y1, y2 = bf16(bf16(x1 * c) - bf16(x2 * s)), bf16(bf16(x2 * c) + bf16(x1 * s))
    phi = pos[:, None] * th[None, :]
    e1, e2 = x1 * np.cos(phi) - x2 * np.sin(phi), x2 * np.cos(phi) + x1 * np.sin(phi)
    rel = np.sqrt(((y1 - e1) ** 2 + (y2 - e2) ** 2).sum(2)) / np.sqrt((q * q).sum(1))[:, None]
    assert m["bf16_cache_max_rel_error_0_1024"] == pytest.approx(rel.max(), rel=1e-3)
    # no accumulation: the last band's error is within 2x the first's (the reason the verdict differs)
    assert m["bf16_cache_max_rel_error_8192_65536"] < 2 * m["bf16_cache_max_rel_error_0_1024"]
    assert r.verdict == "differs"


# ---------------------------------------------------------------- candle-3520


def test_candle_3520(results):
    r = results["candle-3520"]
    m = r.measured
    # 8192 <= 15962 < 16384: exponent 13, 8 significant bits -> spacing 2**(13 - 7) = 64
    q, rem = divmod(15962, 64)
    assert (q, rem) == (249, 26) and rem < 32
    assert m["bf16_value_of_15962"] == 249 * 64 == 15936
    assert m["bf16_neighbours_of_15962"] == [15936, 16000] and m["bf16_spacing_at_15962"] == 64
    assert 15968 % 64 != 0  # the published alternative is not a bf16 value
    for p in (15962, 15968, 15936):
        assert m[f"cos_{p}"] == pytest.approx(float(mpmath.cos(p)), abs=5e-5)
    assert m["stored_bf16_cos_15962_freq0"] == float(bf16(math.cos(15936.0)))  # -137/512
    assert m["stored_bf16_cos_15962_freq0"] == -137 / 512
    assert r.verdict == "differs" and len(r.reasons) == 5


# ---------------------------------------------------------------- cactus-688 and the fp16 overflow


def test_cactus_688(results):
    r = results["cactus-688"]
    m, th = r.measured, thetas(128, 1e6)
    pos = np.arange(16384.0)
    a = fp16(fp16(pos)[:, None] * fp16(th)[None, :])
    err = wrapped_error(a, pos, th).max(axis=1)
    assert m["first_position_angle_error_over_1_rad"] == int(np.argmax(err > 1.0)) == 2049
    assert m["first_position_angle_error_over_2_rad"] == int(np.argmax(err > 2.0))
    unwrapped = np.abs(a - pos[:, None] * th[None, :]).max(axis=1)
    assert m["max_unwrapped_angle_error_6144"] == pytest.approx(unwrapped[:6144].max(), abs=1e-3)
    # fp16: 65504 = 2047 * 32 is the largest finite; 65520 is the midpoint to 2**16 and ties to even (2048 * 32)
    assert fp16(65519.0) == 65504 and np.isinf(fp16(65520.0))
    assert m["first_overflow_position"] == 65520
    assert m["non_finite_angles_131072"] == (131072 - 65520) * 64
    assert r.verdict == "reproduced"


def test_angle_overflow_per_frequency():
    # positions in fp32, angle in fp16: only m * theta_i >= 65520 overflows, frequency by frequency
    s = RopeSchedule(head_dim=4, base=4.0)  # theta = 1, 1/2
    rec = Recipe("angle-fp16", "fp32", "fp32", "fp16", "fp32", "fp16")
    o = angle_overflow(s, rec, 140000, chunk=4096)
    # theta_1 = 1/2: m/2 rounds to inf from m/2 >= 65520, i.e. m >= 131040
    assert o.first_overflow == (65520, 131040)
    assert o.non_finite == (140000 - 65520) + (140000 - 131040)


# ---------------------------------------------------------------- mlx-lm-1076


def test_mlx_lm_1076(results):
    r = results["mlx-lm-1076"]
    m = r.measured
    assert m["fp16_epsilon"] == 2.0**-10 and m["fp16_smallest_subnormal"] == 2.0**-24
    th = thetas(64, 1e7)
    assert m["lowest_frequency_change_per_token"] == pytest.approx(float(2 * mpmath.sin(th[-1] / 2)), rel=1e-5)
    assert m["highest_frequency_change_per_token"] == pytest.approx(float(2 * mpmath.sin(0.5)), rel=1e-5)
    # a pair turning ~1 rad per token moves its components by O(|pair|) >> fp16 spacing: never identical
    assert m["kernel_identical_neighbours_262144_393216"] == 0
    # exact angles, fp32 rotation, one fp16 cast: each component within half an fp16 ulp plus fp32 noise
    for band in ("0_2048", "2048_262144", "262144_393216"):
        assert m[f"exact_angle_max_rel_error_{band}"] <= 2**-11 * (1 + 2**-8)
    # fp32 angle error near 2**18: fp32(m * fp32(theta_i)) against m * theta_i, by hand
    pos = np.arange(131072.0, 262144.0)
    err = wrapped_error(fp32(pos[:, None] * fp32(th)[None, :]), pos, th)
    assert m["fp32_max_angle_error_262144"] == pytest.approx(err.max(), rel=1e-3)
    assert r.verdict == "differs" and len(r.reasons) == 3


# ---------------------------------------------------------------- the apply stage


def test_apply_rotation_elementwise_matches_hand_rounding():
    rng = np.random.default_rng(5)
    x1, x2, ang = rng.standard_normal(4000), rng.standard_normal(4000), rng.uniform(-4, 4, 4000)
    c, s = np.cos(ang), np.sin(ang)
    for fmt, rnd in (("float16", fp16), ("bfloat16", bf16)):
        y1, y2 = apply_rotation(x1, x2, c, s, fmt)
        a1, a2, cc, ss = rnd(x1), rnd(x2), rnd(c), rnd(s)
        assert np.array_equal(y1, rnd(rnd(a1 * cc) - rnd(a2 * ss)))
        assert np.array_equal(y2, rnd(rnd(a2 * cc) + rnd(a1 * ss)))
        z1, z2 = apply_rotation(x1, x2, c, s, fmt, "fp32-then-cast")
        c32, s32 = fp32(c), fp32(s)
        assert np.array_equal(z1, rnd(fp32(fp32(a1 * c32) - fp32(a2 * s32))))
        assert np.array_equal(z2, rnd(fp32(fp32(a2 * c32) + fp32(a1 * s32))))


def test_apply_errors_bound_and_validation():
    s = RopeSchedule(head_dim=64)
    (row,) = apply_errors(s, preset("fp64", "float64"), [4096], "bf16", "fp32-then-cast", vectors=4, samples=64)
    # exact cos/sin, fp32 ops, one bf16 cast per component: |err| <= 2**-8 |y| + O(2**-23)
    assert row.max_rel_error <= 2**-8 * (1 + 2**-4) and row.unit_roundoff == 2**-8
    with pytest.raises(ValueError, match="unknown apply mode"):
        apply_errors(s, preset("fp32"), [64], "bf16", "fp64")
    with pytest.raises(ValueError, match="unknown dtype"):
        apply_errors(s, preset("fp32"), [64], "bf17")


def test_attention_with_apply_float64_matches_plain():
    # a recipe whose apply stage is float64 and an explicit apply="float64" rotate alike
    from dataclasses import replace

    s = RopeSchedule(head_dim=16)
    a = attention_errors(s, replace(preset("lowp", "bf16"), apply="float64"), 300, [7], pairs=2)
    b = attention_errors(s, preset("lowp", "bf16"), 300, [7], pairs=2, apply="float64")
    assert b[0].apply == "float64" and b[0].mode == "elementwise"
    assert b[0].max_logit_error == pytest.approx(a[0].max_logit_error, rel=1e-9, abs=1e-12)


# ---------------------------------------------------------------- CLI


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_cli_list_and_errors(results, shared_reproduce, monkeypatch):
    # --list reproduces each entry for its verdict: fed the fixture's results here (the same rows, measured once;
    # test_cli_list_runs_the_catalog, in the slow pass, lists the real run's)
    import precision_audit.incidents as incidents

    monkeypatch.setattr(incidents, "reproduce", shared_reproduce)
    res = run("reproduce", "--list")
    assert res.exit_code == 0
    lines = res.output.splitlines()[2:]
    assert len(lines) == len(CATALOG)  # one line each
    for name, inc in CATALOG.items():
        (line,) = [x for x in lines if f" {name} " in f" {x} "]
        assert inc.reference in line and str(inc.year) in line and inc.stack in line
        assert f" {results[name].verdict} " in f" {line} "  # each entry's verdict on its line
    # grouped: sorted by stack, then year
    order = [next(i for i in CATALOG.values() if f" {i.name} " in f" {x} ") for x in lines]
    assert [(i.stack.lower(), i.year) for i in order] == sorted((i.stack.lower(), i.year) for i in order)
    listed = json.loads(run("reproduce", "--list", "--json").output)["results"]
    assert {r["name"] for r in listed} == set(CATALOG) and all({"stack", "year"} <= set(r) for r in listed)
    assert {r["name"]: r["verdict"] for r in listed} == {n: r.verdict for n, r in results.items()}
    bad = run("reproduce", "nope")
    assert bad.exit_code == 2 and f"'nope' is not one of the {len(CATALOG)} incidents (see --list)." in bad.output
    near = run("reproduce", "candle-352")
    assert near.exit_code == 2 and "closest: candle-3520" in near.output and len(near.output) < 300
    assert run("reproduce").exit_code == 2
    assert run("reproduce", "cactus-688", "--list").exit_code == 2
    assert run("reproduce", "cactus-688", "--all").exit_code == 2
    assert run("reproduce", "--all", "--list").exit_code == 2


@pytest.mark.slow
def test_cli_list_runs_the_catalog(results):
    """`reproduce --list` on the real reproduce (two more runs of the catalog): each entry's verdict is the
    fixture's, in text and JSON."""
    lines = run("reproduce", "--list").output.splitlines()[2:]
    assert len(lines) == len(CATALOG)
    for name in CATALOG:
        (line,) = [x for x in lines if f" {name} " in f" {x} "]
        assert f" {results[name].verdict} " in f" {line} "
    listed = json.loads(run("reproduce", "--list", "--json").output)["results"]
    assert {r["name"]: r["verdict"] for r in listed} == {n: r.verdict for n, r in results.items()}


def test_cli_reproduce_json_and_text():
    doc = json.loads(run("reproduce", "gpt-neox-1003", "--json").output)
    (row,) = doc["results"]
    assert row["verdict"] == "reproduced" and row["published"]["max_abs_cos_diff"] == 0.7819
    text = run("reproduce", "candle-3520").output
    assert "verdict: differs" in text and "16000" in text
    base = run("reproduce", "baichuan")
    assert base.exit_code == 0 and "896 of 8192" in base.output and "verdict: reproduced" in base.output


def test_cli_attention_apply():
    res = run("attention", "-l", "4096", "-r", "fp32", "--apply", "bf16", "--apply-mode", "fp32-then-cast",
              "--distance", "5", "--head-dim", "32", "--json")
    assert res.exit_code == 0
    (row,) = json.loads(res.output)["results"]
    assert row["apply"] == "bfloat16" and row["mode"] == "fp32-then-cast"
    assert run("attention", "--apply", "bf17").exit_code == 2


def test_cli_all_json_and_text(results, shared_reproduce_all, monkeypatch):
    # --all runs reproduce_all(): fed the fixture's results here (the same rows, measured once)
    import precision_audit.incidents as incidents

    monkeypatch.setattr(incidents, "reproduce_all", shared_reproduce_all)
    doc = json.loads(run("reproduce", "--all", "--json").output)
    assert doc["auditor"] == "reproduce" and [r["name"] for r in doc["results"]] == list(results)
    assert {r["name"]: r["verdict"] for r in doc["results"]} == {n: r.verdict for n, r in results.items()}
    text = run("reproduce", "--all").output
    assert "tinygrad-4587: differs: claim:" in text and "not recomputable" in text
    one = run("reproduce", "tinygrad-4587").output
    assert "fix: compute the positions" in one and "(2024, tinygrad)" in one
