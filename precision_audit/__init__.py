"""precision_audit: audit the numerical precision of position information in transformers.

>>> import precision_audit as pa
>>> pa.round_to([257.0], "bf16").tolist()
[256.0]
>>> pa.predict_positions(8192, "bf16").exact_fraction
0.109375
"""

from .alibi import alibi_slopes, audit_alibi
from .rope.attention import attention_errors
from .fix import keep_rotary_fp32, release_rotary_fp32
from .formats import FORMATS, Format, format_names, get_format, round_to, spacing
from .positions import PositionAudit, audit_positions, measure_positions, predict_positions, reproduce_baichuan
from .rope import RopeSchedule
from .rope import audit as audit_rope
from .rope import preset as rope_preset
from .sinusoidal import audit_sinusoidal

__version__ = "0.1.0"

__all__ = [
    "FORMATS",
    "Format",
    "PositionAudit",
    "RopeSchedule",
    "__version__",
    "alibi_slopes",
    "attention_errors",
    "audit_alibi",
    "audit_positions",
    "audit_rope",
    "audit_sinusoidal",
    "format_names",
    "get_format",
    "keep_rotary_fp32",
    "measure_positions",
    "predict_positions",
    "release_rotary_fp32",
    "reproduce_baichuan",
    "rope_preset",
    "round_to",
    "spacing",
]
