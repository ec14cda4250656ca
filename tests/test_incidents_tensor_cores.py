"""The TF32 GEMM incidents (issue 53): transformers#48428 and batch_invariant_ops#23, recomputed.

Referees: closed forms (11 significant bits: integers exact to 2**11, 2**10 per binade above) and the
recorded H200 outputs (``tests/data/h200/``) that the entries quote beside each report's claim.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from precision_audit.cli import main
from precision_audit.incidents import CATALOG, reproduce
from precision_audit.incidents.tensor_cores import H200

DATA = Path(__file__).parent / "data" / "h200"


def test_transformers_48428() -> None:
    r = reproduce("transformers-48428")
    assert r.verdict == "reproduced" and r.url == "https://github.com/huggingface/transformers/issues/48428"
    m = r.measured
    assert (m["tf32_exact_integers_to"], m["tf32_value_of_2049"]) == (2048, 2048.0)
    assert (m["tf32_value_of_2051"], m["tf32_rz_value_of_2051"]) == (2052.0, 2050.0)  # nearest vs truncation
    # closed form: 2048 + 1024 * 4 exact integers below 2**15; the rest share their rounded value
    assert m["tf32_exact_positions_32768"] == 2048 + 4 * 1024
    assert m["tf32_gemm_colliding_2048"] == 0 and m["tf32_gemm_colliding_4096"] == 4096 - 3073
    assert m["tf32_gemm_colliding_32768"] == 32768 - 6145
    assert m["tf32_gemm_max_pair_error_d1_32768"] > 1.0 > 0.01 > m["fp32_max_pair_error_d1_32768"]
    assert "48450" in r.fix


def test_batch_invariant_ops_23() -> None:
    r = reproduce("batch-invariant-ops-23")
    assert r.verdict == "reproduced"
    m = r.measured
    # closed form: of 0..8191, 2048 + 1024 + 1024 integers have <= 11 significant bits
    assert m["differing_of_8192"] == m["differing_of_8192_to_nearest"] == 8192 - (2048 + 2 * 1024)
    assert (m["value_of_2049"], m["value_of_4099"], m["max_position_error_8192"]) == (2048.0, 4096.0, 3.0)
    assert "input_precision='ieee'" in r.fix


def test_the_h200_facts_quoted_are_the_records() -> None:
    rec = json.loads((DATA / "tf32_record_h200.json").read_text())
    modes = json.loads((DATA / "tf32_modes.json").read_text())["results"]
    assert H200["positions_131072_cublas_high_k16"] == rec["cublas_high_k16"]
    assert H200["positions_131072_tl_dot_default"] == rec["triton_dot_default"]
    auto1 = next(c for c in rec["compiled_high"] if c["mode"] == "max-autotune" and c["batch"] == 1)
    assert H200["torch_compile_max_autotune_batch_1"] == {"exact": auto1["exact"], "max_err": auto1["max_err"]}
    assert all(modes[f"transformers shape high b={b}"]["exact"] == 131072 for b in (1, 2, 4, 16))
    assert modes["cublas high K=2"]["probe"]["2051"] == 2052.0 and modes["cublas bmm b=2 high K=2"]["exact"] == 131072
    assert modes["cublas bmm b=2 high K=4"]["exact"] == 8192
    assert modes["triton tl.dot default"]["probe"]["2051"] == 2050.0
    assert modes["triton tl.dot ieee"]["exact"] == modes["triton tl.dot tf32x3"]["exact"] == 131072
    for name in ("transformers-48428", "batch-invariant-ops-23"):
        assert CATALOG[name].settings["h200"] is H200


def test_reproduce_cli() -> None:
    res = CliRunner().invoke(main, ["reproduce", "batch-invariant-ops-23", "--json"])
    assert res.exit_code == 0
    assert json.loads(res.output)["results"][0]["verdict"] == "reproduced"
