"""The scan's damage threshold, term by term (mutation testing, issue 21: ``python scripts/mutation.py
damage_threshold``).

Expected values: the threshold is documented as ``2 R + (L-1) * max_i ulp_f32(theta_i)`` with ``R`` the fp32
preset's max rotation error; ``R`` comes from the rope auditor (``audit`` with ``preset("fp32", dtype)``), the
ulps are closed-form float32 spacings (``2**(e - 23)`` in the binade ``[2**e, 2**(e+1))``) of frequencies
derived by hand: theta_i = 1 / (f_i * base**(2i/d)).
"""

from __future__ import annotations

import numpy as np
import pytest

from precision_audit.hf import damage_threshold
from precision_audit.rope import audit, preset
from precision_audit.rope.schedules import RopeSchedule


def fp32_max_error(schedule: RopeSchedule, dtype: str, length: int) -> float:
    (row,) = audit(schedule, [preset("fp32", dtype)], [length])
    return row.max_rotation_error


# longrope, head_dim 8, base 10000: theta = 1/f_i * (1, 0.1, 0.01, 0.001); the short factors apply up to
# L0 = 1024 (largest theta 1: float32 ulp 2**-23), the long ones beyond (largest theta 1/4: ulp 2**-25)
LONGROPE = RopeSchedule(head_dim=8, scaling="longrope", original_max_position_embeddings=1024,
                        short_factor=(1.0, 1.0, 1.0, 1.0), long_factor=(4.0, 1.0, 1.0, 1.0))


@pytest.mark.parametrize("schedule, dtype, length, ulp", [
    (RopeSchedule(head_dim=64), "bfloat16", 4096, 2.0**-23),  # theta_0 = 1
    (RopeSchedule(head_dim=64), "fp16", 3000, 2.0**-23),  # an alias names the dtype
    (RopeSchedule(head_dim=16, scaling="linear", factor=8.0), "bfloat16", 2048, 2.0**-26),  # theta_0 = 1/8
    (LONGROPE, "bfloat16", 1000, 2.0**-23),
    (LONGROPE, "bfloat16", 2048, 2.0**-25),  # beyond L0 the long factors: theta_0 = 1/4
])
def test_damage_threshold_terms(schedule, dtype, length, ulp):
    r = fp32_max_error(schedule, "bfloat16" if dtype == "bfloat16" else "float16", length)
    assert r > 0
    assert damage_threshold(schedule, dtype, length) == (2 * r + (length - 1) * ulp, r)


def test_damage_threshold_accepts_numpy_lengths():
    s = RopeSchedule(head_dim=32)
    assert damage_threshold(s, "bfloat16", np.int64(512)) == damage_threshold(s, "bfloat16", 512)
