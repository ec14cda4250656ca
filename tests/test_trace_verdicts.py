"""trace's verdict on significance (issue 51 item 3): each output judged by its kind's rule, an op named only where
it matters, and "explains" measured against a correctly rounded op in the same dtype.

Referees: litgpt's ``build_rope_cache`` and timm's ``RotaryEmbeddingCat.get_embed`` run here from the installed
packages (tests/referees/_pkgfile.py loads their module files without the package ``__init__``, which needs
lightning / torchvision: not installed), float32 end to end: safe, no culprit; modules written here for each bug
kind the tool knows (bf16 positions from a buffer's dtype after ``.to(bfloat16)``, fp16 angles, a downcast
``inv_freq``), each found with its op and line; the kinds' rules against closed forms (bf16 / fp16 rounding by
ml_dtypes, the rules' thresholds in :mod:`precision_audit.verdicts`).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from referees._pkgfile import LITGPT_STUBS, package_file  # noqa: E402

from precision_audit.formats import get_format  # noqa: E402
from precision_audit.trace import run_traced, trace  # noqa: E402
from precision_audit.trace.judge import BEYOND_ROUNDING, judge, judge_outputs  # noqa: E402
from precision_audit.trace.report import TraceOp, culprits, mark_culprits  # noqa: E402
from precision_audit.verdicts import DEFAULT_TOLERANCE, NOTICED, PHASE_LOST  # noqa: E402

L = 8192


def _line(marker: str) -> int:
    """The line of this file that holds ``marker`` (where an op runs: the trace's ``where``)."""
    with open(__file__, encoding="utf-8") as fh:
        return next(i for i, text in enumerate(fh, 1) if text.rstrip().endswith(marker))


def _bf16(x):
    return np.asarray(x, dtype=np.float64).astype(ml_dtypes.bfloat16).astype(np.float64)


# --------------------------------------------------------------------------- referees: float32 code is safe


@pytest.fixture(scope="module")
def litgpt_model():
    return package_file("litgpt", "model", stubs=LITGPT_STUBS)


def test_litgpt_build_rope_cache_is_safe_with_no_culprit(litgpt_model):
    """The issue's case: build_rope_cache(seq_len, n_elem) in float32 (its arguments inferred: 8192, 64). Its cos
    and sin are judged together as a rotation: safe (float32 angles at 8K: pairwise errors far below pi/8), and no
    op is named although the error (~3e-4) is far beyond float32's rounding of the exact cos/sin: no op does worse
    than a correctly rounded op in float32 by a share that counts."""
    r = trace(litgpt_model.build_rope_cache, L)
    assert r.convention == "inferred" and r.target.endswith("(seq_len=8192, n_elem=64)")
    assert r.culprits == [] and r.output_verdict == "safe"
    assert [(o["kind"], o["verdict"]) for o in r.outputs] == [("rotation", "safe")] * 2
    assert all(o["half_ulps"] > BEYOND_ROUNDING for o in r.outputs)  # the significance test did run
    assert r.lines[0].startswith("no op before the output loses a significant share")
    pow_ = next(o for o in r.ops if o.op == "aten.pow.Scalar")
    assert pow_.explained < 0.1 and pow_.explained_float64 is None  # safe: no float64 rerun asked


def test_litgpt_pow_in_float64_owns_everything_by_promotion_rounded_it_owns_nothing(litgpt_model):
    """Why "explains" changed: pow rerun in float64 makes every later op float64 by type promotion and removes
    ~all of the final error (the issue's "100.0%"); its exact result rounded once to float32 (a correctly rounded
    pow), every later op in float32 as it ran, removes less than a tenth of it."""
    fn = litgpt_model.build_rope_cache
    kw = {"seq_len": L, "n_elem": 64}
    first = run_traced(fn, (), kw)
    i = next(r.index for r in first.records if r.op == "aten.pow.Scalar")

    def top_error(run):
        return max(float((o.double() - s).abs().max()) for o, s in zip(run.outputs, first.shadows))

    before = top_error(first)
    wide = top_error(run_traced(fn, (), kw, fix=i))
    rounded = top_error(run_traced(fn, (), kw, fix=i, rounded=True))
    assert wide < 0.01 * before and rounded > 0.9 * before


def test_timm_rotary_embedding_cat_get_embed_is_safe_with_no_culprit():
    """timm's 2-D RoPE (RotaryEmbeddingCat(64).get_embed([128, 128]): pixel-mode bands, a [sin | cos] table in
    float32): one output whose halves pair as (sin, cos): a rotation, safe, no culprit."""
    timm_rope = package_file("timm", "layers.pos_embed_sincos")
    r = trace(timm_rope.RotaryEmbeddingCat(64), call="get_embed", args={"shape": [128, 128]})
    assert r.culprits == [] and r.output_verdict == "safe"
    (out,) = r.outputs
    assert out["kind"] == "rotation" and out["shape"] == (128 * 128, 128) and out["dtype"] == "float32"


# --------------------------------------------------------------------------- bug referees keep naming their op


class CastToBuffer(torch.nn.Module):
    """Positions cast to the frequency buffer's dtype: after .to(bfloat16) they are bf16."""

    def __init__(self, dim: int = 64):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, dim, 2).float() / dim))

    def forward(self, x, position_ids):
        t = position_ids[0].to(self.inv_freq.dtype)  # LOSS: the cast
        ang = torch.outer(t, self.inv_freq).float()
        return ang.cos().to(x.dtype), ang.sin().to(x.dtype)


