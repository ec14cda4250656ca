"""precision_audit: audit the numerical precision of position information in transformers.

>>> import precision_audit as pa
>>> pa.round_to([257.0], "bf16").tolist()
[256.0]
"""

from .formats import FORMATS, Format, format_names, get_format, round_to, spacing

__version__ = "0.1.0"

__all__ = [
    "FORMATS",
    "Format",
    "__version__",
    "format_names",
    "get_format",
    "round_to",
    "spacing",
]
