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
transformers-cast degraded None 1024 None
>>> print(pa.bottom_line(rows, key="recipe")[1].fix)
call precision_audit.fix.keep_rotary_fp32(model) before model.to(dtype)

Single auditors:

>>> pa.round_to([257.0], "bf16").tolist()
[256.0]
>>> pa.predict_positions(8192, "bf16").exact_fraction
0.109375
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names below load on first use (PEP 562): a command imports only what it runs
    from .alibi import alibi_slopes, audit_alibi
    from .bottomline import bottom_line
    from .config import audit_config, load_config_dict, load_model
    from .fix import keep_rotary_fp32, release_rotary_fp32
    from .formats import FORMATS, Format, format_names, get_format, round_to, spacing
    from .positions import (PositionAudit, PositionRow, audit_positions, measure_positions, predict_positions,
                            reproduce_baichuan)
    from .rope import RopeSchedule
    from .rope import audit as audit_rope
    from .rope import preset as rope_preset
    from .rope.attention import attention_errors
    from .sinusoidal import audit_sinusoidal
    from .trace import KernelRow, TraceResult, audit_rotary_kernel
    from .trace import trace as trace_code
    from .scan import ScanFinding, scan

# public name: (module, attribute there)
_LAZY: dict[str, tuple[str, str]] = {
    **{n: ("alibi", n) for n in ("alibi_slopes", "audit_alibi")},
    "bottom_line": ("bottomline", "bottom_line"),
    **{n: ("config", n) for n in ("audit_config", "load_config_dict", "load_model")},
    "attention_errors": ("rope.attention", "attention_errors"),
    **{n: ("fix", n) for n in ("keep_rotary_fp32", "release_rotary_fp32")},
    **{n: ("formats", n) for n in ("FORMATS", "Format", "format_names", "get_format", "round_to", "spacing")},
    **{n: ("positions", n) for n in ("PositionAudit", "PositionRow", "audit_positions", "measure_positions",
                                     "predict_positions", "reproduce_baichuan")},
    "RopeSchedule": ("rope", "RopeSchedule"),
    "audit_rope": ("rope", "audit"),
    "rope_preset": ("rope", "preset"),
    "audit_sinusoidal": ("sinusoidal", "audit_sinusoidal"),
    "TraceResult": ("trace", "TraceResult"),
    "KernelRow": ("trace", "KernelRow"),
    "audit_rotary_kernel": ("trace", "audit_rotary_kernel"),
    "trace_code": ("trace", "trace"),
    "ScanFinding": ("scan", "ScanFinding"),
    "scan": ("scan", ""),  # the package itself, callable as precision_audit.scan.scan
}


def __getattr__(name: str) -> Any:
    """The public API's names, imported from their modules on first use (then kept here)."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = importlib.import_module(f".{module}", __name__)
    value = getattr(value, attr) if attr else value
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__version__ = "0.1.0"

__all__ = [
    "FORMATS",
    "Format",
    "KernelRow",
    "PositionRow",
    "RopeSchedule",
    "ScanFinding",
    "TraceResult",
    "__version__",
    "alibi_slopes",
    "attention_errors",
    "audit_alibi",
    "audit_config",
    "audit_positions",
    "audit_rope",
    "audit_rotary_kernel",
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
    "scan",
    "spacing",
    "trace_code",
]