def test_a_cast_to_a_bf16_buffers_dtype_is_named_with_its_line():
    r = trace(CastToBuffer(), L, cast="bfloat16")
    top = r.culprits[0]
    assert top.op == "aten._to_copy.default" and top.out_dtype == "bfloat16"
    assert top.where == f"test_trace_verdicts.py:{_line('# LOSS: the cast')}"
    assert top.first_inexact == get_format("bfloat16").max_exact_integer + 1 and r.output_verdict == "broken"
    assert top.explained_float64 > 0.9


def test_fp16_angles_name_the_product():
    """Positions exact in float16 up to 2048 (closed form: 2**11), angles made in float16: the product rounds
    an angle near 2047 by up to half of fp16's spacing 1 there, 0.5 rad: pairwise errors beyond pi/8; the mul is
    named with its line."""
    inv = 1.0 / 10000 ** (torch.arange(0, 64, 2).float() / 64)

    def rope(position_ids):
        ang = position_ids[0].half()[:, None] * inv.half()  # LOSS: fp16 angles
        return ang.cos(), ang.sin()

    r = trace(rope, inputs={"position_ids": torch.arange(2048)[None]})
    assert r.output_verdict in ("degraded", "broken")
    named = [(o.op, o.where) for o in r.culprits]
    assert ("aten.mul.Tensor", f"test_trace_verdicts.py:{_line('# LOSS: fp16 angles')}") in named
    assert all(o.first_inexact is None for o in r.ops if o.op == "aten._to_copy.default")  # positions exact


def test_a_downcast_inv_freq_is_flagged_as_the_operand():
    """inv_freq rounded to bf16 (as model.to(bfloat16) leaves it), used in float32: every op rounds correctly,
    so no op is the culprit; the first line names the buffer.  The shadow computes from the values the buffer
    holds, so the rotation judged against it is safe: the RoPE audit against the schedule is what calls such a
    module broken (test_trace.py's hf-scan referee)."""
    class Downcast(torch.nn.Module):
        def __init__(self):
            super().__init__()
            inv = 1.0 / 10000 ** (torch.arange(0, 64, 2).float() / 64)
            self.register_buffer("inv_freq", inv.to(torch.bfloat16).float())

        def forward(self, x, position_ids):
            ang = position_ids[0].float()[:, None] * self.inv_freq
            return ang.cos(), ang.sin()

    r = trace(Downcast(), L)
    assert r.lines[0].startswith("operand inv_freq") and r.downcast[0].name == "inv_freq"
    assert r.outputs[0]["kind"] == "rotation" and r.outputs[0]["verdict"] == "safe" and r.culprits == []


