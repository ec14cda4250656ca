"""The position tally on hand-made chunks of rounded positions (mutation testing, issue 21:
``python scripts/mutation.py "positions tally"``).

Expected values are counted by hand from the definitions in ``PositionRow``: position p is exact when its
rounded value is p; every non-finite value is one value (inf); distinct values are runs of equal neighbours
(rounding is monotone, so equal values are neighbours); the overflow position is the first non-finite one.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from precision_audit.positions import _Tally

INF = math.inf


def tally(*chunks: list[float]) -> _Tally:
    t = _Tally()
    for c in chunks:
        t.add(np.array(c, dtype=np.float64))
    return t


def test_a_chunk_ending_in_overflow_then_an_overflowed_chunk():
    # positions 0..4 -> 0, 1, 2, inf, inf | inf, inf: values 0, 1, 2, inf (4 distinct); the inf run is 4 long
    r = tally([0.0, 1.0, 2.0, INF, INF], [INF, INF]).result("x")
    assert (r.distinct_values, r.max_run, r.non_finite, r.overflow_position) == (4, 4, 4, 3)
    assert (r.exact_count, r.first_inexact) == (3, 3)
    # the partial chunk's last two values differ (2 then inf) when the chunk is cut there
    r = tally([0.0, 1.0, 2.0, INF], [INF, INF]).result("x")
    assert (r.distinct_values, r.max_run, r.overflow_position) == (4, 3, 3)


def test_first_inexact_is_the_first_overflowed_position_when_all_before_were_exact():
    # 0, 1 exact; from 2 on every value is inf: the first inexact position is 2, in a chunk of infs only
    r = tally([0.0, 1.0], [INF, INF, INF]).result("x")
    assert (r.first_inexact, r.overflow_position, r.exact_count, r.distinct_values) == (2, 2, 2, 3)
    # an earlier inexact position stays the first
    r = tally([0.0, 2.0], [INF]).result("x")
    assert (r.first_inexact, r.overflow_position) == (1, 2)


def test_largest_error_counts_rounding_up_and_down():
    # 0 -> 0, 1 -> 2 (+1), 2 -> 2, 3 -> 4 (+1), 4 -> 4: the largest error is 1, all of it upward
    r = tally([0.0, 2.0, 2.0, 4.0, 4.0]).result("x")
    assert (r.max_abs_error, r.exact_count, r.first_inexact, r.distinct_values, r.max_run) == (1.0, 3, 1, 3, 2)
    # downward: 0, 1, 2 -> 0, 0, 2 (-1): also 1
    assert tally([0.0, 0.0, 2.0]).result("x").max_abs_error == 1.0


@pytest.mark.parametrize("chunks", [
    ([0.0, INF, 2.0],),  # a finite value after an overflowed one, inside a chunk
    ([0.0, INF], [2.0, INF]),  # ... across chunks
    ([0.0, 5.0, 1.0],),  # a finite decrease
    ([0.0, 5.0], [1.0, 1.0]),
    ([3.0, 1.0],),  # a decrease inside a chunk of two
])
def test_non_monotone_rounding_is_refused(chunks):
    with pytest.raises(RuntimeError, match=r"^rounded positions are not monotone$"):
        tally(*chunks)
