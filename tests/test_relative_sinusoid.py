"""Tests for Transformer-XL / XLNet relative sinusoids.

Referees: transformers' ``XLNetModel.relative_positional_encoding`` on a tiny config (the
distances it encodes and its float32 table, within a derived bound of the float64 encoding;
its table cast to bf16 against the ``fp32`` recipe), and a brute-force signed table built here
op by op with ml_dtypes casts (duplicates by ``np.unique``).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from precision_audit.relative import SINUSOID_PATHS, audit_relative_sinusoid, relative_distances
from precision_audit.sinusoidal import encoding_table, frequencies

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

ML = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float32": np.float32}


def _xlnet(attn_type: str, bi_data: bool, d_model: int = 64):
    cfg = transformers.XLNetConfig(vocab_size=11, d_model=d_model, n_layer=1, n_head=2, d_inner=32,
                                   attn_type=attn_type, bi_data=bi_data)
    return transformers.XLNetModel(cfg).eval()


def _exact(p: np.ndarray, d_model: int) -> np.ndarray:
    a = p[:, None].astype(np.float64) * frequencies(d_model)[None, :]
    return np.concatenate([np.sin(a), np.cos(a)], axis=1)  # XLNet's layout: sines, then cosines


@pytest.mark.parametrize("attn_type", ["bi", "uni"])
@pytest.mark.parametrize("bi_data", [False, True])
def test_xlnet_encodes_the_distances_we_audit(attn_type, bi_data):
    klen, qlen, d = 700, 300, 64
    with torch.no_grad():
        pe = _xlnet(attn_type, bi_data, d).relative_positional_encoding(qlen, klen, bsz=2 if bi_data else None)
    assert pe.dtype == torch.float32  # .float() on int64 positions: float32 whatever the model dtype
    table = pe[:, 0, :].double().numpy()  # bi_data: batch 0 holds the forward sequence, batch 1 the backward one
    p = relative_distances(klen, qlen, attn_type)
    assert table.shape == (len(p), d)
    w = frequencies(d)
    # float32: inv_freq within 4 ulps (pow, reciprocal), angle rounding, a faithful sin/cos: 8x margin on 2**-24
    bound = np.abs(p)[:, None] * np.r_[w, w][None, :] * 2.0**-21 + 2.0**-21
    assert np.all(np.abs(table - _exact(p, d)) <= bound)
    if bi_data:
        back = pe[:, 1, :].double().numpy()
        assert np.all(np.abs(back - _exact(-p, d)) <= bound)


def test_xlnet_table_cast_to_bf16_is_the_fp32_recipe():
    klen, d = 2000, 64
    with torch.no_grad():
        pe = _xlnet("uni", False, d).relative_positional_encoding(klen, klen)[:, 0, :]
    got = pe.to(torch.bfloat16).double().numpy()[::-1]  # distances 0..klen
    ours = encoding_table(klen + 1, d, "fp32", "bfloat16", layout="concat")
    diff = got != ours
    # XLNet's float32 values differ from the correctly rounded ones by the float32 bound above: the bf16 casts can
    # differ only where those values straddle a bf16 rounding boundary: by one bf16 ulp plus that bound
    assert diff.mean() < 0.01
    p = np.arange(klen + 1)
    w = frequencies(d)
    bound32 = p[:, None] * np.r_[w, w][None, :] * 2.0**-21 + 2.0**-21
    big = np.maximum(np.abs(ours), np.abs(got)).astype(ml_dtypes.bfloat16)
    ulp = np.spacing(big).astype(np.float64)
    assert np.all((np.abs(got - ours) <= ulp + bound32)[diff])


def _signed_table(p: np.ndarray, d: int, fmt: str, recipe: str) -> np.ndarray:
    """Rows for signed distances op by op with ml_dtypes casts (positions, frequencies, angle, sin/cos, table)."""
    t, f32 = ML[fmt], np.float32
    stage = {"lowp": (t, t, t, t), "lowp-positions": (t, f32, f32, f32), "fp32": (f32, f32, f32, f32)}[recipe]
    rnd = lambda x, s: np.asarray(x, dtype=np.float64).astype(s).astype(np.float64)  # noqa: E731
    u = rnd(p, stage[0])
    w = rnd(frequencies(d), stage[1])
    a = rnd(u[:, None] * w[None, :], stage[2])
    return np.concatenate([rnd(rnd(np.sin(a), stage[3]), t), rnd(rnd(np.cos(a), stage[3]), t)], axis=1)


@pytest.mark.parametrize("fmt", ["bfloat16", "float16"])
@pytest.mark.parametrize("attn_type", ["bi", "uni"])
def test_duplicates_match_a_brute_force_signed_table(fmt, attn_type):
    # float16 positions are exact to 2048: use klen 3000 there; d = 16 keeps the table small
    klen, qlen, d = (600, 400, 16) if fmt == "bfloat16" else (3000, 2500, 16)
    rows = audit_relative_sinusoid(d, tuple(SINUSOID_PATHS), klen, fmt, qlen=qlen, attn_type=attn_type)
    p = relative_distances(klen, qlen, attn_type)
    for r in rows:
        table = _signed_table(p, d, fmt, r.recipe)
        _, inverse, counts = np.unique(table, axis=0, return_inverse=True, return_counts=True)
        assert r.distances == len(p)
        assert r.cross_sign_clear  # 600 * 10000**(-14/16) = 0.19 rad < pi/2
        assert (r.distinct_rows, r.duplicate_rows) == (len(counts), int(np.count_nonzero(counts[inverse] > 1)))


def test_negative_rows_mirror_positive_rows():
    p = np.arange(1, 700)
    for recipe in ("lowp", "lowp-positions", "fp32"):
        pos, neg = _signed_table(p, 16, "bfloat16", recipe), _signed_table(-p, 16, "bfloat16", recipe)
        assert np.array_equal(neg[:, :8], -pos[:, :8]) and np.array_equal(neg[:, 8:], pos[:, 8:])


def test_cross_sign_proof_fails_where_it_must():
    # d_model 2: one frequency, w = 1: angles pass pi/2 at distance 2, so nothing is proven
    [r] = audit_relative_sinusoid(2, "transformers", 100, "bfloat16")
    assert not r.cross_sign_clear
    [u] = audit_relative_sinusoid(2, "transformers", 100, "bfloat16", attn_type="uni")
    assert u.cross_sign_clear  # no negative distances


def test_bad_input():
    with pytest.raises(ValueError, match="unknown path 'lowp'"):
        audit_relative_sinusoid(64, "lowp", 100)
    with pytest.raises(ValueError, match="qlen 200 must be at most 100"):
        audit_relative_sinusoid(64, tuple(SINUSOID_PATHS), 100, qlen=200)
    with pytest.raises(ValueError, match="unknown attn_type 'both'"):
        audit_relative_sinusoid(64, tuple(SINUSOID_PATHS), 100, attn_type="both")
