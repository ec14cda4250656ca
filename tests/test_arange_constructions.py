"""Which construction of position ids the figures describe (issue 53 item 6).

``torch.arange(L, dtype=bfloat16)`` on CUDA equals one rounding to nearest of each integer (recorded on an H200:
``tests/data/h200/bf16_arange.json``), the construction ``positions`` and ``reproduce baichuan`` measure by
default; torch's CPU kernel is not one rounding above the exact range.  Referees: the record (CUDA), torch's own
CPU arange run in the test (the other construction) with metrics counted here by brute force, and closed forms.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from precision_audit.cli import main
from precision_audit.formats import round_to
from precision_audit.positions import CONSTRUCTIONS, construction, cpu_arange_rows, measure_positions

RECORD = json.loads((Path(__file__).parent / "data" / "h200" / "bf16_arange.json").read_text())["results"]


def _counts(values: np.ndarray) -> dict[str, int]:
    """exact, distinct finite values, non-finite, longest run of one value (the record's fields), brute force."""
    idx = np.arange(values.size)
    fin = np.isfinite(values)
    best = cur = 1
    for a, b in zip(values[:-1], values[1:]):
        cur = cur + 1 if a == b or (not np.isfinite(a) and not np.isfinite(b)) else 1
        best = max(best, cur)
    return {"exact": int((values == idx).sum()), "distinct": int(np.unique(values[fin]).size),
            "nonfinite": int((~fin).sum()), "longest_run": best}


@pytest.mark.parametrize("dtype, length", [("bfloat16", 8192), ("bfloat16", 65536), ("float16", 8192),
                                           ("float16", 65536)])
def test_cuda_arange_is_one_rounding(dtype: str, length: int) -> None:
    cuda = RECORD[f"cuda arange(L, dtype={dtype}) L={length}"]
    cast = RECORD[f"cuda arange(L).to({dtype}) L={length}"]
    with np.errstate(over="ignore"):
        ours = round_to(np.arange(length), dtype)
    want = {k: cuda[k] for k in ("exact", "distinct", "nonfinite", "longest_run")}
    assert _counts(ours) == want == {k: cast[k] for k in want}
    assert {int(k): float(ours[int(k)]) for k in cuda["at"]} == {int(k): v for k, v in cuda["at"].items()}
    m = measure_positions(length, dtype)[0]  # the tool's default (numpy) figures are this construction
    assert (m.exact_count, m.distinct_values - (m.non_finite > 0), m.non_finite, m.max_run) == tuple(want.values())


def test_baichuan_headline_is_the_one_rounding_construction() -> None:
    cuda = RECORD["cuda arange(L, dtype=bfloat16) L=8192"]
    assert (cuda["exact"], cuda["longest_run"]) == (896, 33)
    res = CliRunner().invoke(main, ["reproduce", "baichuan"])
    assert res.exit_code == 0 and "896 of 8192" in res.output and "up to 33 neighbouring" in res.output
    assert f"These figures: {CONSTRUCTIONS['numpy']}." in res.output and "The other construction" in res.output
    doc = json.loads(CliRunner().invoke(main, ["reproduce", "baichuan", "--json"]).output)
    assert doc["construction"] == CONSTRUCTIONS["numpy"]
    assert {(r["dtype"], r["length"]) for r in doc["other_construction"]["results"]} == {
        ("bfloat16", 8192), ("bfloat16", 65536), ("float16", 8192), ("float16", 65536)}


def test_cpu_arange_rows_are_torchs_own_arange() -> None:
    torch = pytest.importorskip("torch")
    rows = {(r.dtype, r.length): r for r in cpu_arange_rows([8192, 65536], ["bf16", "fp16"])}
    for (dtype, n), r in rows.items():
        t = torch.arange(n, dtype=getattr(torch, dtype)).double().numpy()  # the referee: torch run here
        c = _counts(t)
        assert (r.exact_count, r.distinct_values - (r.non_finite > 0), r.non_finite, r.max_run) == (
            c["exact"], c["distinct"], c["nonfinite"], c["longest_run"]), (dtype, n)
        # what holds on any CPU: the integers the format holds come out as themselves (the counts agree with
        # one rounding); only the runs can differ
        one = measure_positions(n, dtype)[0]
        assert r.exact_count == one.exact_count and r.max_run >= one.max_run


def test_positions_cli_says_which_construction() -> None:
    res = CliRunner().invoke(main, ["positions", "-l", "8k", "-d", "bf16"])
    assert res.exit_code == 0
    assert f"Figures: {CONSTRUCTIONS['numpy']}." in res.output
    assert f"The other construction, {CONSTRUCTIONS['torch-arange']}:" in res.output
    res = CliRunner().invoke(main, ["positions", "-l", "8k", "-d", "bf16", "--engine", "torch-arange", "--json"])
    doc = json.loads(res.output)
    assert doc["construction"] == CONSTRUCTIONS["torch-arange"]
    other = doc["other_construction"]
    assert other["construction"] == CONSTRUCTIONS["numpy"] and other["results"][0]["max_run"] == 33
    assert "tf32-rz" in construction("numpy", ["tf32-rz"])
    with pytest.raises(ValueError, match="engine"):
        construction("cuda")
