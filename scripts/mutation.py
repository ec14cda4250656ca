#!/usr/bin/env python3
"""Mutation testing of the decision rules and core numerics (issue 21), with mutmut.

Run from the repo root (the ``[mutmut]`` section of setup.cfg says which files
are mutated and which test files judge the mutants):

    python scripts/mutation.py              # every area: mutmut run, then the score table (about 2 h on 2 cores)
    python scripts/mutation.py verdicts     # some areas only (with --out: their rows replace those in the file)
    python scripts/mutation.py --report     # the table from the last run's results (mutants/), no run

mutmut copies the package to ``mutants/`` (git-ignored), wraps every function
of the mutated files in a trampoline and runs, for each mutant, the selected
tests that called the mutated function (``-x``: the first failure kills it).
A mutant *survives* when every such test passes.  A survivor that cannot
change any answer (an *equivalent* mutant) is listed in :data:`EQUIVALENT`
with the mutated line and why; any other survivor is a missing test.  The
score is ``(killed + timeout) / (mutants - equivalent)`` (a mutant that no
test reaches, or that a stopped run did not judge, counts against it); mutmut reports
a mutant that makes the tests run more than ~30x longer as a timeout.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

P = "precision_audit."
# area -> the functions mutated (mutmut's mutant names: x_<function> or xǁ<Class>ǁ<method>, then __mutmut_<n>)
AREAS: dict[str, tuple[str, ...]] = {
    "verdicts": tuple(f"{P}{m}*" for m in (
        "verdicts.x_rope_verdict_", "verdicts.x_rope_why_", "verdicts.x__judged_", "verdicts.x__pairs_",
        "verdicts.x_positions_verdict_", "verdicts.x_alibi_verdict_", "verdicts.x_sinusoid_verdict_",
        "verdicts.x_worst_", "verdicts.x_human_length_", "bottomline.x_bottom_line_", "bottomline.x_failing_",
        "bottomline.x__get_")),
    "damage_threshold": (f"{P}hf.scan.x_damage_threshold_*", f"{P}verdicts.x_damage_limit_*",
                         f"{P}verdicts.x_scan_verdict_*"),
    "round_to": tuple(f"{P}formats.x_{f}_*" for f in (
        "round_to", "_as_float64", "_is_ml_number", "_rational_to_float", "_objects_to_float64", "_ints_to_float64",
        "_round_into", "_round_rne", "_rne_params", "_bfloat16_via_float32", "_bfloat16_from_float32",
        "_overflow_inf", "_overflow_nan", "_overflow_saturate")),
    "positions tally": (f"{P}positions.xǁ_Tallyǁ*",),
    "rope oracle + wrap": (f"{P}rope.oracle.x_*",),
    "alibi metrics": (*(f"{P}alibi.stream.{m}*" for m in (
        "x__lse_merge_", "xǁ_AtLengthǁ", "xǁ_Totalsǁ", "x__runs_", "x__fold_", "x_count_pass_", "x__carry_",
        "x_prob_change_pass_", "x__rows_that_matter_")),
        *(f"{P}alibi.audit.{m}*" for m in ("x_stored_bias_metrics_", "x__audit_row_"))),
    "fix buffer matching": tuple(f"{P}fix.x_{f}_*" for f in (
        "buffer_kind", "_tensors", "_rotary_protocol", "_is_low_precision", "_guarded_apply", "_is_guarded", "_guard",
        "_release", "keep_rotary_fp32")),
}

# Survivors that cannot change an answer: mutant -> (the mutated line, as `mutmut show` prints it, and why).
_GUARD = ("the guard only skips wrap(r), the identity whenever |r / 2pi| <= 0.5 (up to the sign of a zero, and every "
          "use takes |.|): a guard that wraps more often changes no value")
_FAST_GUARD = ("the guard only picks a fast path for integers float64 holds exactly; sending more of them to the "
               "exact path changes no value")
_INT_POS = ("int64 positions compare and subtract as float64 exactly below 2**53, beyond every length the "
            "tally measures (2**32)")
_INT_IOTA = "d -= iota with int64 iota: float64 d minus exact small integers, the same values"
_MONOTONE = ("rounding is monotone (checked): a chunk with some finite values has no non-finite value before it, so "
             "first_non_finite is None and non_finite is 0 when this line runs")
_APPLY = "torch's Module._apply calls fn on tensors and fn returns a tensor: out always has a dtype, the default is unused"
_NEG = "numpy takes any negative size as the unknown one"
_F64 = "numpy's default dtype is float64"
_KIND = "a dtype kind is one character, and numpy has no kind X: the same test"
_SAME_KIND = "same_kind is np.copyto's default casting"
_SCRATCH = "fresh arrays instead of the caller's scratch buffers: the same values, more allocation"
_CACHE = "the parameters are recomputed on every call instead of cached: the same parameters"
_NAN_ONE = ("np.max and np.min are both nan when any element is nan (np.max(None) is None, equal to itself): one "
            "test suffices")
_NEG_ZERO = "-0.0 as float64 instead of float32: every format's cast keeps the same sign of zero (checked for each)"
_F32 = ("float32 then takes the one-addition path with float32's parameters: the same values as numpy's cast "
        "(checked on 5M values: random bit patterns, the overflow edge, subnormals, signed zeros, inf and nan)")
_BF16 = ("bfloat16 then takes the one-addition path: the same values (the float32 shortcut is for speed, tested on "
         "its own)")
_OVER_GUARD = ("the guard only skips the overflow pass when every value is within +-max_finite; the pass changes only "
               "elements above max_finite, so running it more often changes no value")
_PRUNE_LESS = ("pass 2 then skips fewer heads or chunks; a head it keeps gets the change computed exactly as without "
               "skipping (element by element, per head): the same maximum")
_TIE = ("at equality the chunk's largest probability is the head's maximum so far times e**-1e-6: it cannot raise "
        "the maximum, so skipping it changes nothing")
_ORDER = ("the order of the chunks in pass 2 only decides how much can be skipped (the rule is sound in any order): "
          "the maximum is the same")
_INT_K = ("an int64 arange of key indices (below 2**53): the float64 product with the slopes and every recipe's cast "
          "of k give the same values")
_NONE_FALSE = "None stored into a bool array is False"
_WIDTH = ("the chunk width only moves the cuts between blocks of keys: the counts and maxima are the same, and the "
          "log-sum-exps are summed in other blocks (last-bit differences; the metrics equal the mpmath oracle to "
          "1e-12 at chunk widths 1 to 1000, tests/test_mutation_kills_alibi.py)")
EQUIVALENT: dict[str, tuple[str, str]] = {
    **{f"{P}rope.oracle.x__oracle_into__mutmut_{n}": (line, _GUARD) for n, line in (
        (74, "np.max(r) * _TWO_PI <= 0.5"), (76, "np.max(r) / _TWO_PI < 0.5"), (78, "np.min(r) * _TWO_PI >= -0.5"),
        (80, "np.min(r) / _TWO_PI > -0.5"), (81, "np.min(r) / _TWO_PI >= +0.5"))},
    f"{P}rope.oracle.x__split__mutmut_3": (
        "t = theta * 134217730.0",
        "2**27 + 2 = 2 (2**26 + 1) still splits theta into hi of at most 26 significant bits with hi + lo == theta "
        "exactly (checked on 10**5 random theta in [2**-40, 2)), so p1 = m * hi stays exact and p2 only rounds "
        "differently, far below the oracle's 1e-16 rad"),
    **{f"{P}formats.x_{name}__mutmut_{n}": (line, why) for name, n, line, why in (
        ("_ints_to_float64", 10, "return a.astype(None)", _F64),
        ("_ints_to_float64", 13, "a.dtype.type(32)).astype(None)", _F64),
        ("_ints_to_float64", 24, "a.dtype.type(0xFFFFFFFF)).astype(None)", _F64),
        ("_ints_to_float64", 61, "return np.asarray(s, dtype=None)", "s is already float64"),
        ("_ints_to_float64", 63, "return np.asarray(s, )", "s is already float64"),
        ("_objects_to_float64", 3, "out = np.empty(a.shape, dtype=None)", _F64),
        ("_objects_to_float64", 5, "out = np.empty(a.shape, )", _F64),
        ("_objects_to_float64", 9, "flat = out.reshape(-2)", _NEG),
        ("_objects_to_float64", 13, "enumerate(a.reshape(-2))", _NEG),
        *((("_ints_to_float64", n, line, _FAST_GUARD) for n, line in (
            (3, "a.dtype.itemsize < 4 or"), (4, "a.dtype.itemsize <= 5 or"), (7, "a.min() > -_EXACT_INT"),
            (8, "a.min() >= +_EXACT_INT"), (9, "a.max() < _EXACT_INT")))),
        *((("_rational_to_float", n, line, _FAST_GUARD) for n, line in (
            (4, "+_EXACT_INT <= num <= _EXACT_INT"), (5, "-_EXACT_INT < num <= _EXACT_INT"),
            (6, "-_EXACT_INT <= num < _EXACT_INT")))),
        ("_rational_to_float", 26, "den.bit_length() - 55, -1074)",
         "a quotient of 54..56 bits instead of 53..55: the shifted-out bits still go into the sticky bit, the "
         "rounding to odd is the same"),
        ("_rational_to_float", 37, "if k > 0 else divmod(m << -k, den)", "at k = 0 both branches compute divmod(m, den)"),
        ("_rational_to_float", 38, "if k >= 1 else divmod(m << -k, den)", "at k = 0 both branches compute divmod(m, den)"),
        ("_rational_to_float", 60, "q & ((2 << extra) - 1) != 0",
         "the wider mask adds q's last kept bit to the sticky test; q |= sticky leaves q unchanged when that bit "
         "is already 1"),
        *((("_as_float64", n, line, _FAST_GUARD) for n, line in (
            (21, "+_EXACT_INT <= v <= _EXACT_INT"), (22, "-_EXACT_INT < v <= _EXACT_INT"),
            (23, "-_EXACT_INT <= v < _EXACT_INT")))),
        ("_as_float64", 19, "isinstance(v, int) or not -_EXACT_INT",
         "floats beyond 2**53 then take the object path too, which converts a float with float(): the same value"),
        ("_as_float64", 9, 'a.dtype.kind == "f" or isinstance(x, (list, tuple))',
         "any list gets the big-int check; it changes `a` only for a Python int beyond 2**53, which the object "
         "path rounds exactly as the integer path does (a list that also holds text is refused either way)"),
        ("_as_float64", 26, "o.reshape(-2)", _NEG),
        ("_as_float64", 32, 'if kind in "XXiuXX":', _KIND),
        ("_as_float64", 49, 'if kind in "XXfbXX"', _KIND),
        ("_as_float64", 56, "return a.astype(None)", _F64),
        ("_bfloat16_via_float32", 2, "np.max(None), np.min(x)", _NAN_ONE),
        ("_bfloat16_via_float32", 3, "np.max(x), np.min(None)", _NAN_ONE),
        ("_bfloat16_via_float32", 5, "top == top or bottom == bottom", _NAN_ONE),
        ("_bfloat16_via_float32", 11, "and False else (", _SCRATCH),
        *((("_bfloat16_via_float32", n, line, _NEG) for n, line in (
            (23, "f32 = a.reshape(-2)"), (29, "tmp = a.reshape(-2)"), (48, "low = b.reshape(-2)"),
            (63, "is_mid = b.reshape(-2)")))),
        ("_bfloat16_via_float32", 31, "[n : 3 * n]", "a holds 2n float32 slots: the slice ends at 2n either way"),
        ("_bfloat16_via_float32", 40, "np.copyto(f32, x, )", _SAME_KIND),
        ("_bfloat16_via_float32", 45, "low = b.reshape(-1).view(None)",
         "low keeps b's float64 dtype and holds the same low 16 bits as float64 values; is_mid overlaps it and "
         "numpy buffers the overlapping operand (checked on 1.1M values, midpoints included)"),
        ("_bfloat16_via_float32", 78, "if (is_mid.any()) or True else None",
         "with no midpoint the index list is empty: nothing is rounded again either way"),
        ("_rne_params", 3, "params = None", _CACHE),
        ("_rne_params", 4, "params = _RNE_PARAMS.get(None)", _CACHE),
        ("_rne_params", 61, "_RNE_PARAMS[key] = None", _CACHE),
        ("_rne_params", 25, ".astype(f.numpy_type).astype(None)", _F64),
        ("_rne_params", 28, "np.array([-0.0], dtype=None)", _NEG_ZERO),
        ("_rne_params", 30, "np.array([-0.0], )", _NEG_ZERO),
        ("_round_into", 10, 'if f.name == "XXfloat32XX":', _F32),
        ("_round_into", 11, 'if f.name == "FLOAT32":', _F32),
        ("_round_into", 22, "t32 = scratch[1]", "both scratch arrays have x's shape and dtype"),
        ("_round_into", 24, "t32 = scratch[0].reshape(-2)", _NEG),
        ("_round_into", 38, "np.copyto(t32, x, )", _SAME_KIND),
        ("_round_into", 49, 'if f.name == "XXbfloat16XX"', _BF16),
        ("_round_into", 50, 'if f.name == "BFLOAT16"', _BF16),
        ("_round_into", 51, "x.dtype != np.float64",
         "float64 input then takes the one-addition path (the same values); no caller rounds float32 input to "
         "bfloat16 (rope.engine takes its own bit-carry path there)"),
        ("_round_into", 54, "_bfloat16_via_float32(x, out, None)", _SCRATCH),
        ("_round_into", 61, "return _round_rne(x, f, out, None)", _SCRATCH),
        ("_round_into", 65, "return _round_rne(x, f, out, )", _SCRATCH),
        ("_round_rne", 8, "if (scratch is None) or True else scratch", _SCRATCH),
        *((("_round_rne", n, line, _OVER_GUARD) for n, line in (
            (80, "top < f.max_finite and bottom >= -f.max_finite"),
            (81, "top <= f.max_finite and bottom > -f.max_finite"),
            (82, "bottom >= +f.max_finite")))),
    )},
    **{f"{P}positions.xǁ_Tallyǁ{name}__mutmut_{n}": (line, why) for name, n, line, why in (
        ("__init__", 17, "self.max_closed = 1", "max_run = max(max_closed, run) is at least 1 for any length >= 1"),
        ("__init__", 22, "self._iota = np.zeros(1)", "a first chunk of one position needs arange(1) = [0.], the same"),
        ("_add_any", 20, "dtype=None), k)", "float64 zeros serve as the run starts: _runs converts with int()"),
        ("_add_any", 22, "else 1, ), k)", "float64 zeros serve as the run starts: _runs converts with int()"),
        ("_add_any", 35, "pos = np.arange(n0, n0 + k, dtype=None)", _INT_POS),
        ("_add_any", 38, "pos = np.arange(n0, n0 + k, )", _INT_POS),
        ("_add_any", 57, "if bad or self.first_non_finite is None:", _MONOTONE),
        ("_add_any", 63, "self.non_finite = bad", _MONOTONE),
        ("_add_any", 65, "if bad <= k:", "bad == k (no finite value) takes the early return: here bad < k"),
        ("add", 7, "self._iota = np.arange(k, dtype=None)", _INT_IOTA),
        ("add", 9, "self._iota = np.arange(k, )", _INT_IOTA),
        ("add", 53, "values[:-1], out=None)", "a new array instead of the scratch one: the same values"),
        ("add", 56, "values[:-1], )", "a new array instead of the scratch one: the same values"),
        ("_add_any", 93, "if (n0) or True else",
         "at n0 = 0 the previous value is nan, unequal to every key: both branches start a run at 0"),
    )},
    f"{P}verdicts.x__judged__mutmut_8": (
        "e = max_rotation_error if (math.isfinite(max_rotation_error)) or True else math.pi",
        "the next line's min(pi, 2 e) is pi for e = inf and for e = nan (nan < pi is false), as for e = pi; a "
        "negative error does not exist"),
    f"{P}hf.scan.x_damage_threshold__mutmut_24": ('spacing(theta, "FLOAT32")', "format names are case-insensitive"),
    f"{P}fix.x__guarded_apply__mutmut_17": ('getattr(out, "dtype", None) != t.dtype', _APPLY),
    f"{P}fix.x__guarded_apply__mutmut_20": ('getattr(out, "dtype", ) != t.dtype', _APPLY),
    f"{P}fix.x__guarded_apply__mutmut_27": (
        "keep_dtype, recurse=None)", "torch's Module._apply tests `if recurse:`: None and False are the same there"),
    **{f"{P}alibi.stream.x__rows_that_matter__mutmut_{n}": (line, why) for n, line, why in (
        (8, "l.max(axis=None) - mp", _PRUNE_LESS + " (the largest stored logit of all heads bounds each head's)"),
        (15, "x.max(axis=None) - mq", _PRUNE_LESS + " (the largest exact logit of all heads bounds each head's)"),
        (13, "np.log(at.dp / sp)", _PRUNE_LESS + " (s >= 1: the sum holds exp(0) of the largest logit)"),
        (20, "np.log(at.dp / sq)", _PRUNE_LESS + " (s >= 1: the sum holds exp(0) of the largest logit)"),
        (14, "x.max(axis=1) + mq", _PRUNE_LESS + " (mq >= 0: the exact logit of key 0 is 0)"),
        (21, "(need.all()) and False", _PRUNE_LESS + " (every head, as an index list)"),
        (22, "(need.all()) or True", _PRUNE_LESS + " (every head)"),
        (10, "l.max(axis=1) - mp > np.log", _TIE), (17, "x.max(axis=1) - mq > np.log", _TIE))},
    **{f"{P}alibi.stream.x__runs__mutmut_{n}": (line, why) for n, line, why in (
        (2, "pad[:, 0] = None", _NONE_FALSE), (5, "pad[:, w + 1] = None", _NONE_FALSE),
        (21, "pad[:, 1 : w + 3]", "a slice past the end stops at the end: the same w + 1 columns"))},
    **{f"{P}alibi.stream.x_count_pass__mutmut_{n}": (line, why) for n, line, why in (
        (124, "same[:, 0] = None", _NONE_FALSE),
        (18, "np.arange(c0, c1, dtype=None)", _INT_K), (21, "np.arange(c0, c1, )", _INT_K),
        *((n, line, "finite values on the non-finite path: no NaN to pair, no non-finite count or error to set, the "
                    "same totals") for n, line in ((97, "finite = None"), (98, "finite = bool(None)"))))},
    **{f"{P}alibi.stream.xǁ_Totalsǁ__init____mutmut_{n}": (
        line, "float64 counters hold the same integers (below 2**53) and every reader converts them with int()")
        for n, line in ((3, "np.zeros(n, dtype=None)"), (5, "np.zeros(n, )"))},
    **{f"{P}alibi.stream.x_prob_change_pass__mutmut_{n}": (line, why) for n, line, why in (
        (8, "(plan.sign > 0) and False", _ORDER), (9, "(plan.sign > 0) or True", _ORDER),
        (11, "plan.sign >= 0", "the sign is +1 or -1, never 0: the same test"), (12, "plan.sign > 1", _ORDER),
        (18, "np.arange(c0, c1, dtype=None)", _INT_K), (21, "np.arange(c0, c1, )", _INT_K),
        (81, "rows = None", _PRUNE_LESS), (98, "add_prob_change(l, x, buf, None)", _PRUNE_LESS + " (every head)"),
        (102, "add_prob_change(l, x, buf, )", _PRUNE_LESS + " (every head)"))},
    f"{P}alibi.stream.xǁ_AtLengthǁadd_prob_change__mutmut_71": (
        "far = np.abs(shift) >= _FAR",
        "the heads at exactly |LSE_l - LSE_x| = 2**32 (the threshold is a choice: at it t's error is 2**-20 either "
        "way, and |p - q| is no worse)"),
    f"{P}alibi.stream.xǁ_AtLengthǁadd_prob_change__mutmut_74": (
        "if (far.any()) or True else None", "with no far head, direct is empty and d[far] = direct changes nothing"),
    f"{P}alibi.audit.x_stored_bias_metrics__mutmut_30": (".reshape(-2)", _NEG),
    **{f"{P}alibi.audit.x_stored_bias_metrics__mutmut_{n}": (line, _WIDTH) for n, line in (
        (62, "max(2, 2**19 // n)"), (64, "max(1, 2 * 19 // n)"), (65, "max(1, 3**19 // n)"),
        (66, "max(1, 2**20 // n)"))},
    f"{P}fix.x_keep_rotary_fp32__mutmut_90": (
        'buffer_kind(name) or "XXXX"',
        "dead: _tensors yields only names whose buffer_kind is not None (the `or` narrows the type for mypy)"),
}

KILLED = {1, 3}  # mutmut: a test failed (3: pytest internal error while importing the mutant)
TIMEOUT = {-24, 24, 152, 255, 36}
SURVIVED = {0}
NO_TESTS = {5, 33}  # no selected test calls the mutated function: counted against the score


def _mutmut(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1")  # the workers share 2 cores; torch's thread pool would oversubscribe
    env.pop("PYTHONPATH", None)  # mutmut puts mutants/ first on sys.path; the repo root must not shadow it
    return subprocess.run([sys.executable, "-m", "mutmut", *args], cwd=ROOT, env=env, text=True,
                          capture_output=True, check=False)


def _results() -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for meta in (ROOT / "mutants").rglob("*.py.meta"):
        out.update(json.loads(meta.read_text())["exit_code_by_key"])
    return out


def _area(name: str) -> str | None:
    for area, globs in AREAS.items():
        if any(fnmatch.fnmatchcase(name, g) for g in globs):
            return area
    return None


def _diff(name: str) -> str:
    """The mutated line(s) of a mutant, as ``mutmut show`` prints them."""
    lines = _mutmut("show", name).stdout.splitlines()
    return "\n".join(s for s in lines if s[:1] in "+-" and not s.startswith(("+++", "---")))


def _table(rows: list[tuple[Any, ...]]) -> list[str]:
    head = ("area", "mutants", "killed", "timeout", "equivalent", "survived", "no tests", "not run", "score")
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    return ["  ".join(str(v).ljust(w) if i == 0 else str(v).rjust(w) for i, (v, w) in enumerate(zip(r, widths)))
            for r in [head, *rows]]


def _earlier_rows(path: Path) -> dict[str, tuple[str, ...]]:
    """The rows of a table written before (``--out``), by area: a run of some areas keeps the others' rows."""
    out: dict[str, tuple[str, ...]] = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        area = next((a for a in AREAS if line.startswith(a + " ")), None)
        rest = line[len(area):].split() if area else []
        if len(rest) == 9:  # seven counts, then the score and its "%"
            out[area] = (area, *rest[:7], " ".join(rest[7:]))
    return out


