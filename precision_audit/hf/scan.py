"""The scan: every ``*RotaryEmbedding`` class of the installed transformers, built and cast, with a verdict.

:func:`rotary_classes` finds the classes (each ``modeling_*.py`` of
``transformers.models`` that mentions ``RotaryEmbedding`` is imported; one
that fails to import is listed with its error); :func:`scan` builds each from
its model's default config, audits it as built and after ``.to(dtype)`` with
:func:`~precision_audit.hf.modules.audit_rope_module`, and gives a verdict
against :func:`damage_threshold`.
"""

from __future__ import annotations

import importlib
import inspect
import math
import os
import pkgutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..rows import Row
from ..config import schedule_from_config
from ..formats import get_format, spacing
from ..rope import check_rope_lengths
from ..rope.schedules import RopeSchedule
from ..verdicts import SCAN_VERDICTS, damage_limit, scan_verdict
from ._transformers import _quiet, require_transformers
from .classes import _classes_in, _forward_kind, _layer_types, build_rotary_module
from .modules import _preset_figures, _torch_dtype, audit_rope_module, match_recipe

__all__ = ["VERDICTS", "ScanRow", "damage_threshold", "rotary_classes", "scan"]

VERDICTS = SCAN_VERDICTS


# --------------------------------------------------------------------------- class discovery


def _modeling_files(pkg_dir: str) -> list[str]:
    try:
        names = sorted(os.listdir(pkg_dir))
    except OSError:
        return []
    return [f[:-3] for f in names if f.startswith("modeling_") and f.endswith(".py")
            and not f.startswith(("modeling_tf_", "modeling_flax_"))]


def _mentions_rotary(path: str) -> bool:
    try:
        with open(path, encoding="utf-8") as fh:
            return "RotaryEmbedding" in fh.read()
    except OSError:
        return False


@dataclass(frozen=True)
class _Found:
    package: str
    module: str
    cls: Any  # the class, or None when the module did not import
    error: str | None = None

    @property
    def name(self) -> str:
        return self.cls.__name__ if self.cls is not None else f"{self.module} (import failed)"


def rotary_classes(families: Iterable[str] | None = None) -> list[_Found]:
    """Every ``*RotaryEmbedding`` class in the installed transformers (text classes first per package).

    Walks the subpackages of ``transformers.models`` (``families``: only
    these package names, e.g. ``llama``, ``gemma3``) and imports each
    ``modeling_*.py`` whose source mentions ``RotaryEmbedding``; a module
    that fails to import is listed with its error (``cls=None``).
    """
    require_transformers()
    import transformers.models as models

    wanted = None if families is None else set(families)
    out: list[_Found] = []
    for info in sorted(pkgutil.iter_modules(models.__path__), key=lambda i: i.name):
        if not info.ispkg or (wanted is not None and info.name not in wanted):
            continue
        pkg_dir = os.path.join(models.__path__[0], info.name)
        for mod_name in _modeling_files(pkg_dir):
            if not _mentions_rotary(os.path.join(pkg_dir, mod_name + ".py")):
                continue
            full = f"transformers.models.{info.name}.{mod_name}"
            try:
                with _quiet():
                    mod = importlib.import_module(full)
            except Exception as e:  # a broken optional dependency must not stop the scan
                out.append(_Found(info.name, full, None, f"import failed: {e!r}"))
                continue
            out.extend(_Found(info.name, full, c) for c in _classes_in(mod))
    return out


# --------------------------------------------------------------------------- the scan


def damage_threshold(schedule: RopeSchedule, dtype: str, length: int) -> tuple[float, float]:
    """``(threshold, fp32 figure)``: a module is *damaged* when its max rotation error exceeds the threshold,
    :func:`precision_audit.verdicts.damage_limit` of the fp32 preset's max rotation error ``R`` at this
    schedule, dtype and length (float32 until cos/sin, cast to ``dtype``: the fix; dominated by the cache
    rounding, bf16 ~2.8e-3 rad, plus float32 angle rounding) and the frequencies' largest float32 ulp.

    >>> t, r = damage_threshold(RopeSchedule(head_dim=128), "bfloat16", 8192)
    >>> r < t < 0.01
    True
    """
    figures = _preset_figures(schedule, get_format(dtype).name, (int(length),))
    r = figures["fp32"][length][0]
    theta = schedule.inv_freq(schedule.frequency_key(length))
    ulp = float(spacing(theta, "float32").max())  # a schedule has at least one frequency
    return damage_limit(r, length, ulp), r


@dataclass(frozen=True)
class ScanRow(Row):
    """One rotary class (and layer type) of the scan: as built, after ``.to(dtype)``, and the verdict.

    ``status`` is ``audited`` or ``skipped`` (``reason`` says why).  Verdict
    (audited rows): ``damaged as built`` when the built module's max rotation
    error exceeds :func:`damage_threshold`, else ``damaged by the cast`` when
    the cast module's does, else ``safe``.  ``fp32_max_rotation_error`` is the
    fp32 preset's figure the threshold derives from; ``cast_matches_recipe``
    the rope preset the cast module's figures match.  With the fix pass
    (:func:`precision_audit.fix.keep_rotary_fp32` applied before the cast):
    ``fix_*_rotation_error`` and ``fix_restored`` (the fixed, cast module's
    errors equal the as-built ones exactly).  ``to_dict()`` names
    ``module_class`` ``class``.
    """

    model_type: str | None
    module_class: str
    layer_type: str | None
    status: str
    reason: str
    dtype: str
    length: int
    schedule: str | None = None
    built_max_rotation_error: float | None = None
    built_mean_rotation_error: float | None = None
    cast_max_rotation_error: float | None = None
    cast_mean_rotation_error: float | None = None
    fp32_max_rotation_error: float | None = None
    threshold: float | None = None
    cast_matches_recipe: str | None = None
    verdict: str | None = None
    fix_max_rotation_error: float | None = None
    fix_mean_rotation_error: float | None = None
    fix_restored: bool | None = None

    def __post_init__(self) -> None:
        if self.status not in ("audited", "skipped"):
            raise ValueError(f"status {self.status!r} must be audited or skipped")
        if self.verdict is not None and self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {', '.join(VERDICTS)}")

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        return {("class" if k == "module_class" else k): v for k, v in d.items()}


