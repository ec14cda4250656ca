"""The probe figure: accuracy vs offset per code path, one panel per task (matplotlib imported lazily).

>>> import tempfile, os
>>> from precision_audit.effect import evaluate_many
>>> rows = evaluate_many(["lowp", "fp32"], offsets=[0, 2**16], sequences=8)
>>> with tempfile.TemporaryDirectory() as d:
...     os.path.getsize(plot_effect(rows, os.path.join(d, "effect.png"))) > 10_000
True
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..effect import EffectRow
from ..effect.tasks import CONTENT, GAPS
from ._plotting import OKABE_ITO, ROPE_STYLE, length_label, pyplot, save_figure

__all__ = ["TASK_TITLES", "plot_effect", "plot_model_effect"]

TASK_TITLES = {"local": "local order (induction: needs the previous token, distance 1)",
               "gap": "exact distance: the token G back, among tokens at G±1, G±2"}

# stacks: colours and markers that the four presets do not use (a stack that computes what fp32 computes
# draws over it: the legend says which coincide)
_STACK_STYLE = [dict(color=OKABE_ITO["sky"], marker="v", ls=":"), dict(color=OKABE_ITO["purple"], marker="<", ls=":"),
                dict(color=OKABE_ITO["black"], marker=">", ls=":"), dict(color="#777777", marker="x", ls=":"),
                dict(color=OKABE_ITO["sky"], marker="P", ls="-."), dict(color=OKABE_ITO["purple"], marker="*", ls="-."),
                dict(color=OKABE_ITO["black"], marker="h", ls="-.")]


def _panels(rows: Sequence[EffectRow]) -> list[tuple[str, int | None]]:
    return list(dict.fromkeys((r.task, r.gap if r.task == "gap" else None) for r in rows))


def _title(task: str, gap: int | None) -> str:
    if task == "gap":
        what = f"G = {gap}" if gap is not None else f"G = {GAPS[0]} .. {GAPS[-1]} mixed"
        return TASK_TITLES["gap"] + f"\n{what}"
    return TASK_TITLES[task]


def _groups(rows: Sequence[EffectRow]) -> list[list[tuple[str, str]]]:
    """Paths (path, dtype) whose accuracies are equal at every point, grouped: one line per group."""
    series: dict[tuple[str, str], list[tuple[Any, ...]]] = {}
    for r in rows:
        series.setdefault((r.path, r.dtype), []).append((r.task, r.gap, r.offset, r.accuracy))
    groups: dict[tuple[Any, ...], list[tuple[str, str]]] = {}
    for key, pts in series.items():
        groups.setdefault(tuple(sorted(pts, key=str)), []).append(key)
    return list(groups.values())


def _label(group: list[tuple[str, str]], dtypes: set[str]) -> str:
    names = [p if len(dtypes) == 1 else f"{p} ({d})" for p, d in group]
    lines = [", ".join(names[i:i + 3]) for i in range(0, len(names), 3)]
    return ",\n".join(lines)


def plot_effect(rows: Sequence[EffectRow], path: str | Path, title: str | None = None) -> Path:
    """Write accuracy vs offset (symlog x: offset 0 on the left) per path and dtype, one panel per task
    (per gap where rows hold several), with the exact-arithmetic probe as a grey band; returns the path.
    Paths with the same accuracy at every point share one line (the legend lists them)."""
    if not rows:
        raise ValueError("no rows to plot")
    plt = pyplot()
    panels = _panels(rows)
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 4.8), squeeze=False, sharey=True)
    groups = _groups(rows)
    dtypes = {r.dtype for r in rows}
    offsets = sorted({r.offset for r in rows})
    styles = []
    spare = iter(_STACK_STYLE * 4)
    for g in groups:
        preset = next((p for p, _ in g if p in ROPE_STYLE), None)
        styles.append(ROPE_STYLE[preset] if preset else next(spare))
    for ax, (task, gap) in zip(axes[0], panels):
        sel = [r for r in rows if r.task == task and (task != "gap" or r.gap == gap)]
        exact = {r.offset: r.exact_accuracy for r in sel}
        xs = sorted(exact)
        ax.plot(xs, [100 * exact[x] for x in xs], color="0.6", lw=7, alpha=0.45, solid_capstyle="round",
                label="exact RoPE (float64 oracle)", zorder=1)
        for g, style in zip(groups, styles):
            pts = sorted((r.offset, 100 * r.accuracy) for r in sel if (r.path, r.dtype) == g[0])
            if pts:
                preset = any(p in ROPE_STYLE for p, _ in g)  # the presets drawn over the stacks
                ax.plot(*zip(*pts), label=_label(g, dtypes), ms=5 if preset else 4, lw=1.6 if preset else 1.1,
                        zorder=3 if preset else 2, **style)
        ax.axhline(100 / CONTENT, color="0.35", ls=(0, (1, 2)), lw=1)
        ax.annotate(f"chance ({100 / CONTENT:.1f}%)", (1.0, 100 / CONTENT), xycoords=("axes fraction", "data"),
                    xytext=(-3, 3), textcoords="offset points", ha="right", va="bottom", fontsize=8, color="0.3")
        ax.set_xscale("symlog", linthresh=256, linscale=0.4)
        ax.set_xticks(offsets, [length_label(x) if x else "0" for x in offsets])
        ax.set_xlim(-30 if offsets[0] == 0 else offsets[0] / 1.5, offsets[-1] * 1.5)
        ax.set_ylim(-3, 103)
        ax.set_title(_title(task, gap), fontsize=10)
        ax.set_xlabel("offset: position of each sequence's first token")
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("probe accuracy (%)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    ncol = min(3, len(labels))
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=8, frameon=False)
    dt = ", ".join(sorted(dtypes))
    fig.suptitle(title or f"What RoPE precision costs a trained probe (each path's cos/sin for a {dt} model; "
                          "the rest of the probe in float64)", fontsize=11)
    legend_lines = sum(max(lab.count("\n") + 1 for lab in labels[i:i + ncol]) for i in range(0, len(labels), ncol))
    fig.tight_layout(rect=(0, min(0.45, 0.03 + 0.037 * legend_lines), 1, 0.97))
    return save_figure(fig, path)


def _keys_over_gaps(rows: Sequence[Any]) -> list[Any]:
    """Pass-key rows summed over their gaps: one per path, dtype, cache and offset (``keys``, ``correct`` and
    ``floor`` added up)."""
    import dataclasses

    out: dict[tuple[Any, ...], Any] = {}
    for r in rows:
        k = (r.path, r.dtype, r.cache, r.offset)
        out[k] = r if k not in out else dataclasses.replace(out[k], keys=out[k].keys + r.keys,
                                                            correct=out[k].correct + r.correct,
                                                            floor=out[k].floor + r.floor)
    return list(out.values())


def plot_model_effect(text_rows: Sequence[Any], key_rows: Sequence[Any], path: str | Path,
                      title: str | None = None) -> Path:
    """A real model (:func:`precision_audit.effect.measures.measure_model` rows): top-1 agreement with its exact-RoPE run
    and pass keys retrieved vs offset, per path and dtype, with the floor of each cache format (exact cos/sin stored
    in it) as a grey band; returns the path."""
    if not text_rows and not key_rows:
        raise ValueError("no rows to plot")
    plt = pyplot()
    gaps = sorted({r.gap for r in key_rows})
    key_rows = _keys_over_gaps(key_rows)
    panels = [(rows, value, floor, label) for rows, value, floor, label in (
        (text_rows, lambda r: 100 * r.top1, lambda r: 100 * r.floor_top1, "top-1 agreement with exact RoPE (%)"),
        (key_rows, lambda r: 100 * r.correct / r.keys, lambda r: 100 * r.floor / r.keys, "pass keys retrieved (%)"))
        if rows]
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 4.6), squeeze=False)
    offsets = sorted({r.offset for rows, *_ in panels for r in rows})
    spare = iter(_STACK_STYLE * 4)
    styles: dict[tuple[str, str], dict[str, Any]] = {}
    for ax, (rows, value, floor, label) in zip(axes[0], panels):
        for cache in dict.fromkeys(r.cache for r in rows):
            pts = sorted({(r.offset, floor(r)) for r in rows if r.cache == cache})
            ax.plot([p[0] for p in pts], [p[1] for p in pts], color="0.6", lw=7, alpha=0.45,
                    solid_capstyle="round", zorder=1, label=f"floor: exact cos/sin stored in {cache}")
        for key in dict.fromkeys((r.path, r.dtype) for r in rows):
            if key not in styles:
                styles[key] = ROPE_STYLE.get(key[0]) or next(spare)
            pts = sorted((r.offset, value(r)) for r in rows if (r.path, r.dtype) == key)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=f"{key[0]} ({key[1]})", lw=1.6, ms=5, zorder=3,
                    **styles[key])
        ax.set_xscale("symlog", linthresh=256, linscale=0.4)
        ax.set_xticks(offsets, [length_label(x) if x else "0" for x in offsets])
        ax.set_xlim(-30 if offsets[0] == 0 else offsets[0] / 1.5, offsets[-1] * 1.5)
        ax.set_ylim(-3, 103)
        ax.set_ylabel(label)
        ax.set_xlabel("offset: position of the first token")
        ax.set_title(f"text, {rows[0].tokens} tokens" if rows is text_rows
                     else f"pass keys {', '.join(map(str, gaps))} tokens back, {rows[0].keys} in all per point",
                     fontsize=10)
        ax.grid(True, alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=8, frameon=False)
    first = (text_rows or key_rows)[0]
    fig.suptitle(title or f"What RoPE precision costs {first.model} (weights in {first.model_dtype}; each path's "
                          "cos/sin injected, against its exact-RoPE run)", fontsize=11)
    fig.tight_layout(rect=(0, 0.08, 1, 0.95))
    return save_figure(fig, path)
