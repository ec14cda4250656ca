"""The one verdict rule (precision_audit.verdicts) and its calibration on the shipped probe (issue 28, item 4).

The calibration's figures come from two independent measurements: the pairwise rotation errors of the RoPE audit
(checked against a brute-force float64 computation in tests/test_pairwise.py) and the probe model's accuracy (its
float64 forward pass, checked against its own exact-arithmetic run in tests/test_effect.py).  Consistency means: no
distance called broken where the probe loses nothing, none called safe where it loses measurably.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from precision_audit.cli import main
from precision_audit.config import audit_config, load_config
from precision_audit.effect.calibration import LOSS, NO_LOSS, calibrate, inconsistent
from precision_audit.rope import PairError
from precision_audit.bottomline import bottom_line
from precision_audit.checks import ArgumentTypeError
from precision_audit.verdicts import NOTICED, PHASE_LOST, rope_verdict, rope_why, sinusoid_verdict, worst

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("pairs, colliding, want", [
    ([(1, 0.0054), (4096, 0.0059)], 0, "safe"),  # float32 angles at 32K (the table)
    ([(1, 0.0054), (256, 0.32)], 0, "safe"),  # a downcast inv_freq, 256 apart: below pi/8
    ([(1, 0.0054), (4096, 2.6)], 0, "broken"),  # ... 4K apart: phase lost
    ([(1, NOTICED)], 0, "degraded"),  # the thresholds themselves
    ([(1, math.nextafter(NOTICED, 0))], 0, "safe"),
    ([(1, PHASE_LOST)], 0, "broken"),
    ([(1, 0.0)], 1, "broken"),  # a collision always breaks local order
    ([(1, float("nan"))], 0, "broken"),  # a non-finite rotation: the phase is lost
])
def test_rope_rule(pairs, colliding, want) -> None:
    assert rope_verdict(3.0, colliding, pair_errors=pairs) == want  # the absolute error is never judged
    assert rope_verdict(3.0, colliding, pair_errors=[PairError(d, float(e), 0.0) for d, e in pairs
                                                     if math.isfinite(e)] or pairs) == want


def test_without_pairs_the_triangle_bound_stands_in() -> None:
    """A pair's error is at most the sum of its two positions' absolute errors: 2 x the max."""
    assert rope_verdict(NOTICED / 2, 0) == "degraded" and rope_verdict(math.nextafter(NOTICED / 2, 0), 0) == "safe"
    assert rope_verdict(PHASE_LOST / 2, 0) == "broken"


def test_why_names_the_shortest_distance_of_the_worst_kind() -> None:
    assert rope_why(3.1, 0, [(1, 0.005), (256, 0.5), (1024, 1.2), (4096, 2.6)]) == \
        "positions 4K apart: phase lost (2.6 rad)"
    assert rope_why(3.1, 0, [(1, 0.005), (256, 0.5), (1024, 1.2)]) == "positions 256 apart off by up to 0.5 rad"
    assert rope_why(0.9, 0, [(1, 1.0)]) == "neighbouring positions off by up to 1 rad"
    assert rope_why(0.01, 0, [(1, 0.02)]) is None


def test_why_at_the_thresholds_and_its_inputs() -> None:
    # the thresholds belong to the worse kind, as in rope_verdict
    assert rope_why(3.0, 0, [(16, PHASE_LOST)]) == f"positions 16 apart: phase lost ({PHASE_LOST:.3g} rad)"
    assert rope_why(3.0, 0, [(16, NOTICED)]) == f"positions 16 apart off by up to {NOTICED:.3g} rad"
    assert rope_why(3.0, 0, [(16, math.nextafter(NOTICED, 0))]) is None
    # one colliding position already loses local order
    assert rope_why(0.0, 1) == "local order lost: 1 positions share the previous one's rotation"
    # the shortest distance wins whatever the order, and at one distance its largest error
    assert rope_why(3.0, 0, [(4096, 2.6), (256, 2.0), (1024, 3.0)]) == "positions 256 apart: phase lost (2 rad)"
    assert rope_why(3.0, 0, [(256, 1.8), (256, 2.0)]) == "positions 256 apart: phase lost (2 rad)"
    # without pairs: the triangle bound, 2 x the absolute error, at no particular distance
    assert rope_why(0.3, 0) == "positions off by up to 0.6 rad"
    # pair errors as --json writes them (mappings), as PairError records and as tuples read alike
    as_json = [{"distance": 1, "max_rotation_error": 0.005, "mean_rotation_error": 0.001},
               {"distance": 4096, "max_rotation_error": 2.6, "mean_rotation_error": 1.0}]
    assert rope_why(0.0, 0, as_json) == rope_why(0.0, 0, [(1, 0.005), (4096, 2.6)]) == \
        rope_why(0.0, 0, [PairError(1, 0.005, 0.001), PairError(4096, 2.6, 1.0)])
    assert rope_verdict(0.0, 0, pair_errors=as_json) == "broken"
    assert rope_verdict(0.0, 0, pair_errors=as_json[:1]) == "safe"


def test_worst_and_the_sinusoid_rule() -> None:
    assert worst([]) == "safe" and worst(["degraded", "safe"]) == "degraded"
    with pytest.raises(ValueError, match="verdict 'fine' must be one of safe, degraded, broken"):
        worst(["fine"])
    # a relative sinusoid table: broken when distances share a row, degraded past half-way to the neighbour
    assert sinusoid_verdict(0, 0.5) == "safe" and sinusoid_verdict(0, math.nextafter(0.5, 1)) == "degraded"
    assert sinusoid_verdict(1, 0.0) == "broken"


def _rows(path: str, *verdicts: tuple[int, str, str | None]) -> list[dict]:
    return [dict(path=path, dtype="bfloat16", length=L, verdict=v, **({"why": w} if w else {}))
            for L, v, w in verdicts]


def test_bottom_line_fields() -> None:
    rows = _rows("vllm", (1024, "safe", None), (4096, "degraded", "neighbouring positions off by up to 0.5 rad"),
                 (8192, "broken", "positions 4K apart: phase lost (2.6 rad)"))
    (s,) = bottom_line(rows)
    assert (s.safe_to, s.degraded_from, s.broken_from, s.verdict) == (1024, 4096, 8192, "broken")
    assert s.degraded_why == "neighbouring positions off by up to 0.5 rad"  # the why of mapping rows
    assert s.broken_why == "positions 4K apart: phase lost (2.6 rad)"
    assert s.roles == ("serve",) and s.note is None
    # a note replaces the path's fix and is said
    (n,) = bottom_line(rows, notes={"vllm": ("runs another schedule", "serve it elsewhere")})
    assert (n.note, n.fix) == ("runs another schedule", "serve it elsewhere")
    assert str(n).endswith("; runs another schedule -> serve it elsewhere")
    # roles belong to RoPE stacks only: an ALiBi path of the same name has none
    assert bottom_line(rows, kind="alibi")[0].roles == ()
    # a safe path has no why, even when some row of another verdict had one
    (ok,) = bottom_line(_rows("fp32", (1024, "safe", None)))
    assert (ok.degraded_why, ok.broken_why, ok.degraded_from, ok.broken_from) == (None, None, None, None)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(rows=[], key=3), ArgumentTypeError, "key 3 must be a row field name (a string)"),
    (dict(rows=[], key=""), ValueError, "key '' must be a row field name (empty)"),
    (dict(rows=[], kind="xpos"), ValueError, "kind 'xpos' must be one of rope, alibi, relative, learned"),
    (dict(rows=[], notes=[1]), ArgumentTypeError, "notes [1] must be a mapping of path to (note, fix) or None"),
    (dict(rows="vllm"), ArgumentTypeError, "rows 'vllm' must be an iterable of rows"),
    (dict(rows=[{"path": "x"}]), ValueError, "rows: row {'path': 'x'} has no dtype, length, verdict"),
])
def test_bottom_line_refuses_bad_arguments(kwargs, error, message) -> None:
    with pytest.raises(error) as e:
        bottom_line(**kwargs)
    assert str(e.value) == message


def test_calibration_is_consistent() -> None:
    """Every preset at 1K and 8K, at the distances the probe reads up to 4K: no inconsistent row, and the
    thresholds sit where the probe's losses are (a downcast inv_freq loses nothing 256 and 512 apart, loses
    measurably 1K apart and more 4K apart; bfloat16 positions lose local order)."""
    rows = calibrate(lengths=[1024, 8192], distances=[1, 256, 512, 1024, 4096], sequences=64)
    assert inconsistent(rows) == []
    by = {(r.path, r.length, r.distance): r for r in rows}
    assert by["lowp-inv-freq", 8192, 256].drop <= NO_LOSS and by["lowp-inv-freq", 8192, 512].drop <= NO_LOSS
    assert by["lowp-inv-freq", 8192, 1024].drop >= LOSS and by["lowp-inv-freq", 8192, 4096].drop >= 0.2
    # the probe loses exact distances where only fast pairs are a quarter turn off: degraded (SmolLM2 keeps its
    # predictions there, tests/test_effect_real.py); collisions are broken on both
    assert by["lowp-inv-freq", 8192, 4096].verdict == "degraded" and by["lowp", 1024, 1].verdict == "broken"
    # closed form: a bfloat16 inv_freq is off by a relative 2**-8 at most, so a pair turning at most 4 times across
    # the distance is off by 2**-8 * 8 pi, plus what storing cos/sin costs anyway (the fp32 path's pair error)
    cast = by["lowp-inv-freq", 8192, 4096]
    assert cast.pair_max_error >= math.pi / 2
    assert cast.pair_resolved_error <= 2.0**-8 * 8 * math.pi + by["fp32", 8192, 4096].pair_max_error
    assert by["lowp", 1024, 1].drop >= 0.2 and by["lowp", 1024, 1].colliding > 0
    assert all(r.verdict == "safe" and r.drop <= NO_LOSS for r in rows if r.path in ("fp32", "fp64"))


@pytest.mark.slow
def test_calibration_is_consistent_to_4m() -> None:
    assert inconsistent(calibrate(lengths=[65536, 2**20, 2**22], sequences=128)) == []


def test_a_float32_model_is_not_degraded_by_its_absolute_angles() -> None:
    """The issue's misfire: Llama-2 in float32 was 'degraded from 4K' on every stack (its angle error thousands of
    times float32's cos/sin rounding); its pairwise errors are far below what the probe notices."""
    rows = audit_config(load_config(DATA / "llama-2-7b-hf.json"), None, ["float32"], stacks=["transformers", "vllm"],
                        positions=False)
    assert all(r.verdict == "safe" and r.ratio > 8 for r in rows if r.length > 4096)


