"""precision_audit.trace on relative buckets, ALiBi and sinusoids: the trace agrees with the auditors.

Referees: transformers' own ``T5Attention._relative_position_bucket`` and Bloom's ``build_alibi_tensor`` run
under the tracer; a torch port of T5's formula without ``.float()`` and the classic sinusoidal encoding
(tests/referees/_ports.py, our code run in eager torch); the bucket auditor's paths
(:func:`precision_audit.relative.path_buckets`, :func:`~precision_audit.relative.exact_buckets`, decided on
integers), the sinusoidal auditor's rows, and closed forms (bf16's first inexact integer 257; Bloom's 8 slopes
2**-1 .. 2**-8, each product with a position rounded once to bf16 by ml_dtypes).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from referees._ports import sinusoid_port, t5_bucket_port  # noqa: E402

from precision_audit.alibi import audit_alibi  # noqa: E402
from precision_audit.formats import get_format  # noqa: E402
from precision_audit.relative import BucketScheme, audit_relative, exact_buckets, path_buckets  # noqa: E402
from precision_audit.sinusoidal import audit_sinusoidal  # noqa: E402
from precision_audit.trace import run_traced, trace  # noqa: E402
from precision_audit.verdicts import alibi_verdict  # noqa: E402

L = 4096
# The T5 traces build the (L, L) distance matrix (and its float64 shadow, once per rerun): at 1024 they keep every
# check at 4096 (first inexact distance 257; lowp-eager flips the same 3 distances at both lengths) in a
# sixteenth of the work (issue 52: 65 s of a loaded default run at 4096)
LT5 = 1024
FIRST = get_format("bfloat16").max_exact_integer + 1  # 257


def _distances(dtype):
    """The relative positions (memory - query) of the last query over keys 0..LT5-1, made in ``dtype``."""

    def rel(pos):
        return (pos[None, :] - pos[:, None])[-1].to(dtype)

    return rel


# --------------------------------------------------------------------------- T5 buckets


def test_t5_transformers_decoder_on_bf16_distances():
    """transformers' T5 bucket (decoder: bidirectional=False) on distances cast to bf16: the cast-distance path.
    The trace flags the cast (first inexact distance -257: the real one moves distances from 257 on) and finds
    no bucket that moves: every distance from 128 on sits in the last bucket, so no rounding above 256 shows,
    as the auditor's row says (0 flipped); the float64 shadow is the exact bucket, distance by distance."""
    T5Attention = pytest.importorskip("transformers.models.t5.modeling_t5").T5Attention
    rel = _distances(torch.bfloat16)

    def buckets(pos):
        return T5Attention._relative_position_bucket(rel(pos), bidirectional=False)

    r = trace(buckets, inputs={"pos": torch.arange(LT5)}, positions=["pos"])
    (row,) = audit_relative(BucketScheme("t5", bidirectional=False), "cast-distance", LT5, "bfloat16")
    assert r.final_error == row.max_shift == row.flipped == 0 and r.culprits == []
    cast = next(o for o in r.ops if o.op == "aten._to_copy.default" and o.out_dtype == "bfloat16")
    assert cast.first_inexact == -FIRST and r.length == LT5
    run = run_traced(buckets, (), {"pos": torch.arange(LT5)}, seeds=["pos"])
    d = np.arange(LT5)[::-1]  # the last query: distances LT5-1 .. 0
    assert np.array_equal(run.shadows[0].numpy(), exact_buckets(BucketScheme("t5", bidirectional=False), d))
    # its buckets come back in bf16 (0 + where(small, the bf16 distance, int64 bucket)): values, compared as such
    assert np.array_equal(run.outputs[0].double().numpy(), path_buckets(BucketScheme("t5", bidirectional=False), d,
                                                                        "cast-distance", "bfloat16"))


def test_t5_port_in_bf16_flips_what_lowp_eager_flips():
    """A port of T5's formula without .float(), run on bf16 distances (bidirectional: 8 log buckets from 8 up to
    128): the traced output's flipped distances are the lowp-eager path's, the final error its largest bucket
    shift, and the culprits the distance cast and the bf16 log (each alone in float64 removes every flip)."""
    bidirectional = True
    s = BucketScheme("t5", bidirectional=bidirectional)
    rel = _distances(torch.bfloat16)

    def buckets(pos):
        return t5_bucket_port(rel(pos), bidirectional)

    r = trace(buckets, inputs={"pos": torch.arange(LT5)}, positions=["pos"])
    (row,) = audit_relative(s, "lowp-eager", LT5, "bfloat16")
    assert row.flipped > 0 and r.final_error == row.max_shift == 1
    named = {o.op for o in r.culprits}
    assert named == {"aten._to_copy.default", "aten.log.default"}
    run = run_traced(buckets, (), {"pos": torch.arange(LT5)}, seeds=["pos"])
    d = np.arange(LT5)[::-1]
    exact = exact_buckets(s, d)
    assert np.array_equal(run.shadows[0].numpy(), exact)
    flipped = np.flatnonzero(run.outputs[0].numpy() != exact)
    want = np.flatnonzero(path_buckets(s, d, "lowp-eager", "bfloat16") != exact)
    assert np.array_equal(flipped, want) and flipped.size == row.flipped
    assert [(o["dtype"], o["changed"], o["values"]) for o in r.outputs] == [("int64", row.flipped, LT5)]


