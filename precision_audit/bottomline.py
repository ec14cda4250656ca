"""The bottom line: per code path and dtype, the verdict as the model runs and the longest safe context.

A model audit (:func:`precision_audit.config.audit_config`, the report, a
live module audit) yields one verdict per code path, dtype and context length.
:func:`bottom_line` folds them into one :class:`Summary` per (path, dtype): the
worst verdict, the longest audited length up to which every audited length is
safe, the first degraded and first broken length, and the fix where one
exists.  ``str(summary)`` is the sentence the CLI prints first.

>>> rows = [dict(path="transformers", dtype="bfloat16", length=L, verdict=v)
...         for L, v in ((131072, "safe"), (262144, "safe"), (524288, "degraded"))]
>>> print(bottom_line(rows)[0])
transformers as built, bfloat16: safe to 256K, degraded from 512K
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .checks import ArgumentTypeError, describe
from .rows import Row
from .verdicts import VERDICTS, human_length, worst

__all__ = ["KINDS", "VERDICT_ORDER", "Summary", "bottom_line", "failing", "fix_for", "human_length", "path_labels"]

VERDICT_ORDER: tuple[str, ...] = VERDICTS
"""The verdicts from best to worst (:data:`precision_audit.verdicts.VERDICTS`)."""


@dataclass(frozen=True)
class Summary(Row):
    """One code path at one dtype over the audited lengths.

    ``verdict`` is the worst over the lengths; ``safe_to`` the longest
    audited length L such that every audited length up to L is safe (None if
    the shortest is not); ``degraded_from`` / ``broken_from`` the first length
    with that verdict (None if none).  ``label`` names the path for people,
    ``fix`` says what to do when it is not safe (None where no fix is known).
    ``note``: how the schedule the path runs differs from the one the model
    declares (a stack that computes other frequencies), or None; ``roles``:
    a stack's uses (``train``, ``serve``; empty for a recipe);
    ``degraded_why`` / ``broken_why``: what is lost at the first degraded /
    broken length (a row's ``why``, when rows give one).

    >>> print(Summary("llama.cpp-cpu", "llama.cpp CPU", "bfloat16", (4096,), "broken", None, None, 4096,
    ...               "use another stack", "runs another schedule: ramp bounds rounded"))
    llama.cpp CPU, bfloat16: broken at every length audited; runs another schedule: ramp bounds rounded -> use another stack
    """

    path: str
    label: str
    dtype: str
    lengths: tuple[int, ...]
    verdict: str
    safe_to: int | None
    degraded_from: int | None
    broken_from: int | None
    fix: str | None = None
    note: str | None = None
    roles: tuple[str, ...] = ()
    degraded_why: str | None = None
    broken_why: str | None = None

    def __str__(self) -> str:
        parts = []
        if self.safe_to is not None:
            parts.append(f"safe to {human_length(self.safe_to)}")
        if self.degraded_from is not None and (self.broken_from is None or self.degraded_from < self.broken_from):
            parts.append(f"degraded from {human_length(self.degraded_from)}"
                         + (f" ({self.degraded_why})" if self.degraded_why else ""))
        if self.broken_from is not None:
            parts.append(("broken at every length audited" if self.broken_from == self.lengths[0]
                          else f"broken from {human_length(self.broken_from)}")
                         + (f" ({self.broken_why})" if self.broken_why else ""))
        text = f"{self.label}, {self.dtype}: " + ", ".join(parts)
        if self.note:
            text += f"; {self.note}"
        if self.verdict != "safe" and self.fix:
            text += f" -> {self.fix}"
        return text


def _get(row: Any, key: str) -> Any:
    return row[key] if isinstance(row, Mapping) else getattr(row, key)


KINDS: tuple[str, ...] = ("rope", "alibi", "relative", "learned")


def path_labels(kind: str = "rope") -> dict[str, tuple[str, str | None]]:
    """Each code path's (label, fix), as its own module defines them: the RoPE presets (:data:`.rope.PRESETS`)
    and stacks (:data:`.rope.STACKS`), the ALiBi recipes, the relative and learned paths, the position ids."""
    # imported here: a bottom line of one kind needs only that kind's modules (and the CLI starts faster)
    from . import positions
    from .alibi import recipes as alibi_recipes
    from .relative import buckets, learned, sinusoids
    from .rope.recipes import PRESETS
    from .rope.stacks import STACKS

    if kind not in KINDS:
        raise ValueError(f"kind {kind!r} must be one of {', '.join(KINDS)}")
    if kind == "alibi":
        return dict(alibi_recipes.LABELS)
    if kind == "relative":
        return {**buckets.LABELS, **sinusoids.LABELS}
    if kind == "learned":
        return dict(learned.LABELS)
    out: dict[str, tuple[str, str | None]] = {n: (s.label, s.fix) for n, s in STACKS.items()}
    out.update({n: (p.label, p.fix) for n, p in PRESETS.items()})
    out["position ids"] = positions.LABEL
    return out


def _roles(path: str) -> tuple[str, ...]:
    from .rope.stacks import STACKS

    return STACKS[path].roles if path in STACKS else ()


def fix_for(path: str, kind: str = "rope") -> str | None:
    """The fix the bottom line names for a code path (a stack, RoPE preset or ALiBi recipe); None if none is known.

    >>> fix_for("lowp-inv-freq")
    'call precision_audit.fix.keep_rotary_fp32(model) before model.to(dtype)'
    """
    return path_labels(kind).get(path, (path, None))[1]


def bottom_line(rows: Iterable[Any], key: str = "path", kind: str = "rope",
                notes: Mapping[str, tuple[str, str | None]] | None = None) -> list[Summary]:
    """One :class:`Summary` per (code path, dtype) of ``rows``, in first-seen order.

    Each row (a mapping or an object) gives ``key`` (the code path: a stack
    or recipe name), ``dtype``, ``length`` and ``verdict``; rows of several
    layer types at one length combine to their worst verdict.  ``kind``
    (:data:`KINDS`) chooses how recipe names read.  ``notes`` maps a
    path to (a note, its fix): a stack that runs another schedule than the
    model declares (its fix replaces the path's own).
    """
    if not isinstance(key, str):
        raise ArgumentTypeError(f"key {describe(key)} must be a row field name (a string)")
    if not key:
        raise ValueError("key '' must be a row field name (empty)")
    if not isinstance(kind, str) or kind not in KINDS:
        raise ValueError(f"kind {describe(kind)} must be one of {', '.join(KINDS)}")
    if notes is not None and not isinstance(notes, Mapping):
        raise ArgumentTypeError(f"notes {describe(notes)} must be a mapping of path to (note, fix) or None")
    if isinstance(rows, (str, bytes, Mapping)) or not isinstance(rows, Iterable):
        raise ArgumentTypeError(f"rows {describe(rows)} must be an iterable of rows")
    rows = list(rows)
    for r in rows:
        missing = [f for f in (key, "dtype", "length", "verdict")
                   if not (f in r if isinstance(r, Mapping) else hasattr(r, f))]
        if missing:
            raise ValueError(f"rows: row {describe(r)} has no {', '.join(missing)}")
    labels = path_labels(kind)
    groups: dict[tuple[str, str], dict[int, str]] = {}
    whys: dict[tuple[str, str, int | None, str], str] = {}
    for r in rows:
        k = (str(_get(r, key)), str(_get(r, "dtype")))
        g = groups.setdefault(k, {})
        L, v = int(_get(r, "length")), str(_get(r, "verdict"))
        g[L] = worst((g.get(L, "safe"), v))
        why = r.get("why") if isinstance(r, Mapping) else getattr(r, "why", None)
        if why:
            whys.setdefault((*k, L, v), str(why))
    out = []
    for (path, dtype), by_len in groups.items():
        lens = tuple(sorted(by_len))
        verdicts = [by_len[L] for L in lens]
        safe_to = None
        for L, v in zip(lens, verdicts):
            if v != "safe":
                break
            safe_to = L
        first = {v: next((L for L, w in zip(lens, verdicts) if w == v), None) for v in VERDICT_ORDER[1:]}
        label, fix = labels.get(path, (path, None))
        note, note_fix = (notes or {}).get(path, (None, None))
        out.append(Summary(path, label, dtype, lens, worst(verdicts), safe_to,
                           first["degraded"], first["broken"], note_fix or fix, note,
                           _roles(path) if kind == "rope" else (),
                           whys.get((path, dtype, first["degraded"], "degraded")),
                           whys.get((path, dtype, first["broken"], "broken"))))
    return out


def failing(rows: Iterable[Any], threshold: str, key: str = "path",
            paths: Sequence[str] | None = None) -> list[tuple[Any, str]]:
    """The rows at or worse than ``threshold`` (``degraded`` or ``broken``), among ``paths`` if given, with why.

    ``why`` is the row's verdict and its length, for the CLI's ``--fail-on``.

    >>> rows = [dict(path="vllm", dtype="bfloat16", length=8192, verdict="broken")]
    >>> failing(rows, "degraded")
    [({'path': 'vllm', 'dtype': 'bfloat16', 'length': 8192, 'verdict': 'broken'}, 'broken at 8K in bfloat16')]
    """
    if threshold not in VERDICT_ORDER[1:]:
        raise ValueError(f"threshold {threshold!r} must be degraded or broken")
    level = VERDICT_ORDER.index(threshold)
    out = []
    for r in rows:
        if paths is not None and str(_get(r, key)) not in paths:
            continue
        v = str(_get(r, "verdict"))
        if VERDICT_ORDER.index(v) >= level:
            out.append((r, f"{v} at {human_length(int(_get(r, 'length')))} in {_get(r, 'dtype')}"))
    return out