def _scan_class(found: _Found, length: int, dtype: str, fix: bool = False) -> list[ScanRow]:
    """Audit one class (every layer type); any failure becomes a skipped row with its reason."""
    import torch

    base = dict(module_class=found.name, dtype=dtype, length=length)
    if found.cls is None:
        return [ScanRow(model_type=found.package, layer_type=None, status="skipped",
                        reason=found.error or "import failed", **base)]  # type: ignore[arg-type]
    cls = found.cls
    model_type = found.package
    try:
        if not (inspect.isclass(cls) and issubclass(cls, torch.nn.Module)):
            raise ValueError("not a torch.nn.Module")
        kind = _forward_kind(cls)
        module, cfg = build_rotary_module(cls)
        model_type = getattr(cfg, "model_type", None) or model_type
        lts = _layer_types(module, cfg) if kind == "layer_type" else [None]
        if not lts:
            raise ValueError("no layer type of the config has rope parameters")
    except Exception as e:
        return [ScanRow(model_type=model_type, layer_type=None, status="skipped", reason=_reason(e),
                        **base)]  # type: ignore[arg-type]
    rows = []
    _, tdt = _torch_dtype(dtype)
    for lt in lts:
        try:
            sched = schedule_from_config(cfg, lt)
            (built,) = audit_rope_module(module, sched, length, dtype=dtype, layer_type=lt, match=False, distances=())
            cast_mod, _ = build_rotary_module(cls, cfg)
            (cast,) = audit_rope_module(cast_mod.to(tdt), sched, length, dtype=dtype, layer_type=lt, match=False, distances=())
            thr, r = damage_threshold(sched, dtype, length)
            m = match_recipe(sched, dtype, length, cast.max_rotation_error, cast.mean_rotation_error)
            verdict = scan_verdict(built.max_rotation_error, cast.max_rotation_error, thr)
            notes = [f"cast matches {m[1]}"]
            if cast.max_rotation_error > math.pi / 2 or built.max_rotation_error > math.pi / 2:
                notes.append("phase lost")
            fixed: dict[str, Any] = {}
            if fix:
                from ..fix import keep_rotary_fp32

                fix_mod, _ = build_rotary_module(cls, cfg)
                keep_rotary_fp32(fix_mod)
                (fx,) = audit_rope_module(fix_mod.to(tdt), sched, length, dtype=dtype, layer_type=lt, match=False, distances=())
                fixed = dict(fix_max_rotation_error=fx.max_rotation_error,
                             fix_mean_rotation_error=fx.mean_rotation_error,
                             fix_restored=(fx.max_rotation_error, fx.mean_rotation_error)
                             == (built.max_rotation_error, built.mean_rotation_error))
            rows.append(ScanRow(
                model_type=model_type, layer_type=lt, status="audited", reason="; ".join(notes),
                schedule=sched.describe(), built_max_rotation_error=built.max_rotation_error,
                built_mean_rotation_error=built.mean_rotation_error, cast_max_rotation_error=cast.max_rotation_error,
                cast_mean_rotation_error=cast.mean_rotation_error, fp32_max_rotation_error=r, threshold=thr,
                cast_matches_recipe=m[0], verdict=verdict, **fixed, **base))  # type: ignore[arg-type]
        except Exception as e:
            rows.append(ScanRow(model_type=model_type, layer_type=lt, status="skipped", reason=_reason(e),
                                **base))  # type: ignore[arg-type]
    return rows


def _reason(e: BaseException) -> str:
    text = str(e) if isinstance(e, ValueError) else repr(e)
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:297] + "..."


def scan(
    *,
    dtype: Any = "bfloat16",
    length: int = 8192,
    families: Iterable[str] | None = None,
    progress: Callable[[int], None] | None = None,
    classes: Sequence[_Found] | None = None,
    fix: bool = False,
) -> list[ScanRow]:
    """Every ``*RotaryEmbedding`` class of the installed transformers, built and cast, with a verdict.

    Each class is built from its model's default config (no weights, no
    downloads: ``HF_HUB_OFFLINE=1`` is set for the scan), audited as built
    and after ``.to(dtype)`` at one ``length``; see :class:`ScanRow` for the
    verdict.  A class that cannot be audited (vision 2-D rotary, another
    forward signature, a default config that does not build, multimodal
    mrope, a module whose frequencies are not its config's schedule) is a
    skipped row with its reason; one bad class never stops the scan.
    ``families`` restricts it to these ``transformers.models`` packages;
    ``progress`` is called with 1 after each class (``classes``: a list from
    :func:`rotary_classes`, to count them first).  ``fix=True`` audits each
    class a third time with :func:`precision_audit.fix.keep_rotary_fp32`
    applied before the cast.
    """
    name, _ = _torch_dtype(dtype)
    (length,) = check_rope_lengths(length)
    old = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        found = rotary_classes(families) if classes is None else list(classes)
        rows: list[ScanRow] = []
        for f in found:
            rows += _scan_class(f, length, name, fix)
            if progress is not None:
                progress(1)
    finally:
        if old is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = old
    return rows