# --------------------------------------------------------------------------- Bloom's ALiBi


def test_bloom_build_alibi_tensor_in_bf16():
    """Bloom's build_alibi_tensor (positions: the cumsum of the attention mask, int64; slopes float32, their
    exponents an arange the trace follows too; the bias cast to bf16 at the end): positions stay exact, no op
    before the output cast loses anything, its 0.5 slope base is no downcast, and the final error is one bf16
    rounding of each product slope * position (ml_dtypes)."""
    build = pytest.importorskip("transformers.models.bloom.modeling_bloom").build_alibi_tensor
    mask = torch.ones(1, L, dtype=torch.int64)

    def alibi(attention_mask):
        return build(attention_mask, 8, torch.bfloat16)

    r = trace(alibi, inputs={"attention_mask": mask})
    assert all(o.first_inexact is None for o in r.ops) and r.culprits == [] and r.downcast == []
    # ALiBi's rule on the bias rows (the ALiBi auditor's verdict for this path, cast-output): neighbouring keys
    # share a bias; how many: the closed form below, each product rounded once to bf16 by ml_dtypes
    s = 2.0 ** -np.arange(1, 9)
    stored = (s[:, None] * np.arange(L)).astype(ml_dtypes.bfloat16).astype(np.float64)
    shared = int((stored[:, 1:] == stored[:, :-1]).sum())
    assert r.output_verdict == alibi_verdict(audit_alibi(8, "cast-output", L, "bfloat16")[0]) == "broken"
    assert r.lines == ("no op before the output loses a significant share of the final error 4 (the final rounding "
                       "to bfloat16); the output is broken by that rounding itself: keep it wider",
                       f"output 0 (bfloat16, 8x1x{L}; values: broken, {shared} neighbours share a value): 0 of "
                       f"{8 * L} values differ from its float64 shadow rounded to bfloat16 (max error 4, 1 half-ulps)")
    # closed form: 8 heads have slopes 2**-1 .. 2**-8 (exact in float32, so is each product with a position
    # below 2**24); the error is the bf16 rounding alone, largest for 0.5 * k on [1024, 2048): half of 8
    s = 2.0 ** -np.arange(1, 9)
    exact = s[:, None] * np.arange(L)
    stored = exact.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)
    assert r.final_error == float(np.abs(stored - exact).max()) == 4.0


# --------------------------------------------------------------------------- sinusoids


@pytest.mark.parametrize("fmt, ulp", [("bfloat16", 2.0**-8), ("float16", 2.0**-11)])
def test_sinusoid_with_positions_in_the_dtype(fmt, ulp):
    """The classic encoding with its positions held in the dtype (the sinusoidal auditor's lowp-positions):
    the trace names the position cast (first inexact position: the format's first inexact integer) as the loss;
    its rows repeat exactly as the auditor counts; its final error is the auditor's max |error| up to one ulp
    of the dtype at 1 (a float32 sin/cos or frequency a last bit apart may round the stored value the other
    way)."""
    dtype = getattr(torch, fmt)

    def table(pos):
        return sinusoid_port(pos, 64, dtype, dtype)

    r = trace(table, inputs={"pos": torch.arange(L)}, positions=["pos"])
    (row,) = audit_sinusoidal(64, "lowp-positions", L, fmt)
    first = get_format(fmt).max_exact_integer + 1
    (top,) = r.culprits
    assert top.op == "aten._to_copy.default" and top.out_dtype == fmt and top.first_inexact == first
    assert abs(r.final_error - row.max_abs_error) <= ulp
    out = run_traced(table, (), {"pos": torch.arange(L)}, seeds=["pos"]).outputs[0]
    assert torch.unique(out, dim=0).shape[0] == row.distinct_rows < L


def test_sinusoid_fixed_names_nothing_but_the_output_cast():
    """The fix (positions and table in float32, the table cast once to bf16: the fp32 recipe): no culprit, and a
    final error of at most half a bf16 ulp of 1 plus float32's error in the angle (L * 2**-24) and sin/cos."""

    def table(pos):
        return sinusoid_port(pos, 64, torch.float32, torch.bfloat16)

    r = trace(table, inputs={"pos": torch.arange(L)}, positions=["pos"])
    assert r.culprits == [] and r.lines[0].startswith("no op before the output")
    assert r.final_error <= 2.0**-9 + L * 2.0**-23
