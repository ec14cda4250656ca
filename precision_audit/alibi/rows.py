"""The rows of an ALiBi audit: per head (:class:`HeadRow`) and per context length (:class:`AlibiRow`)."""

from __future__ import annotations

from dataclasses import dataclass

from ..rows import Row
from ..verdicts import alibi_verdict
from .recipes import FORMS

__all__ = ["AlibiRow", "HeadRow"]


@dataclass(frozen=True)
class HeadRow(Row):
    """Metrics of one head at one context length.

    * ``slope``: the float64 reference slope; ``stored_slope``: the one used.
    * ``distinct_biases``: different stored values among the ``length``
      biases (all NaNs count as one value).
    * ``max_run``: most consecutive keys (adjacent positions or distances)
      sharing one stored bias.
    * ``max_abs_error``: largest ``|stored - slope * k|`` (float64 reference
      bias); ``inf`` if any bias is inf or NaN.
    * ``order_inversions``: adjacent pairs ``(k, k+1)`` whose stored
      magnitudes satisfy ``m[k+1] < m[k]`` although the exact ones increase,
      i.e. a key one step farther from the query is penalised strictly less.
      Pairs with a NaN are not ordered and are not counted (see
      ``nonfinite_biases``).  Every stage is a monotone rounding, so presets
      give 0: rounding merges neighbours, it never swaps them.
    * ``nonfinite_biases``: biases that overflowed to inf or NaN.
    * ``max_prob_change``: for the query at ``length - 1`` with equal content
      scores (logits = bias only), ``max_j |p_j - q_j|`` where ``p`` is the
      softmax of the stored bias and ``q`` of the float64 reference bias, both
      evaluated in float64; NaN if the softmax is undefined (a ``+inf`` or NaN
      bias, as torch would give).
    """

    head: int
    slope: float
    stored_slope: float
    distinct_biases: int
    max_run: int
    max_abs_error: float
    order_inversions: int
    nonfinite_biases: int
    max_prob_change: float

    def __post_init__(self) -> None:
        if self.head < 0:
            raise ValueError(f"head {self.head} must be >= 0")
        if self.distinct_biases < 1 or self.max_run < 1:
            raise ValueError(f"distinct_biases {self.distinct_biases} and max_run {self.max_run} must be >= 1")


@dataclass(frozen=True)
class AlibiRow(Row):
    """ALiBi metrics of one (recipe, dtype, length): per head and summarised.

    ``dtype`` is the model dtype asked for, ``bias_dtype`` the format the
    bias is stored in (float32 for the ``fp32`` recipe).  Summary over heads:
    ``min_distinct_biases`` (and ``distinct_fraction`` = it / length),
    ``max_run``, ``max_abs_error`` and ``max_prob_change`` (maxima; NaN if any
    head's is NaN), ``order_inversions`` and ``nonfinite_biases`` (totals).
    """

    recipe: str
    dtype: str
    bias_dtype: str
    form: str
    length: int
    num_heads: int
    min_distinct_biases: int
    distinct_fraction: float
    max_run: int
    max_abs_error: float
    order_inversions: int
    nonfinite_biases: int
    max_prob_change: float
    heads: tuple[HeadRow, ...]

    @property
    def verdict(self) -> str:
        """safe / degraded / broken by :func:`precision_audit.verdicts.alibi_verdict` (its default tolerance)."""
        return alibi_verdict(self)

    def __post_init__(self) -> None:
        if self.form not in FORMS:
            raise ValueError(f"form {self.form!r} is not one of {', '.join(FORMS)}")
        if len(self.heads) != self.num_heads:
            raise ValueError(f"heads holds {len(self.heads)} entries for num_heads={self.num_heads}")
        if not 1 <= self.min_distinct_biases <= self.length:
            raise ValueError(f"min_distinct_biases {self.min_distinct_biases} not in 1..{self.length}")


# the names before the rows were named *Row (kept for existing code)
AlibiAudit = AlibiRow
HeadAudit = HeadRow
