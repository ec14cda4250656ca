"""precision_audit: audit the numerical precision of position information in transformers.

>>> import precision_audit as pa
>>> pa.round_to([257.0], "bf16").tolist()
[256.0]
"""

from .formats import FORMATS, Format, format_names, get_format, round_to, spacing
from .positions import PositionAudit, audit_positions, measure_positions, predict_positions, reproduce_baichuan

__version__ = "0.1.0"

__all__ = [
    "FORMATS",
    "Format",
    "PositionAudit",
    "audit_positions",
    "__version__",
    "format_names",
    "get_format",
    "measure_positions",
    "predict_positions",
    "reproduce_baichuan",
    "round_to",
    "spacing",
]
