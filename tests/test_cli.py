"""CLI: the positions and reproduce commands, exit codes, JSON, errors.

Expected numbers are the hand-derived ones of tests/test_positions.py
(bf16 at 8192: 896 exact = 256 + 5 * 128; IEEE fp16 overflows at 65520).
"""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from precision_audit.cli import main

ROW_KEYS = {
    "dtype", "length", "exact_count", "exact_fraction", "distinct_values", "max_run",
    "collision_fraction", "max_abs_error", "first_inexact", "non_finite", "overflow_position", "method",
}


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_positions_json_headline():
    res = run("positions", "--length", "8192", "--dtype", "bfloat16", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["auditor"] == "positions"
    (row,) = doc["results"]
    assert set(row) == ROW_KEYS
    assert (row["dtype"], row["length"], row["exact_fraction"], row["distinct_values"], row["first_inexact"]) == (
        "bfloat16", 8192, 0.109375, 897, 257)


def test_positions_float16_overflow_json():
    res = run("positions", "-l", "64k", "-d", "half", "--json")
    (row,) = json.loads(res.output)["results"]
    assert (row["dtype"], row["length"], row["non_finite"], row["overflow_position"]) == ("float16", 65536, 16, 65520)


def test_positions_repeats_and_suffixes():
    res = run("positions", "-l", "8k", "-l", "32K", "-l", "1M", "-d", "bf16", "-d", "e4m3", "--json")
    rows = json.loads(res.output)["results"]
    assert [(r["dtype"], r["length"]) for r in rows] == [
        (d, n) for d in ("bfloat16", "float8_e4m3fn") for n in (8192, 32768, 2**20)
    ]


def test_positions_closed_form_for_huge_length():
    res = run("positions", "-l", str(2**40), "--json")
    (row,) = json.loads(res.output)["results"]
    # 256 integers below 2**8, 128 per binade 2**8..2**39, and 2**40 itself
    assert row["method"] == "closed-form" and row["distinct_values"] == 256 + 32 * 128 + 1


def test_positions_table_defaults():
    res = run("positions")
    assert res.exit_code == 0
    assert "bfloat16" in res.output and "8192" in res.output and "10.94%" in res.output


def test_reproduce_baichuan_table_and_sentence():
    res = run("reproduce", "baichuan")
    assert res.exit_code == 0, res.output
    assert "10.9 %" in res.output and "about 10 %" in res.output
    assert "896 of 8192" in res.output
    for n in (1024, 131072):
        assert str(n) in res.output


def test_reproduce_baichuan_json():
    doc = json.loads(run("reproduce", "baichuan", "--json").output)
    assert doc["auditor"] == "positions"
    rows = {(r["dtype"], r["length"]): r for r in doc["results"]}
    assert {d for d, _ in rows} == {"bfloat16", "float16", "float32"}
    assert sorted({n for _, n in rows}) == [2**k for k in range(10, 18)]
    assert rows["bfloat16", 8192]["exact_fraction"] == 0.109375
    assert all(rows["float32", n]["exact_fraction"] == 1.0 for n in (1024, 131072))
    assert set(rows["float16", 65536]) == ROW_KEYS
    # on a model (issue 28): the shipped probe at the end of an 8192 context.  Bounds from the measured table
    # (tests/test_effect.py): bfloat16 positions collide above 256 (runs of 33 at 8K: local order is lost, the
    # probe falls to about a third, far from its exact 100 %); the float32 fix keeps every position exact, so the
    # probe scores what exact RoPE scores
    probe = {(r["task"], r["path"]): r for r in doc["probe"]}
    assert set(probe) == {(t, p) for t in ("local", "gap") for p in ("lowp", "fp32")}
    assert all(r["exact_accuracy"] >= 0.99 and r["offset"] + 1 <= 8192 for r in doc["probe"])
    assert probe["local", "lowp"]["accuracy"] < 0.5 and probe["gap", "lowp"]["accuracy"] < 0.2
    assert probe["local", "fp32"]["accuracy"] == probe["local", "fp32"]["exact_accuracy"]
    assert probe["gap", "fp32"]["accuracy"] == probe["gap", "fp32"]["exact_accuracy"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--length", "0"], "length 0 must be at least 1"),
        (["--length", "-5"], "length -5 must be at least 1"),  # as 0 says it (issue 41)
        (["--length", "0"], "length 0 must be at least 1"),
        (["--length", "1.5k"], "not a whole number"),
        (["--length", "abc"], "'abc' is not a whole number"),
        (["--length", str(2**53 + 1)], "exceeds 2**53"),
        (["--dtype", "bf17"], "unknown dtype 'bf17'; valid names: float64, float32, float16, bfloat16"),
        (["--method", "fast"], "'fast' is not one of"),
        (["--engine", "torch", "--dtype", "fp4"], "torch has no dtype for float4_e2m1fn"),
    ],
)
def test_bad_input_exits_2(args, message):
    res = run("positions", *args)
    assert res.exit_code == 2
    assert message in res.output
    assert "Traceback" not in res.output


def test_help_and_version():
    res = run("--help")
    assert res.exit_code == 0 and "positions" in res.output and "reproduce" in res.output
    assert run("positions", "--help").output.count("--length") >= 1
    version = run("--version")
    assert version.exit_code == 0
    assert re.fullmatch(r"precision-audit, version \d+\.\d+\.\d+\S*\n", version.output), version.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # Work limits: each command refuses sizes it cannot finish in minutes.
        (["positions", "-l", "1024G", "--method", "empirical"], "exceeds 2**32"),
        (["rope", "-l", "1024G"], "exceeds the RoPE oracle's limit 2**26"),
        (["alibi", "-l", "1024G"], "exceeds 2**26"),
        (["sinusoidal", "-l", "1024G"], "exceeds 2**24"),
        (["alibi", "--heads", "100000000"], "1<=x<=4096"),
        (["sinusoidal", "--dim", "100000000"], "2<=x<=65536"),
        (["sinusoidal", "--max-lag", "100000000"], "0<=x<=4096"),
        (["rope", "--head-dim", "100000000"], "2<=x<=8192"),
    ],
)
def test_oversized_work_exits_2(args, message):
    res = run(*args)
    assert res.exit_code == 2, res.output
    assert message in res.output
    assert "Traceback" not in res.output
