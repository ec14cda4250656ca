"""The ``relative`` command: T5 / DeBERTa relative-position buckets that flip in a number format."""

from __future__ import annotations

import click

from ..relative import PATHS, SCHEMES
from ._shared import DTYPE, DTYPE_HELP, JSON_HELP, LENGTH, AuditCommand, Column, emit, wide_option

__all__ = ["RELATIVE_COLUMNS", "relative_cmd"]

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


@click.command("relative", cls=AuditCommand)
@click.option("--scheme", type=click.Choice(list(SCHEMES)), default="t5", show_default=True,
              help="t5 = T5Attention._relative_position_bucket (T5, Flan-T5, UMT5 encoders); deberta = "
                   "make_log_bucket_position (DeBERTa-v2/v3).")
@click.option("--bidirectional/--causal", default=True, show_default=True,
              help="t5: encoder (keys on both sides, half the buckets a side) or decoder (keys before the query "
                   "only).  DeBERTa is bidirectional.")
@click.option("--num-buckets", type=int, default=None,
              help="t5 relative_attention_num_buckets / deberta position_buckets.  [default: 32 / 256]")
@click.option("--max-distance", type=int, default=None,
              help="t5 relative_attention_max_distance / deberta max_relative_positions.  [default: 128 / 512]")
@click.option("--length", "-l", "lengths", type=LENGTH, multiple=True, default=("512", "2K", "8K", "32K"),
              show_default=True, help="Context length (repeatable): the distances 0..L-1 are bucketed.")
@click.option("--dtype", "-d", "dtypes", type=DTYPE, multiple=True, default=("bfloat16", "float16"),
              show_default=True, help=DTYPE_HELP)
@click.option("--path", "-r", "paths", type=click.Choice(list(PATHS)), multiple=True, default=PATHS,
              show_default=True,
              help="Code path (repeatable): transformers = as transformers computes it in any model dtype (T5's "
                   ".float() before the log: float32); lowp = every operation after the int -> float conversion "
                   "in DTYPE (an ONNX float16 graph, MindSpore bf16); cast-distance = the distance cast to DTYPE, "
                   "the rest float32.")
@wide_option
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
def relative_cmd(scheme: str, bidirectional: bool, num_buckets: int | None, max_distance: int | None,
                 lengths: tuple[int, ...], dtypes: tuple[str, ...], paths: tuple[str, ...], as_json: bool) -> None:
    """Relative-position buckets: distances whose bucket flips in a number format.

    For every distance 0..L-1 the bucket each code path computes is compared
    with the exact bucket: flipped = distances whose bucket differs (keys
    after the query mirror keys before it: they flip alike), 1st flip = the
    smallest, max shift = the largest bucket difference, undefined = distances
    whose value overflowed (inf/nan) before the cast to an index.

    Example: precision-audit relative --scheme t5 -l 2K -d bf16 -r lowp
    """
    from ..relative import audit_relative

    rows = audit_relative(scheme, paths, lengths, dtypes, bidirectional=bidirectional, num_buckets=num_buckets,
                          max_distance=max_distance)
    emit("relative", rows, as_json, RELATIVE_COLUMNS)
