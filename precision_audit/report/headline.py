"""The project's headline report: position ids (Baichuan), RoPE recipes, attention
logits, ALiBi and sinusoidal encodings, at the default model shapes.

``headline_report()`` runs the auditors and returns a :class:`~.writer.Report`
whose figures are drawn when it is written; ``precision-audit report --out
figures/`` writes the committed figures this way.

Each section is built by its own function (the whole report reproduces the incident catalogue and runs the
effect model: about 20 s on 2 cores, exercised by the tests):

>>> sec = positions_section(1024, ["bfloat16"])
>>> sec.title, [type(b).__name__ for b in sec.blocks], sorted(sec.results)
('Position ids', ['Para', 'Table', 'Figure'], ['baichuan', 'positions'])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..rope.attention import attention_errors
from ..positions import reproduce_baichuan
from ..rope import PRESETS, RopeSchedule, audit, preset
from ..sinusoidal import audit_sinusoidal
from ._plotting import fmt, length_label
from .alibi import alibi_sweep, plot_alibi_attention, plot_alibi_distinct
from .attention import plot_attention, plotted, typical_logit
from .positions import POSITION_FORMATS, length_grid, plot_positions, position_rows
from .rope import ROTATION_RULE, plot_error_per_frequency, plot_error_vs_length, rope_lengths
from .sinusoidal import decay_curves, plot_decay, plot_duplicates
from .writer import Figure, Para, Report, Section, Table

__all__ = ["DEFAULT_MAX_LENGTH", "HEADLINE", "headline_report", "incident_section"]

DEFAULT_MAX_LENGTH = 2**20
# the headline's model shapes (a Llama-2-7B-like head; Bloom-like ALiBi; the original Transformer's d_model)
HEADLINE: dict[str, Any] = {
    "rope_head_dim": 128, "rope_base": 10000.0, "alibi_heads": 32, "sinusoidal_dim": 512,
    "sinusoidal_max_length": 2**17, "decay_length": 8192, "decay_max_lag": 64,
    "attention_pairs": 8, "attention_shifts": 1024, "attention_seed": 0,
}

Progress = Callable[[str], None] | None


def _say(progress: Progress, text: str) -> None:
    if progress:
        progress(text)


def attention_blocks(sched: Any, recs: Sequence[Any], length: int, where: str, png: str,
                     caption: str) -> tuple[list[dict[str, Any]], list[Any]]:
    """The attention-logit audit at ``length`` (the headline's pairs, shifts and seed): its rows, and the
    report blocks (the largest error at the farthest offset the figure shows, the figure)."""
    att = attention_errors(sched, recs, length, pairs=HEADLINE["attention_pairs"],
                           shifts=HEADLINE["attention_shifts"], seed=HEADLINE["attention_seed"])
    shown = plotted(att) or att
    far = max(r.distance for r in shown)
    return [r.to_dict() for r in att], [
        Para(f"{where}: at offset {length_label(far)}, the farthest the figure shows, the largest logit error is "
             + ", ".join(f"{fmt(r.max_logit_error)} ({r.recipe})" for r in shown if r.distance == far)
             + f" against a typical |logit| of {fmt(typical_logit(att))}."),
        Figure(png, caption, lambda p: plot_attention(att, p)),
    ]


def _suffix(dtype: str) -> str:
    """bfloat16 figures keep the README's file names; other dtypes carry their name."""
    return "" if dtype == "bfloat16" else f"_{dtype}"


def incident_section() -> Section:
    """The incident catalog: every entry re-measured (``precision_audit.incidents.reproduce_all``), one row each."""
    from ..incidents import reproduce_all

    rows = [r.to_dict() for r in reproduce_all()]
    table = Table(("name", "year", "verdict", "reference"),
                  tuple((r["name"], str(r["year"]), r["verdict"], r["reference"]) for r in rows))
    return Section("Incident catalog", [Para("Public incidents, each re-measured by the auditors "
                                             "(`precision_audit.incidents`; `precision-audit reproduce --all`)."),
                                        table], {"incidents": rows})


def effect_section(progress: Progress = None) -> Section:
    """What a model notices: the shipped probe with each preset's bfloat16 cos/sin, accuracy vs offset."""
    from ..effect import evaluate_many
    from .effect import plot_effect

    offsets = [0, 1024, 8192, 65536, 2**20, 2**22]
    _say(progress, "probe model: four presets in bfloat16 at offsets 0 .. 4M")
    rows = evaluate_many(["lowp", "lowp-inv-freq", "fp32", "fp64"], ["bfloat16"], offsets)
    at = {(r.task, r.path, r.offset): r for r in rows}
    table = Table(("task", "path", *(length_label(o) if o else "0" for o in offsets)),
                  tuple((t, p, *(f"{100 * at[t, p, o].accuracy:.1f} %" for o in offsets))
                        for t in ("local", "gap") for p in ("lowp", "lowp-inv-freq", "fp32", "fp64")))
    return Section("What a model notices", [
        Para("The project's RoPE probe (2 layers, heads of 128, base 1e4; `precision-audit effect`) run with each "
             "path's bfloat16 cos/sin at an offset, against its exact-arithmetic run (100 % on both tasks): local "
             "order (induction, distance 1) and the token exactly G back (G up to 4096). Accuracy:"),
        table,
        Figure("effect.png", "Probe accuracy vs offset per code path (bfloat16 cos/sin)",
               lambda p: plot_effect(rows, p)),
    ], {"effect": [r.to_dict() for r in rows]})


def relative_section(max_length: int, dtypes: Sequence[str] | None = None, progress: Progress = None) -> Section:
    """T5 and DeBERTa buckets per dtype and path: distances whose bucket flips, up to ``max_length``."""
    from .relative import RELATIVE_FORMATS, plot_relative, relative_rows

    fmts = list(dtypes or RELATIVE_FORMATS)
    _say(progress, f"relative buckets (T5, DeBERTa) in {', '.join(fmts)}, L = 64 .. {length_label(max_length)}")
    rows = relative_rows(length_grid(64, max_length), fmts)
    last = [r for r in rows if r.length == rows[-1].length]
    return Section("Relative position buckets", [
        Para("T5's and DeBERTa's relative-position buckets along each code path (`precision-audit relative`): "
             f"distances 0..L-1 whose bucket differs from the exact one, at L = {length_label(last[0].length)}:"),
        Table(("scheme", "path", "dtype", "flipped", "first flip", "max shift"),
              tuple((r.scheme, r.path, r.dtype, str(r.flipped), str(r.first_flip), str(r.max_shift)) for r in last)),
        Figure("relative.png", "T5 and DeBERTa bucket flips per dtype and path vs context length",
               lambda p: plot_relative(rows, p)),
    ], {"relative": [r.to_dict() for r in rows]})


def positions_section(max_length: int, dtypes: Sequence[str] | None, progress: Progress = None) -> Section:
    """Position ids cast to each format (closed form on a dense grid) and the Baichuan table (measured)."""
    _say(progress, "position ids (closed form) and the Baichuan reproduction (measured)")
    fmts = list(POSITION_FORMATS) if dtypes is None else list(dict.fromkeys([*dtypes, "float32"]))
    rows = position_rows(length_grid(16, 2 * max_length), fmts)
    baichuan = reproduce_baichuan()
    at = {(r.dtype, r.length): r for r in baichuan}
    b = at["bfloat16", 8192]
    table = Table(("length",) + tuple(f"{d} exact" for d in ("bfloat16", "float16", "float32"))
                  + ("bfloat16 distinct", "bfloat16 max run"),
                  tuple((str(n),) + tuple(f"{100 * at[d, n].exact_fraction:.1f} %" for d in ("bfloat16", "float16",
                                                                                               "float32"))
                        + (str(at["bfloat16", n].distinct_values), str(at["bfloat16", n].max_run))
                        for n in sorted({r.length for r in baichuan})))
    return Section("Position ids", [
        Para("Position ids 0..L-1 built in a low-precision format lose every integer the format cannot hold. "
             f"At context 8192, bfloat16 keeps **{b.exact_count} of 8192** positions exact "
             f"({100 * b.exact_fraction:.1f} %; Baichuan reported about 10 %) and up to {b.max_run} neighbouring "
             "tokens share one position; float32 keeps every position to 2**24. Measured by rounding every position:"),
        table,
        Figure("positions.png", "Exact share and longest collision group of position ids vs context length "
               "(closed form, equal to the measurement)",
               lambda p: plot_positions(rows, p)),
    ], {"positions": [r.to_dict() for r in rows], "baichuan": [r.to_dict() for r in baichuan]})


def rope_sections(max_length: int, dtypes: Sequence[str], progress: Progress = None) -> list[Section]:
    """RoPE presets vs length and per frequency, then attention logits, per cache dtype."""
    sched = RopeSchedule(head_dim=HEADLINE["rope_head_dim"], base=HEADLINE["rope_base"])
    lengths = rope_lengths(max_length, [max_length])
    per_freq = [n for n in (2**17, 2**20) if n in lengths] or [lengths[-1]]
    rope_blocks: list[Any] = [Para(
        f"RoPE angles m * theta_i for head_dim {sched.head_dim}, base {sched.base:g}, built by four recipes "
        "(`lowp`: every stage in the dtype; `lowp-inv-freq`: the inv_freq buffer downcast by `model.to(dtype)`; "
        "`fp32`: the fix, float32 until the cos/sin cache; `fp64`: float64 angles), each cache stored in the "
        "dtype. Rotation error = |atan2(sin, cos) - m theta_i| wrapped to [-pi, pi]. " + ROTATION_RULE)]
    att_blocks: list[Any] = []
    all_rows: list[dict[str, Any]] = []
    all_att: list[dict[str, Any]] = []
    for d in dtypes:
        _say(progress, f"RoPE, 4 recipes, cache in {d}, L = 256 .. {length_label(lengths[-1])}")
        recs = [preset(n, d) for n in PRESETS]
        rows = audit(sched, recs, lengths)
        all_rows += [r.to_dict() for r in rows]
        show = [n for n in dict.fromkeys([8192, *per_freq]) if n in lengths]
        rope_blocks += [
            Table(("cache", "length", "recipe", "max rot err (rad)", "mean rot err (rad)", "colliding positions"),
                  tuple((d, length_label(r.length), r.recipe, fmt(r.max_rotation_error), fmt(r.mean_rotation_error),
                         str(r.colliding_positions)) for n in show for r in rows if r.length == n)),
            Figure(f"rope_error_vs_length{_suffix(d)}.png", f"RoPE rotation error vs context length, cache in {d}",
                   lambda p, rows=rows: plot_error_vs_length(rows, p)),
            Figure(f"rope_error_per_frequency{_suffix(d)}.png",
                   f"RoPE rotation error per frequency at {', '.join(length_label(n) for n in per_freq)}, cache in {d}",
                   lambda p, rows=rows: plot_error_per_frequency(rows, per_freq, p)),
        ]
        _say(progress, f"RoPE attention logits at {length_label(per_freq[0])}, cache in {d}")
        rows_att, blocks = attention_blocks(sched, recs, per_freq[0],
                                            f"Cache in {d}, context {length_label(per_freq[0])}",
                                            f"rope_attention_logit_error{_suffix(d)}.png",
                                            f"Attention-logit error and shift invariance vs offset, cache in {d}")
        all_att += rows_att
        att_blocks += blocks
    return [Section("RoPE: rotation error per recipe", rope_blocks, {"rope": all_rows}),
            Section("RoPE: attention logits", [Para(
                f"Logits q_m . k_n of {HEADLINE['attention_pairs']} seeded random (q, k) pairs, rotated by each "
                "recipe's cache, against the exact logit, over query positions spread along the context; the "
                "spread is how much one pair's logit moves when both positions shift (exact RoPE: 0).")]
                + att_blocks, {"attention": all_att})]


def alibi_section(max_length: int, dtypes: Sequence[str], progress: Progress = None) -> Section:
    """Distinct biases and attention change per ALiBi recipe vs length."""
    heads = HEADLINE["alibi_heads"]
    lengths = rope_lengths(max_length, [max_length])
    _say(progress, f"ALiBi, {heads} heads, 4 recipes x {len(dtypes)} dtypes, L = 256 .. {length_label(lengths[-1])}")
    sweep = alibi_sweep(heads, dtypes, lengths)
    n = 8192 if 8192 in lengths else lengths[-1]
    table = Table(("model dtype", "recipe", "bias in", "distinct biases (worst head)", "distinct %", "max dP"),
                  tuple((d, r, row.bias_dtype, str(row.min_distinct_biases), f"{100 * row.distinct_fraction:.2f} %",
                         fmt(row.max_prob_change))
                        for (d, r), rows in sweep.items() for row in rows if row.length == n))
    return Section("ALiBi", [
        Para(f"ALiBi biases slope * distance for {heads} heads (reference slopes), last query of each context. "
             f"At L = {length_label(n)} (dP = largest change of an attention probability caused by the bias "
             "rounding alone, equal content scores):"),
        table,
        Figure("alibi_distinct.png", "Distinct ALiBi biases (worst head) vs context length",
               lambda p: plot_alibi_distinct(sweep, p)),
        Figure("alibi_attention.png", "Attention change from ALiBi bias rounding vs context length",
               lambda p: plot_alibi_attention(sweep, p)),
    ], {"alibi": [r.to_dict() for rows in sweep.values() for r in rows]})


def sinusoidal_section(max_length: int, dtypes: Sequence[str], progress: Progress = None) -> Section:
    """Duplicated encoding rows and the decay curve of sinusoidal encodings."""
    dim = HEADLINE["sinusoidal_dim"]
    top = min(HEADLINE["sinusoidal_max_length"], max_length)
    lengths = rope_lengths(top, [top])
    _say(progress, f"sinusoidal encodings, d = {dim}, L = 256 .. {length_label(top)}")
    rows = audit_sinusoidal(dim, ("lowp", "fp32"), lengths, dtypes, max_lag=0)
    dl = min(HEADLINE["decay_length"], max_length)
    cases = [(d, "lowp") for d in dtypes] + [(dtypes[0], "fp32")]
    curves = decay_curves(dl, dim, cases, max_lag=HEADLINE["decay_max_lag"])
    n = 8192 if 8192 in lengths else lengths[-1]
    table = Table(("dtype", "recipe", "distinct rows", "duplicated rows", "max abs error"),
                  tuple((r.dtype, r.recipe, str(r.distinct_rows), f"{100 * r.duplicate_fraction:.1f} %",
                         fmt(r.max_abs_error)) for r in rows if r.length == n))
    return Section("Sinusoidal encodings", [
        Para(f"PE(p, 2i) = sin(p w_i), PE(p, 2i+1) = cos(p w_i), d = {dim}, built in the dtype (`lowp`) or in "
             f"float32 then cast (`fp32`, the fix). At L = {length_label(n)}:"),
        table,
        Figure("sinusoidal_duplicates.png", "Duplicated encoding rows and largest entry error vs context length",
               lambda p: plot_duplicates(rows, p)),
        Figure("sinusoidal_decay.png", "Mean inner product PE(p) . PE(p+k) vs distance k",
               lambda p: plot_decay(curves, p)),
    ], {"sinusoidal": [r.to_dict() for r in rows], "sinusoidal_decay": [c.to_dict() for c in curves]})


def headline_report(max_length: int = DEFAULT_MAX_LENGTH, dtypes: Sequence[str] | None = None,
                    progress: Progress = None) -> Report:
    """Run every auditor at the headline settings up to ``max_length`` and return the report.

    ``dtypes`` (default: the headline's own: five formats for positions,
    bfloat16 for RoPE, bfloat16 and float16 for ALiBi and sinusoidal) sets
    the low-precision formats of every section.
    """
    if max_length < 256:
        raise ValueError(f"max_length {max_length} must be at least 256 for the headline report")
    low = list(dtypes) if dtypes else None
    sections = [positions_section(max_length, low, progress)]
    sections += rope_sections(max_length, low or ["bfloat16"], progress)
    sections.append(alibi_section(max_length, low or ["bfloat16", "float16"], progress))
    sections.append(sinusoidal_section(max_length, low or ["bfloat16", "float16"], progress))
    sections.append(relative_section(max_length, low, progress))
    sections.append(effect_section(progress))
    sections.append(incident_section())
    settings = {"max_length": max_length, "dtypes": low, **HEADLINE}
    intro = [Para("Numerical precision of position information (position ids, RoPE, ALiBi, sinusoidal "
                  "encodings) in low-precision formats, each broken code path next to the float32 fix. "
                  "Written by `precision-audit report`.")]
    return Report("precision_audit: headline report", "headline", settings, sections, intro)


def make_headline(out: str | Path, max_length: int = DEFAULT_MAX_LENGTH, dtypes: Sequence[str] | None = None,
                  progress: Progress = None) -> list[Path]:
    """Build the headline report and write it into ``out`` (see :func:`~.writer.write_report`)."""
    from .writer import output_dir, write_into

    with output_dir(out) as tmp:
        names = [p.name for p in write_into(headline_report(max_length, dtypes, progress), tmp, progress)]
    return [Path(out) / n for n in names]
