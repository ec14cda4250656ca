"""precision_audit: audit the numerical precision of position information in transformers.

The main workflow: describe a model (:func:`load_model` reads a config.json, a GGUF file or a Hub id;
:func:`load_config_dict` a dict or a transformers config), audit every code path that runs it
(:func:`audit_config`: rows per stack or recipe, dtype and length, each with its verdict), and fold the rows
into the bottom line per stack and dtype (:func:`bottom_line`).

>>> import precision_audit as pa
>>> model = pa.load_config_dict({"model_type": "llama", "hidden_size": 1024, "num_attention_heads": 8,
...                              "rope_theta": 10000.0, "max_position_embeddings": 4096})
>>> rows = pa.audit_config(model, [1024, 4096], ["bfloat16"], stacks=["transformers", "transformers-cast"],
...                        positions=False)
>>> for s in pa.bottom_line(rows, key="recipe"):
...     print(s.path, s.verdict, s.safe_to, s.degraded_from, s.broken_from)
transformers safe 4096 None None
transformers-cast broken None 1024 4096
>>> print(pa.bottom_line(rows, key="recipe")[1].fix)
call precision_audit.fix.keep_rotary_fp32(model) before model.to(dtype)

Single auditors:

>>> pa.round_to([257.0], "bf16").tolist()
[256.0]
>>> pa.predict_positions(8192, "bf16").exact_fraction
0.109375
"""

from .alibi import alibi_slopes, audit_alibi
from .bottomline import bottom_line
from .config import audit_config, load_config_dict, load_model
from .rope.attention import attention_errors
from .fix import keep_rotary_fp32, release_rotary_fp32
from .formats import FORMATS, Format, format_names, get_format, round_to, spacing
from .positions import PositionAudit, PositionRow, audit_positions, measure_positions, predict_positions, reproduce_baichuan
from .rope import RopeSchedule
from .rope import audit as audit_rope
from .rope import preset as rope_preset
from .sinusoidal import audit_sinusoidal

__version__ = "0.1.0"

__all__ = [
    "FORMATS",
    "Format",
    "PositionRow",
    "RopeSchedule",
    "__version__",
    "alibi_slopes",
    "attention_errors",
    "audit_alibi",
    "audit_config",
    "audit_positions",
    "audit_rope",
    "audit_sinusoidal",
    "bottom_line",
    "format_names",
    "get_format",
    "keep_rotary_fp32",
    "load_config_dict",
    "load_model",
    "measure_positions",
    "predict_positions",
    "release_rotary_fp32",
    "reproduce_baichuan",
    "rope_preset",
    "round_to",
    "spacing",
]