def test_bottom_line_says_what_breaks() -> None:
    r = CliRunner().invoke(main, ["config", str(DATA / "llama-2-7b-hf.json"), "-l", "4K", "--stack",
                                  "transformers-cast", "--stack", "openvino", "--no-positions"])
    assert r.exit_code == 0, r.output
    cast = next(x for x in r.output.splitlines() if "transformers after" in x)
    assert "positions" in cast and "apart" in cast and "keep_rotary_fp32" in cast  # long range, local order kept
    ov = next(x for x in r.output.splitlines() if "OpenVINO GPU (f16" in x)
    assert "local order lost" in ov


def test_scan_verdict_and_damage_limit():
    # the scan's rule (hf-scan), closed form: limit = 2 R + (L - 1) u; an error equal to the limit is correct code
    # (the limit is the largest error correct code reaches); a nan error is damage, never "safe"
    from precision_audit.verdicts import SCAN_VERDICTS, damage_limit, scan_verdict

    assert damage_limit(0.25, 5, 2.0**-3) == 0.5 + 4 * 0.125  # exact in binary: 1.0
    lim = 1.0
    assert scan_verdict(lim, lim, lim) == "safe"
    assert scan_verdict(lim, math.nextafter(lim, 2), lim) == "damaged by the cast"
    assert scan_verdict(math.nextafter(lim, 2), 0.0, lim) == "damaged as built"
    assert scan_verdict(math.nan, 0.0, lim) == "damaged as built"
    assert scan_verdict(0.0, math.nan, lim) == "damaged by the cast"
    assert set(SCAN_VERDICTS) == {scan_verdict(a, b, lim) for a in (0.0, 2.0) for b in (0.0, 2.0)}


