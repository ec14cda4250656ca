"""Figure: RoPE attention-logit error and shift invariance vs offset.

Input rows come from :func:`precision_audit.attention.attention_errors`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..attention import AttentionRow
from ._plotting import ROPE_LABEL as _LABEL
from ._plotting import ROPE_STYLE as _STYLE
from ._plotting import length_label as _length_label
from ._plotting import pyplot, save_figure, tokens_formatter
from ._plotting import recipes_in as _recipes

__all__ = ["plot_attention"]


def plot_attention(rows: Sequence[AttentionRow], path: str | Path) -> Path:
    """Rotated-logit error and shift spread vs offset m - n per recipe (log-log; offset 0 omitted)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.2), sharey=True)
    r0 = rows[0]
    for ax, key, title in ((axes[0], "max_logit_error", "max |logit - exact logit| over shifts and pairs"),
                           (axes[1], "score_spread", "invariance: max - min logit over shifts (exact: 0)")):
        for name in _recipes(rows):
            # offset 0 has no place on a log axis; a spread (and a fair max) needs at least two shifts
            rs = sorted((r for r in rows if r.recipe == name and r.distance > 0 and r.shifts > 1),
                        key=lambda r: r.distance)
            ax.plot([r.distance for r in rs], [max(getattr(r, key), 1e-16) for r in rs],
                    label=_LABEL.get(name, name), lw=1.5, ms=3, **_STYLE.get(name, {}))
        rms = sum(r.logit_rms for r in rows) / len(rows)
        ax.axhline(rms, color="k", ls=":", lw=1)
        ax.text(max(r.distance for r in rows), rms * 1.3, f"typical |logit| (rms {rms:.1f})", fontsize=8,
                ha="right")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_ylim(1e-2, 200)
        ax.xaxis.set_major_formatter(tokens_formatter())
        ax.set_xlabel("offset m - n (tokens)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("logit error (q . k units, before 1/sqrt(d))")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=9)
    applied = f", q/k rotated in {r0.apply}" if r0.apply else ""
    fig.suptitle(f"Attention logits q_m . k_n with RoPE, cache in {r0.dtype}{applied}\ncontext "
                 f"{_length_label(r0.length)}, head_dim {r0.head_dim}, {r0.pairs} random N(0,1) (q, k) pairs, "
                 f"{r0.shifts} shifts per offset")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return save_figure(fig, path)