# --------------------------------------------------------------------------- the kinds' rules, closed forms


def test_positions_collide_as_bf16_rounds_them():
    exact = np.arange(L, dtype=np.float64)
    real = _bf16(exact)
    want = int((real[1:] == real[:-1]).sum())  # neighbours sharing a bf16 value (ml_dtypes)
    j = judge(torch.tensor(real).to(torch.bfloat16), torch.tensor(exact), L)
    assert (j["kind"], j["verdict"], j["colliding"]) == ("positions", "broken", want)
    ok = judge(torch.arange(L, dtype=torch.float32), torch.tensor(exact), L)
    assert (ok["verdict"], ok["half_ulps"]) == ("safe", 0.0)


@pytest.mark.parametrize("shift, verdict", [(0, "safe"), (1, "degraded"), (2, "broken")])
def test_buckets_follow_the_relative_rule(shift, verdict):
    exact = np.repeat(np.arange(8), 16).astype(np.float64)  # a bucket function: repeats in the row
    real = exact.copy()
    real[-1] += shift
    j = judge(torch.tensor(real, dtype=torch.int64), torch.tensor(exact), 128)
    assert j["kind"] == "buckets" and j["verdict"] == verdict and j["flipped"] == (1 if shift else 0)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rotated_pairs_are_found_in_either_layout_and_judged_by_the_rope_rules(layout):
    """Rotated vectors of ones (every pair (1, 1), norm sqrt 2): an angle error of +e and -e at alternate
    positions gives a neighbouring pairwise error 2e; e = 0.1 is safe (0.2 < pi/8), e = 0.3 degraded (0.6),
    e = 0.8 broken (1.6 >= pi/2)."""
    n, h = 256, 4
    theta = np.outer(np.arange(n), 0.01 * np.arange(1, h + 1))

    def rotated(t):
        c, s = np.cos(t), np.sin(t)
        a, b = c - s, s + c  # (1, 1) rotated by t
        return np.concatenate([a, b], -1) if layout == "half" else np.stack([a, b], -1).reshape(n, 2 * h)

    exact = rotated(theta)
    for e, verdict in ((0.1, "safe"), (0.3, "degraded"), (0.8, "broken")):
        bump = np.full_like(theta, -e)
        bump[1::2] = e
        j = judge(torch.tensor(rotated(theta + bump)), torch.tensor(exact), n)
        assert j["kind"] == "rotation" and j["verdict"] == verdict, (e, j)
        assert math.isclose(j["max_rotation_error"], e, rel_tol=1e-9)
        assert math.isclose(dict(j["pair_errors"])[1], 2 * e, rel_tol=1e-9)
    assert NOTICED <= 0.6 < PHASE_LOST <= 1.6


def test_cos_and_sin_side_by_side_are_one_rotation_with_colliding_rows():
    """Two outputs (cos, sin) of positions rounded to bf16: rows of neighbouring positions that round together
    are equal while the exact ones differ: colliding, broken (the closed form counts them with ml_dtypes)."""
    pos = np.arange(1024, dtype=np.float64)
    w = 1.0 / 10000 ** (np.arange(0, 16, 2) / 16)
    real_pos = _bf16(pos)
    outs = [torch.tensor(np.cos(np.outer(real_pos, w))), torch.tensor(np.sin(np.outer(real_pos, w)))]
    shadows = [torch.tensor(np.cos(np.outer(pos, w))), torch.tensor(np.sin(np.outer(pos, w)))]
    a, b = judge_outputs(outs, shadows, 1024)
    want = int((real_pos[1:] == real_pos[:-1]).sum())
    assert {k: v for k, v in a.items() if k != "half_ulps"} == {k: v for k, v in b.items() if k != "half_ulps"}
    assert a["kind"] == "rotation" and a["colliding"] == want > 0 and a["verdict"] == "broken"