def test_rows_expose_the_rule_s_verdict():
    # every row type carries the one rule's verdict (the report, config and testing read it there)
    from precision_audit.alibi import audit_alibi
    from precision_audit.positions import audit_positions
    from precision_audit.rope import RopeSchedule, audit, preset
    from precision_audit.verdicts import rope_why

    # bfloat16 ids 0..4095: the representable values up to 4095 are 0..256 (257), 127 in (256, 512) and 128 in each
    # of the binades [512, 1024), [1024, 2048), [2048, 4096); 4095 rounds up to 4096: 769 distinct values, closed form
    (p,) = audit_positions(4096, "bfloat16")
    assert p.colliding_positions == 4096 - (257 + 127 + 3 * 128 + 1) == 3327
    assert p.verdict == "broken"
    (q,) = audit_positions(2048, "float16")  # every integer up to 2048 is a float16 value
    assert (q.colliding_positions, q.verdict) == (0, "safe")
    rows = audit(RopeSchedule(head_dim=32), [preset(n, "bfloat16") for n in ("lowp", "fp32")], 4096)
    for r in rows:
        assert r.verdict == rope_verdict(r.max_rotation_error, r.colliding_positions, pair_errors=r.pair_errors)
        assert r.lost == rope_why(r.max_rotation_error, r.colliding_positions, r.pair_errors)
    assert [r.verdict for r in rows] == ["broken", "safe"] and rows[1].lost is None
    assert "local order lost" in rows[0].lost
    assert [a.verdict for r in ("cast-output", "fp32") for a in audit_alibi(8, r, 4096, "bf16")] == ["broken", "safe"]
    assert "verdict" not in rows[0].to_dict() and "verdict" not in p.to_dict()  # --json rows stay as they were


# --------------------------------------------------------------------------- the one statement of the rules

def test_rules_state_the_thresholds_the_verdict_uses():
    from precision_audit.verdicts import NOTICED, PHASE_LOST, RULES, VERDICT_RULES, VERDICTS, rules_markdown, rules_text

    assert set(RULES) == set(VERDICTS)
    # the thresholds as written, derived here from pi: 22.5 and 90 degrees
    assert "pi/8" in RULES["degraded"] and math.isclose(NOTICED, math.radians(22.5))
    assert "pi/2" in RULES["broken"] and math.isclose(PHASE_LOST, math.radians(90))
    assert "8x" not in rules_text() + rules_markdown() + VERDICT_RULES  # the retired rule
    assert "above 3 half-ulps" in rules_text(3.0) and "above 8 half-ulps" in rules_markdown()
    assert rules_markdown().count("\n") == 2 + len(VERDICTS)
    # what the CLI prints is that text
    from precision_audit.cli.live import hf_rope_cmd
    from precision_audit.cli.models import CONFIG_VERDICT_HELP, config_cmd

    assert CONFIG_VERDICT_HELP == rules_text()
    for cmd in (config_cmd, hf_rope_cmd):
        assert rules_text() in cmd.help
