"""Relative and learned position encodings in low precision.

* :mod:`.buckets` / :mod:`.audit`: T5's ``_relative_position_bucket`` and DeBERTa's
  ``make_log_bucket_position`` along each code path (transformers, lowp, cast-distance),
  every operation rounded as the real code rounds it; :func:`audit_relative` counts the
  distances whose bucket flips.
* :mod:`.ops`: per-operation rounding (correctly rounded log, * and /).

>>> [(r.path, r.flipped) for r in audit_relative("t5", lengths=2048, dtypes="bfloat16")]
[('transformers', 0), ('lowp', 2), ('cast-distance', 0)]
"""

from .audit import RelativeRow, audit_relative, bucket_scheme
from .buckets import DEFAULTS, PATHS, SCHEMES, BucketScheme, exact_buckets, path_buckets

__all__ = [
    "DEFAULTS",
    "PATHS",
    "SCHEMES",
    "BucketScheme",
    "RelativeRow",
    "audit_relative",
    "bucket_scheme",
    "exact_buckets",
    "path_buckets",
]