def test_values_follow_alibis_rule():
    """A bias row (slope * distance): within DEFAULT_TOLERANCE half-ulps of its largest value is safe, beyond it
    degraded; neighbours that share a value or swap order are broken."""
    exact = -0.5 * np.arange(64, dtype=np.float64)[None, :]
    half = float(np.spacing(np.float32(31.5))) / 2  # float32 half-ulp at the largest |bias|
    for err, verdict in ((DEFAULT_TOLERANCE * half, "safe"), (2 * DEFAULT_TOLERANCE * half, "degraded")):
        real = exact.copy()
        real[0, 10] += err
        j = judge(torch.tensor(real, dtype=torch.float64).float(), torch.tensor(exact), 64)
        assert (j["kind"], j["verdict"]) == ("values", verdict)
    shared = exact.copy()
    shared[0, 11] = shared[0, 10]
    assert judge(torch.tensor(shared).float(), torch.tensor(exact), 64)["verdict"] == "broken"


# --------------------------------------------------------------------------- the naming rule, as a table


def _op(index, explained, wide=None, role="op"):
    return TraceOp(index, "aten.mul.Tensor", "f.py:1", ("float32",), "float32", (4,), 1.0, 1.0, None, explained,
                   role, explained_float64=wide)


@pytest.mark.parametrize("name, ops, significant, beyond, named", [
    ("safe, within rounding: nothing", [_op(0, 0.9, 0.9)], False, False, []),
    ("safe, beyond rounding, correctly rounded ops: nothing", [_op(0, 0.0), _op(1, 0.05)], False, True, []),
    ("safe, beyond rounding, an op worse than correctly rounded", [_op(0, 0.6), _op(1, 0.0)], False, True, [0]),
    ("safe: a float64 share is not asked", [_op(0, 0.0, 1.0)], False, True, []),
    ("broken: the float64 share names it", [_op(0, 0.0, 1.0), _op(1, 0.0, 0.2)], True, False, [0]),
    ("broken: half the top share or more", [_op(0, 0.0, 0.8), _op(1, 0.0, 0.45)], True, False, [0, 1]),
    ("broken: an output cast is never named", [_op(0, 0.0, 1.0, "output cast")], True, False, []),
])
def test_mark_culprits_rule(name, ops, significant, beyond, named):
    assert [o.index for o in culprits(mark_culprits(ops, significant, beyond))] == named, name


def test_fp16_angles_returned_as_such_are_judged_by_the_rope_rules():
    """Angles m * theta returned in float16 (kind: angles, found by their form: 0 at position 0, linear along
    the position axis).  Oracle: each product of the stored fp16 operands rounded once to fp16
    (numpy float16; the fp16 product of two fp16 values is exact in float32 before that rounding), against the
    product of the same stored values (the shadow takes the stored theta); the pairwise errors at the RoPE audits'
    distances (precision_audit.rope.pairs.row_distances) match, and so does the verdict."""
    from precision_audit.rope.pairs import row_distances
    from precision_audit.verdicts import rope_verdict

    n = 2048
    inv = 1.0 / 10000 ** (torch.arange(0, 64, 2).float() / 64)

    def angles(position_ids):
        return position_ids[0].half()[:, None] * inv.half()

    r = trace(angles, inputs={"position_ids": torch.arange(n)[None]})
    (out,) = r.outputs
    theta = inv.half().double().numpy()
    exact = np.outer(np.arange(n), theta)
    real = exact.astype(np.float16).astype(np.float64)
    err = real - exact
    pairs = [(d, float(np.abs(err[d:] - err[:-d]).max())) for d in row_distances(n)]
    j = judge(torch.tensor(real).half(), torch.tensor(exact), n)
    assert j["kind"] == "angles" and [(d, pytest.approx(e, abs=1e-12)) for d, e in pairs] == j["pair_errors"]
    assert out["kind"] == "angles" and out["verdict"] == j["verdict"] == rope_verdict(float(np.abs(err).max()), 0,
                                                                                       pair_errors=pairs)
    assert out["verdict"] == "degraded" and [o.op for o in r.culprits] == ["aten.mul.Tensor"]
    ok = trace(lambda position_ids: position_ids[0].float()[:, None] * inv,
               inputs={"position_ids": torch.arange(n)[None]})
    assert ok.outputs[0]["kind"] == "angles" and ok.output_verdict == "safe" and ok.culprits == []


