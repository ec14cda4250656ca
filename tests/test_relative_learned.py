"""Tests for learned absolute position ids (GPT-2, BERT, OPT).

Referees: transformers' ``OPTLearnedPositionalEmbedding`` run on masks in each dtype (its
embedding table set to row i = i, so the output names the row each token read), and a
scalar ml_dtypes loop for the in-dtype scan.  Counts are checked by brute force.
"""

from __future__ import annotations

from collections import Counter

import ml_dtypes
import numpy as np
import pytest

from precision_audit.relative import LEARNED_PATHS, LearnedRow, audit_learned, position_ids

from _thirdparty import private

torch = pytest.importorskip("torch")
TORCH = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
ML = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float8_e4m3fn": ml_dtypes.float8_e4m3fn}


def _opt_rows(mask: "torch.Tensor", n: int) -> np.ndarray:
    OPT = private("transformers.models.opt.modeling_opt", "OPTLearnedPositionalEmbedding")
    m = OPT(n + 1024, 1)  # ids rounded up (bf16 spacing 512 above 65536) stay inside the table
    with torch.no_grad():
        m.weight[:, 0] = torch.arange(m.weight.shape[0], dtype=torch.float32)  # exact: row i holds i
        return m(mask)[0, :, 0].double().numpy()


@pytest.mark.parametrize("dtype,n", [("bfloat16", 70000), ("float16", 65000), ("float32", 70000), ("int64", 70000)])
def test_opt_module_reads_the_rows_the_model_predicts(dtype, n):
    pads = 5  # left padding: pads read row 1 (id -1 + offset 2)
    tdt = torch.int64 if dtype == "int64" else TORCH[dtype]
    mask = torch.ones(1, pads + n, dtype=tdt)
    mask[0, :pads] = 0
    rows = _opt_rows(mask, n)
    assert np.all(rows[:pads] == 1)
    want = position_ids(n, "mask-int64" if dtype == "int64" else "mask-cumsum", "float32" if dtype == "int64"
                        else dtype)
    assert np.array_equal(rows[pads:], want)


@pytest.mark.parametrize("fmt", ["bfloat16", "float16", "float8_e4m3fn"])
def test_scan_matches_a_scalar_loop(fmt):
    t = ML[fmt]
    s, sums = t(0), []
    for _ in range(3000):
        s = t(float(s) + 1.0)  # the partial sum rounded to the format at every step
        sums.append(float(s))
    ids = [float(t(float(v) - 1.0)) + 2 for v in sums]
    assert position_ids(3000, "mask-scan", fmt).tolist() == ids


@pytest.mark.parametrize("fmt", ["bfloat16", "float16"])
def test_rows_count_by_brute_force(fmt):
    for r in audit_learned(LEARNED_PATHS, [100, 300, 3000, 9000], fmt):
        ids = position_ids(r.length, r.path, fmt)
        exact = np.arange(r.length) + (0 if r.path == "arange" else 2)
        c = Counter(ids.tolist())
        wrong = [i for i in range(r.length) if ids[i] != exact[i]]
        assert r.wrong == len(wrong)
        assert r.first_wrong == (wrong[0] if wrong else None)
        assert r.distinct_ids == len(c)
        assert r.collided == sum(v for v in c.values() if v > 1)
        assert r.max_error == int(np.max(np.abs(ids - exact)))
        assert r.verdict == ("broken" if r.collided else "degraded" if wrong else "safe")


def test_verdicts_and_thresholds():
    rows = {(r.dtype, r.length, r.path): r
            for r in audit_learned(LEARNED_PATHS, [256, 257, 2048, 2049, 2**20], ["bfloat16", "float16"])}
    for key, r in rows.items():
        if key[2] in ("arange", "mask-int64"):
            assert r.verdict == "safe" and r.wrong == 0  # an int64 index: exact in every model dtype
    # bf16: counts are exact to 256, and (count - 1) too: the first wrong token is the 258th (count 258 - 1 = 257)
    assert rows["bfloat16", 256, "mask-cumsum"].verdict == "safe"
    assert rows["bfloat16", 257, "mask-cumsum"].verdict == "broken"  # count 257 -> 256: tokens 255 and 256 share
    assert rows["float16", 2048, "mask-cumsum"].verdict == "safe"
    assert rows["float16", 2049, "mask-scan"].first_wrong == 2048
    # the scan sticks at 2**p: 256 distinct ids in bf16 at any length
    assert rows["bfloat16", 2**20, "mask-scan"].distinct_ids == 256


def test_bad_input():
    with pytest.raises(ValueError, match="unknown path 'cumsum'"):
        audit_learned("cumsum", 512, "bf16")
    with pytest.raises(ValueError, match="unknown dtype"):
        audit_learned(LEARNED_PATHS, 512, "bf17")
    with pytest.raises(ValueError, match="length 0"):
        audit_learned(LEARNED_PATHS, 0, "bf16")
    with pytest.raises(ValueError, match="verdict"):
        LearnedRow("arange", "bfloat16", 4, 0, None, 4, 0, 0, "fine")
    assert set(LEARNED_PATHS) == {r.path for r in audit_learned(LEARNED_PATHS, 8, "bf16")}