def report(areas: list[str], out: list[tuple[Any, ...]] | None = None) -> int:
    """Print the score table and the survivors (``out`` also collects the table's rows); returns the number of
    unexplained survivors."""
    rows, unexplained, stale = [], [], []
    results = _results()
    for area in areas:
        names = sorted(n for n in results if _area(n) == area)
        codes = [results[n] for n in names]
        killed = sum(c in KILLED for c in codes)
        timeout = sum(c in TIMEOUT for c in codes)
        survivors = [n for n, c in zip(names, codes) if c in SURVIVED]
        untested = sum(c in NO_TESTS for c in codes)
        other = len(names) - killed - timeout - len(survivors) - untested
        equivalent = 0
        for n in survivors:
            if n in EQUIVALENT:
                equivalent += 1
                if EQUIVALENT[n][0] not in _diff(n):
                    stale.append(n)
            else:
                unexplained.append((area, n))
        judged = len(names) - equivalent
        score = f"{100 * (killed + timeout) / judged:.1f} %" if judged else "-"
        rows.append((area, len(names), killed, timeout, equivalent, len(survivors) - equivalent, untested, other,
                     score))
    print("\n".join(_table(rows)))
    if out is not None:
        out.extend(rows)
    for area, n in unexplained:
        print(f"\nSURVIVED ({area}) {n}\n{_diff(n)}")
    for n in stale:
        print(f"\nlisted as equivalent but its mutation changed, recheck: {n}\n{_diff(n)}")
    return len(unexplained) + len(stale)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("areas", nargs="*", help=f"areas to run (default all): {', '.join(AREAS)}")
    ap.add_argument("--report", action="store_true", help="only print the table of the last run")
    ap.add_argument("--max-children", type=int, default=2, help="parallel mutant workers (default 2)")
    ap.add_argument("--out", metavar="PATH", help="also write the score table to PATH (figures/mutation.txt: the "
                    "README includes it)")
    args = ap.parse_args()
    bad = [a for a in args.areas if a not in AREAS]
    if bad:
        ap.error(f"unknown area {bad[0]!r}; valid: {', '.join(AREAS)}")
    areas = args.areas or list(AREAS)
    if not args.report:
        globs = [g for a in areas for g in AREAS[a]]
        run = _mutmut("run", "--max-children", str(args.max_children), *globs)
        if run.returncode:
            print(run.stdout[-3000:], run.stderr[-3000:], sep="\n")
            return run.returncode
    rows: list[tuple[Any, ...]] = []
    bad = report(areas, rows)
    if args.out:
        total = sum(1 for _ in _results())
        version = _mutmut("--version").stdout.strip().split("version")[-1].strip()
        earlier = _earlier_rows(Path(args.out))
        kept = [a for a in AREAS if a not in areas and a in earlier]
        now = dict(zip(areas, rows))
        lines = (textwrap.wrap(f"mutmut {version}; this run judged {', '.join(areas)}; the rows of "
                               f"{', '.join(kept)} are carried from this file's earlier run:", 100) if kept else
                 [f"mutmut {version}; {total} mutants generated in the mutated files; areas judged below:"])
        lines += [
            "score = (killed + timeout) / (mutants - equivalent); 'no tests' (no selected test calls the mutated",
            "function) and 'not run' (the run was stopped before them) count against it", ""]
        lines += _table([now[a] if a in now else earlier[a] for a in AREAS if a in now or a in earlier])
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
