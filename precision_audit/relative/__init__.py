"""Relative and learned position encodings in low precision.

* :mod:`.buckets` / :mod:`.audit`: T5's ``_relative_position_bucket`` and DeBERTa's
  ``make_log_bucket_position`` along each code path (transformers, lowp, cast-distance, lowp-eager),
  every operation rounded as the real code rounds it; :func:`audit_relative` counts the
  distances whose bucket flips.
* :mod:`.learned`: learned absolute positions (GPT-2, BERT, OPT): exact table lookups,
  except ids derived from a cumulative sum of a mask held in a float dtype.
* :mod:`.sinusoids`: Transformer-XL / XLNet relative sinusoids, measured by the sinusoidal auditor.
* :mod:`.ops`: per-operation rounding (correctly rounded log, * and /).

>>> [(r.path, r.flipped) for r in audit_relative("t5", lengths=2048, dtypes="bfloat16")]
[('transformers', 0), ('lowp', 2), ('cast-distance', 0), ('lowp-eager', 3)]
"""

from .audit import RelativeRow, audit_relative, bucket_scheme
from .buckets import DEFAULTS, PATHS, SCHEMES, BucketScheme, exact_buckets, path_buckets
from .learned import LEARNED_PATHS, OPT_OFFSET, LearnedRow, audit_learned, position_ids
from .sinusoids import ATTN_TYPES, SINUSOID_PATHS, RelativeSinusoidRow, audit_relative_sinusoid, relative_distances

__all__ = [
    "ATTN_TYPES",
    "DEFAULTS",
    "LEARNED_PATHS",
    "OPT_OFFSET",
    "PATHS",
    "SCHEMES",
    "SINUSOID_PATHS",
    "BucketScheme",
    "LearnedRow",
    "RelativeRow",
    "RelativeSinusoidRow",
    "audit_learned",
    "audit_relative",
    "audit_relative_sinusoid",
    "bucket_scheme",
    "exact_buckets",
    "path_buckets",
    "position_ids",
    "relative_distances",
]
