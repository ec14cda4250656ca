"""RoPE auditor (the implementation lives in :mod:`precision_audit.rope.audit` while it is split up)."""

from .audit import *  # noqa: F403
from .audit import (  # noqa: F401
    _TWO_PI,
    _TWO_PI_C1,
    _TWO_PI_C2,
    _TWO_PI_C3,
    MAX_ROPE_LENGTH,
    _AngleTable,
    _PairTable,
    _pass,
    _Work,
    __all__,
    check_rope_lengths,
    default_workers,
    positions_to_scan,
)
