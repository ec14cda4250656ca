"""The ``relative`` command: relative and learned position encodings in a number format.

``--scheme t5|deberta``: relative-position buckets that flip; ``learned``: learned absolute position ids
(GPT-2, BERT, OPT); ``xlnet``: Transformer-XL / XLNet relative sinusoids.
"""

from __future__ import annotations

from typing import Any

import click

from ..relative import LEARNED_PATHS, PATHS, SCHEMES, SINUSOID_PATHS
from ._shared import DTYPE, DTYPE_HELP, JSON_HELP, LENGTH, AuditCommand, Column, emit, wide_option

__all__ = ["LEARNED_COLUMNS", "RELATIVE_COLUMNS", "SINUSOID_COLUMNS", "relative_cmd"]

RELATIVE_COLUMNS: list[Column] = [
    ("scheme", "scheme"),
    ("dtype", "dtype"),
    ("length", "length"),
    ("path", "path"),
    ("flipped", "flipped"),
    ("1st flip", "first_flip"),
    ("max shift", "max_shift"),
    ("undefined", "undefined"),
    ("verdict", "verdict"),
]
LEARNED_COLUMNS: list[Column] = [
    ("dtype", "dtype"),
    ("length", "length"),
    ("path", "path"),
    ("wrong ids", "wrong"),
    ("1st wrong", "first_wrong"),
    ("distinct", "distinct_ids"),
    ("collided", "collided"),
    ("max error", "max_error"),
    ("verdict", "verdict"),
]
SINUSOID_COLUMNS: list[Column] = [
    ("dtype", "dtype"),
    ("klen", "klen"),
    ("path", "path"),
    ("distances", "distances"),
    ("distinct rows", "distinct_rows"),
    ("duplicates", "duplicate_rows"),
    ("max |err|", "max_abs_error"),
    ("NN shrink", "nn_shrink"),
    ("cross-sign proven", lambda r: "yes" if r["cross_sign_clear"] else "no"),
]
_SCHEME_PATHS = {"t5": PATHS, "deberta": PATHS, "learned": LEARNED_PATHS, "xlnet": tuple(SINUSOID_PATHS)}
_ONLY = {"bidirectional": ("t5", "deberta"), "num_buckets": ("t5", "deberta"), "max_distance": ("t5", "deberta"), "d_model": ("xlnet",),
         "qlen": ("xlnet",), "attn_type": ("xlnet",)}


def _check_scheme_options(ctx: click.Context, scheme: str, paths: tuple[str, ...]) -> None:
    """Options that belong to other schemes, and paths the scheme has not, are usage errors."""
    for name, schemes in _ONLY.items():
        if scheme not in schemes and ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE:
            flag = "--bidirectional/--causal" if name == "bidirectional" else "--" + name.replace("_", "-")
            raise click.UsageError(f"{flag} applies to --scheme {' / '.join(schemes)}, not {scheme}", ctx)
    bad = [p for p in paths if p not in _SCHEME_PATHS[scheme]]
    if bad:
        raise click.BadParameter(f"{bad[0]!r} is not a path of --scheme {scheme}; valid: "
                                 + ", ".join(_SCHEME_PATHS[scheme]), ctx, param_hint="'--path' / '-r'")


@click.command("relative", cls=AuditCommand)
@click.option("--scheme", type=click.Choice([*SCHEMES, "learned", "xlnet"]), default="t5", show_default=True,
              help="t5 = T5Attention._relative_position_bucket (T5, Flan-T5, UMT5); deberta = "
                   "make_log_bucket_position (DeBERTa-v2/v3); learned = learned absolute position ids (GPT-2, "
                   "BERT, OPT's cumsum of the mask); xlnet = Transformer-XL / XLNet relative sinusoids.")
@click.option("--bidirectional/--causal", default=True, show_default=True,
              help="t5: encoder (keys on both sides, half the buckets a side) or decoder (keys before the query "
                   "only).  DeBERTa is bidirectional.")
@click.option("--num-buckets", type=int, default=None,
              help="t5 relative_attention_num_buckets / deberta position_buckets.  [default: 32 / 256]")