def test_rounded_reruns_reusing_the_main_runs_outputs_are_the_full_reruns():
    """The correctly rounded reruns that reuse the main run's outputs (and its kept float64 results) give the same
    outputs, bit for bit, as rounded reruns that compute every op (transformers' Llama rotary module)."""
    pytest.importorskip("transformers")
    from precision_audit.trace.shadow import Kept
    from precision_audit.trace.target import load_target

    mod = load_target("tests/data/llama-3.1-8b.json").fn
    args = (torch.zeros(1, 3000, 1, dtype=torch.bfloat16), torch.arange(3000)[None])
    names = dict(mod.named_buffers())
    keep = Kept()
    first = run_traced(mod, args, seeds=[1], names=names, keep=keep)
    fixed = [r.index for r in first.records if r.added > 0]
    assert fixed and keep.usable
    for i in fixed:
        a = run_traced(mod, args, seeds=[1], names=names, fix=i, keep=keep, rounded=True).outputs
        b = run_traced(mod, args, seeds=[1], names=names, fix=i, rounded=True).outputs
        assert len(a) == len(b) == 2 and all(torch.equal(x, y) for x, y in zip(a, b))
        assert all(x.dtype == torch.bfloat16 for x in a)  # no float64 reached the outputs


def test_a_broken_rope_audit_is_not_blamed_on_the_output_rounding():
    """Llama 3.1's rotary module after .to(bfloat16): its outputs match their shadows (computed from the downcast
    inv_freq) to one bf16 rounding, so they are safe against them and no op is named; the RoPE audit against the
    schedule is degraded (fast pairs radians off 4K apart, those that resolve the distance not), so the result's
    verdict is degraded, and the first lines say the operand, never that the final rounding did it."""
    pytest.importorskip("transformers")
    r = trace("tests/data/llama-3.1-8b.json", 4096, cast="bfloat16")
    assert [o["verdict"] for o in r.outputs] == ["safe", "safe"] and r.verdict == r.output_verdict == "degraded"
    assert r.culprits == [] and r.lines[0].startswith("operand inv_freq")
    assert not any("by that rounding itself" in line for line in r.lines)


def test_an_overflowed_fp16_output_is_judged_broken_without_a_warning():
    """Positions times 40 in float16: from 65520 / 40 = 1638 on they overflow to inf (closed form: float16's
    largest finite 65504, and values from 65520 round to inf); the output is positions (integer-valued), broken by
    its non-finite values; the suite turns warnings into errors, so judging inf and NaN warns about nothing."""
    def scaled(position_ids):
        return position_ids.half() * 40.0

    r = trace(scaled, inputs={"position_ids": torch.arange(4096)[None]})
    (out,) = r.outputs
    assert out["kind"] == "positions" and out["verdict"] == "broken"  # (its why: the collisions, first 2049 * 40)
    j = judge(run_traced(scaled, (), {"position_ids": torch.arange(4096)[None]}, seeds=["position_ids"]).outputs[0],
              torch.arange(4096, dtype=torch.float64)[None] * 40, 4096)
    assert j["non_finite"] == 4096 - math.ceil(65520 / 40) and j["verdict"] == "broken"