@click.option("--max-distance", type=int, default=None,
              help="t5 relative_attention_max_distance / deberta max_relative_positions.  [default: 128 / 512]")
@click.option("--length", "-l", "lengths", type=LENGTH, multiple=True, default=("512", "2K", "8K", "32K"),
              show_default=True,
              help="Context length (repeatable): t5/deberta bucket the distances 0..L-1; learned numbers L tokens; "
                   "xlnet: klen (the key length).")
@click.option("--dtype", "-d", "dtypes", type=DTYPE, multiple=True, default=("bfloat16", "float16"),
              show_default=True, help=DTYPE_HELP)
@click.option("--path", "-r", "paths", type=click.Choice(sorted({*PATHS, *LEARNED_PATHS, *SINUSOID_PATHS})),
              multiple=True, default=(),
              help="Code path (repeatable).  t5/deberta: transformers = as transformers computes it in any model "
                   "dtype (T5's .float() before the log: float32); lowp = every operation after the int -> float "
                   "conversion in DTYPE (an ONNX float16 graph, MindSpore bf16); cast-distance = the distance cast "
                   "to DTYPE, the rest float32; lowp-eager = lowp as eager torch runs it on DTYPE tensors, the "
                   "Python constants in float32 (a torch port without T5's .float()).  learned: arange (int64 ids), mask-int64 (OPT's cumsum on an int "
                   "mask), mask-cumsum (the mask in DTYPE, torch's cumsum), mask-scan (every partial sum in DTYPE).  "
                   "xlnet: transformers (float32, table cast), arange-dtype (torch.arange(..., dtype=DTYPE)), "
                   "positions-dtype (only the distances in DTYPE).  [default: every path of the scheme]")
@click.option("--d-model", type=click.IntRange(2, 65536), default=1024, show_default=True,
              help="xlnet: model width (even): d_model/2 sin/cos pairs.")
@click.option("--qlen", type=click.IntRange(min=1), default=None,
              help="xlnet: query length (<= klen; klen - qlen is the memory).  [default: klen]")
@click.option("--attn-type", type=click.Choice(["bi", "uni"]), default="bi", show_default=True,
              help="xlnet attn_type: bi encodes the distances klen .. -qlen+1, uni klen .. 0.")
@wide_option
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_context
def relative_cmd(ctx: click.Context, scheme: str, bidirectional: bool, num_buckets: int | None,
                 max_distance: int | None, lengths: tuple[int, ...], dtypes: tuple[str, ...], paths: tuple[str, ...],
                 d_model: int, qlen: int | None, attn_type: str, as_json: bool) -> None:
    """Relative and learned position encodings in a number format.

    t5 / deberta: for every distance 0..L-1 the bucket each code path
    computes is compared with the exact bucket: flipped = distances whose
    bucket differs (keys after the query mirror keys before it: they flip
    alike), 1st flip = the smallest, max shift = the largest bucket
    difference, undefined = distances whose value overflowed (inf/nan)
    before the cast to an index.  learned: position ids of L tokens (a table
    lookup is exact; ids computed from a mask held in DTYPE are not).
    xlnet: the sinusoidal auditor's measures on XLNet's relative distances.

    Example: precision-audit relative --scheme t5 -l 2K -d bf16 -r lowp
    """
    from ..relative import audit_learned, audit_relative, audit_relative_sinusoid

    _check_scheme_options(ctx, scheme, paths)
    chosen = paths or _SCHEME_PATHS[scheme]
    rows: list[Any]
    if scheme == "learned":
        rows, columns = audit_learned(chosen, lengths, dtypes), LEARNED_COLUMNS
    elif scheme == "xlnet":
        if d_model % 2:
            raise click.BadParameter(f"{d_model} must be even (sin and cos come in pairs)", ctx,
                                     param_hint="'--d-model'")
        rows = audit_relative_sinusoid(d_model, chosen, lengths, dtypes, qlen=qlen, attn_type=attn_type)
        columns = SINUSOID_COLUMNS
    else:
        rows = audit_relative(scheme, chosen, lengths, dtypes, bidirectional=bidirectional, num_buckets=num_buckets,
                              max_distance=max_distance)
        columns = RELATIVE_COLUMNS
    emit("relative", rows, as_json, columns)
