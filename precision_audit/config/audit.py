"""Verdicts and the audit of a parsed model: every code path per dtype and length (rules in :mod:`precision_audit.config`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..checks import ArgumentTypeError, check_callable, check_choice, check_flag, check_lengths, check_names, describe
from ..rows import Row, plain
from ..formats import get_format
from ..verdicts import (DEFAULT_TOLERANCE, PHASE_LOST, VERDICT_RULES, VERDICTS, alibi_verdict, positions_verdict,
                        rope_verdict, rope_why, sinusoid_verdict)
from .parse import CONTEXT_KEYS, ModelConfig

if TYPE_CHECKING:
    from ..rope import PairError

__all__ = [
    "DEFAULT_TOLERANCE",
    "PHASE_LOST",
    "VERDICTS",
    "VERDICT_RULES",
    "COMPONENTS",
    "ConfigRow",
    "FALLBACK_CONTEXT",
    "alibi_verdict",
    "audit_config",
    "context_note",
    "default_dtype",
    "default_lengths",
    "model_paths",
    "MATMUL_PRECISIONS",
    "model_stacks",
    "positions_verdict",
    "rope_verdict",
    "sinusoid_verdict",
    "stack_notes",
    "training_differences",
    "window_distances",
    "work_to_scan",
]


COMPONENTS: tuple[str, ...] = ("rope", "alibi", "positions", "relative", "learned")
# The decision rule lives in precision_audit.verdicts; these names stay importable from here.
# --------------------------------------------------------------------------- audit


@dataclass(frozen=True)
class ConfigRow(Row):
    """One code path of a model at one dtype and context length, with its verdict.

    ``component``: ``rope`` (``recipe`` a RoPE preset or a stack, ``stack``
    the stack's name for a stack row, ``layer_type`` the schedule's layer type), ``alibi`` (an ALiBi recipe) or ``positions``
    (position ids cast to ``dtype``).  ``colliding_positions``: positions whose
    cos/sin row (rope), id (positions) or bias (alibi, worst head) equals the
    previous one's.  RoPE metrics in rad; ``ratio`` = max rotation error / the
    cache format's rounding bound.  ALiBi metrics: ``min_distinct_biases``,
    ``max_run``, ``max_abs_error``, ``max_prob_change``; positions:
    ``max_run``, ``max_abs_error``, ``non_finite``; relative buckets (``relative``, T5 / DeBERTa; ``layer_type``
    encoder or decoder): ``changed`` distances 0..L-1 whose bucket differs from the exact one, ``first_changed``,
    ``max_shift`` (buckets); relative sinusoids (``relative``, XLNet): ``changed`` distances sharing a stored
    row, ``max_abs_error``; learned ids (``learned``): ``changed`` wrong ids, ``first_changed``,
    ``colliding_positions`` tokens sharing an id, ``max_abs_error``.  A row measured against another stack
    (:func:`training_differences`) names it in ``reference``: its rotation errors are then differences from
    that stack's stored cos/sin.  ``max_distance``: set when the layers of the row's layer type attend no further
    back than the length (a sliding window, Llama 4's chunks): its pairs, and so its verdict, are judged at
    distances up to it (:meth:`~precision_audit.config.layers.LayerFacts.max_distance`).  Absent metrics are None.  ``pair_errors`` (rope rows): the pairwise rotation
    errors at distances D (:class:`~precision_audit.rope.PairError`), which the verdict judges
    (:mod:`precision_audit.verdicts`).  ``bound``: set for a path that runs CUDA fast-math intrinsics, whose
    figures are upper bounds (:mod:`precision_audit.rope.cuda`).  ``source``: the auditor's own row the
    figures come from (a :class:`~precision_audit.rope.RopeRow`, ``AlibiRow``, ``PositionRow``, ...; not compared,
    not in :meth:`to_dict`), for callers that draw more of it (the report's figures).
    """

    component: str
    recipe: str
    dtype: str
    length: int
    verdict: str
    layer_type: str | None = None
    max_rotation_error: float | None = None
    mean_rotation_error: float | None = None
    colliding_positions: int | None = None
    cache_bound: float | None = None
    ratio: float | None = None
    min_distinct_biases: int | None = None
    max_run: int | None = None
    max_abs_error: float | None = None
    max_prob_change: float | None = None
    non_finite: int | None = None
    stack: str | None = None
    changed: int | None = None
    first_changed: int | None = None
    max_shift: int | None = None
    reference: str | None = None
    pair_errors: tuple[PairError, ...] = ()
    why: str | None = None
    bound: str | None = None
    max_distance: int | None = None
    source: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.component not in COMPONENTS:
            raise ValueError(f"component {self.component!r} must be one of {', '.join(COMPONENTS)}")
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} must be one of {', '.join(VERDICTS)}")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data, without :attr:`source` (the auditor's row has its own ``to_dict``)."""
        out = plain(dataclasses.asdict(dataclasses.replace(self, source=None)))
        del out["source"]
        return out  # type: ignore[no-any-return]


FALLBACK_CONTEXT = 2048
"""The context audited when a config declares none (BLOOM's config.json): the pretraining context of GPT-3,
OPT, BLOOM and LLaMA-1, the shortest in common use, so the audit starts where those models ran."""
LONG_CONTEXT = 2**22
"""Above this declared context (4M; Llama 4 Scout declares 10M) the default audit is the context alone: 2x and 4x
would scan six times as many positions (give lengths to choose)."""


def default_lengths(model: ModelConfig) -> tuple[int, ...]:
    """The model's context and 2x, 4x (context extension); :data:`FALLBACK_CONTEXT` when it declares none
    (:func:`context_note` says so); learned absolute positions: the context alone (the table ends there).

    >>> from precision_audit.config import load_config_dict
    >>> default_lengths(load_config_dict({"model_type": "llama", "head_dim": 128, "max_position_embeddings": 4096}))
    (4096, 8192, 16384)
    >>> default_lengths(load_config_dict({"model_type": "bloom", "n_head": 32}))
    (2048, 4096, 8192)
    >>> default_lengths(load_config_dict({"model_type": "gpt2", "n_positions": 1024}))
    (1024,)
    """
    L = model.max_position_embeddings or FALLBACK_CONTEXT
    if model.kind == "learned" and model.max_position_embeddings:
        return (L,)  # a table of L learned positions has no row beyond them: nothing to extend
    if L > LONG_CONTEXT:
        return (L,)
    return (L, 2 * L, 4 * L)


def context_note(model: ModelConfig) -> str | None:
    """The note printed when the config declares no context length (None when it declares one).

    >>> from precision_audit.config import load_config_dict
    >>> print(context_note(load_config_dict({"model_type": "bloom", "n_head": 32})))
    the config declares no context length (max_position_embeddings, n_positions, seq_length, max_sequence_length, max_seq_len, model_max_length): audited at 2K, 4K, 8K (give --length to choose)
    """
    if model.max_position_embeddings is not None:
        if model.max_position_embeddings > LONG_CONTEXT and model.kind != "learned":
            return (f"context {model.max_position_embeddings} is above {LONG_CONTEXT}: audited at the context only "
                    "(2x and 4x would scan six times as many positions; give --length to choose)")
        return None
    lens = ", ".join(f"{n // 1024}K" for n in default_lengths(model))
    return (f"the config declares no context length ({', '.join(CONTEXT_KEYS)}): audited at {lens} "
            "(give --length to choose)")


def default_dtype(model: ModelConfig) -> str:
    """The dtype the model runs in: its config's ``torch_dtype`` (canonical name), bfloat16 when it names none.

    >>> from precision_audit.config import load_config_dict
    >>> default_dtype(load_config_dict({"model_type": "llama", "head_dim": 64, "torch_dtype": "float16"}))
    'float16'
    >>> default_dtype(load_config_dict({"model_type": "llama", "head_dim": 64}))
    'bfloat16'
    """
    name = str(model.torch_dtype or "bfloat16").replace("torch.", "")
    try:
        return get_format(name).name
    except ValueError:
        raise ValueError(f"{model.source or model.name}: torch_dtype {model.torch_dtype!r} is not a number format; "
                         "give the dtype to audit (--dtype)") from None


GGUF_STACKS: tuple[str, ...] = ("llama.cpp-cpu", "llama.cpp-cuda")
"""The stacks a GGUF file runs on (llama.cpp's): the default stacks of a model read from one."""


MATMUL_PRECISIONS: tuple[str, ...] = ("highest", "high")
"""torch.set_float32_matmul_precision values ``config`` takes: "high" adds the stacks whose float32 angle GEMM
runs in TF32 (:func:`precision_audit.rope.setting_stacks`)."""


def model_stacks(model: ModelConfig, stacks: Sequence[str] | None = None,
                 matmul_precision: str = "highest") -> tuple[list[str], list[str]]:
    """The stacks to audit a model on, and why the others were left out.

    ``stacks``: names of :data:`precision_audit.rope.STACKS` (``all``: every
    stack that runs each of the model's rope types); default: every stack
    that runs the model, or llama.cpp's for a model read from a GGUF file.
    A stack that does not run one of the model's rope types is left out with
    its reason, named or not (one stack never stops the audit of the others);
    an unknown name raises ValueError.  An ALiBi model has none (naming one
    raises ValueError).  ``matmul_precision="high"`` adds the stacks that run
    the rotary GEMM in TF32 under it (``transformers-tf32``, ``transformers-tl-dot``).

    >>> from precision_audit.config import load_config_dict
    >>> m = load_config_dict({"model_type": "llama", "head_dim": 64, "rope_scaling": {"rope_type": "dynamic",
    ...                       "factor": 2.0}, "max_position_embeddings": 4096})
    >>> names, skipped = model_stacks(m)
    >>> names, len(skipped)
    (['transformers', 'transformers-cast', 'vllm', 'openvino', 'openvino-fixed', 'liger'], 15)
    >>> model_stacks(m, ["transformers"], matmul_precision="high")[0]
    ['transformers', 'transformers-tf32', 'transformers-tl-dot']
    """
    from ..rope import select_stacks, setting_stacks

    check_choice(matmul_precision, "matmul_precision", MATMUL_PRECISIONS)
    if model.kind != "rope":
        if stacks:
            raise ValueError(f"stacks model RoPE code paths; {model.name} uses {model.kind}")
        return [], []
    asked = list(stacks) if stacks else list(GGUF_STACKS if model.origin == "gguf" else ("all",))
    if matmul_precision == "high":
        asked += setting_stacks("matmul-precision-high")
    return select_stacks(asked, [s.scaling for _, s in model.rope], strict=False)


def stack_notes(model: ModelConfig, stacks: Sequence[str]) -> dict[str, tuple[str, str | None]]:
    """Per stack that runs another schedule than the model declares: (what differs, the fix), for
    :func:`precision_audit.bottomline.bottom_line`'s ``notes``.

    >>> from precision_audit.config import load_config_dict
    >>> oss = load_config_dict({"model_type": "gpt_oss", "head_dim": 64, "rope_theta": 150000,
    ...     "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
    ...                      "original_max_position_embeddings": 4096, "truncate": False}})
    >>> print(stack_notes(oss, ["vllm", "llama.cpp-cpu"])["llama.cpp-cpu"][0])
    runs another schedule: rounds YaRN's ramp bounds to whole dims (8, 18); the config declares 8.0928, 17.3980 (truncate=false)
    """
    from ..rope import STACKS

    out: dict[str, tuple[str, str | None]] = {}
    for name in stacks:
        row = STACKS[name]
        found = [(t, m) for t, s in model.rope if (m := row.runs_other_schedule(s))]
        if found:
            what = "; ".join(m if t == "all" else f"{t}: {m}" for t, m in dict(found).items())
            out[name] = (f"runs another schedule: {what}", row.mismatch_fix)
    return out


def model_paths(model: ModelConfig) -> tuple[str, ...]:
    """Every code path the audit of a model's kind knows (RoPE presets, ALiBi recipes, bucket / sinusoid /
    learned-id paths).

    >>> from precision_audit.config import load_config_dict
    >>> model_paths(load_config_dict({"model_type": "t5"}))
    ('transformers', 'lowp', 'cast-distance', 'lowp-eager')
    """
    if model.kind == "rope":
        from ..rope import PRESETS

        return tuple(PRESETS)
    if model.kind == "alibi":
        from ..alibi import RECIPES

        return tuple(RECIPES)
    from ..relative import LEARNED_PATHS, PATHS, SINUSOID_PATHS

    return LEARNED_PATHS if model.kind == "learned" else SINUSOID_PATHS if model.scheme == "xlnet" else PATHS


def _recipe_names(model: ModelConfig, recipes: Sequence[str] | None) -> list[str]:
    """The code paths asked for (default: all of the model's kind), validated."""
    table = model_paths(model)
    what = {"rope": "RoPE recipe", "alibi": "ALiBi recipe"}.get(model.kind, f"{model.scheme or model.kind} path")
    names = list(recipes) if recipes else list(table)
    bad = [r for r in names if r not in table]
    if bad:
        raise ValueError(f"unknown {what} {bad[0]!r}; valid: {', '.join(table)}")
    return names


def work_to_scan(model: ModelConfig, lengths: Iterable[int], dtypes: Sequence[str],
                 recipes: Sequence[str] | None = None, stacks: Sequence[str] | None = None) -> int:
    """Positions :func:`audit_config` reports to ``progress`` (RoPE: per schedule one pass serves every preset and
    dtype, one more every stack; ALiBi: two passes per recipe and dtype).

    >>> from precision_audit.config import load_config_dict
    >>> work_to_scan(load_config_dict({"model_type": "llama", "head_dim": 64}), [1024, 4096], ["bf16", "fp16"])
    4096
    """
    lens = check_lengths(lengths)
    n = len(dict.fromkeys(get_format(d).name for d in dtypes))
    if model.kind == "alibi":
        return 2 * lens[-1] * n * len(_recipe_names(model, recipes))
    if model.kind != "rope":
        return 0  # relative buckets and learned ids: closed-form sweeps, no progress to report
    from ..rope import positions_to_scan

    passes = (1 if not stacks or recipes is not None else 0) + (1 if stacks else 0)  # presets, stacks
    return sum(positions_to_scan(s, lens) for _, s in model.rope) * passes


def _names_or_none(value: Any, name: str) -> list[str] | None:
    """None, one name, or an iterable of names (possibly empty) -> None or a list of names."""
    if value is None:
        return None
    items = check_names(value, name, "name", empty=True)
    bad = next((n for n in items if not isinstance(n, str)), None)
    if bad is not None:
        raise ArgumentTypeError(f"{name} holds {describe(bad)}, not a name")
    return items


def audit_config(
    model: ModelConfig,
    lengths: int | Iterable[int] | None = None,
    dtypes: Sequence[str] = ("bfloat16", "float16"),
    *,
    recipes: Sequence[str] | None = None,
    stacks: Sequence[str] | None = None,
    engine: str = "numpy",
    tolerance: float = DEFAULT_TOLERANCE,
    positions: bool = True,
    progress: Callable[[int], None] | None = None,
    distances: int | Iterable[int] | None = None,
) -> list[ConfigRow]:
    """Audit every code path of a model: rows per dtype, length, then component, recipes and stacks.

    RoPE models: the RoPE presets (``recipes``; all when neither recipes nor
    ``stacks`` are given) and the inference stacks (``stacks``, names of
    :data:`precision_audit.rope.STACKS`; a stack that does not run a layer's
    rope type raises ValueError) of each layer type's schedule, in one pass
    per schedule for every dtype; ALiBi models: the ALiBi recipes (default
    all) with the reference slopes; plus (``positions``) the position ids cast
    to each dtype.  ``lengths`` default to :func:`default_lengths`.
    ``engine`` as for the rope and positions auditors (stacks and ALiBi run numpy).
    RoPE lengths above 2**26 raise ValueError (the oracle's limit).  ``distances``:
    the pair distances of the RoPE rows, as :func:`precision_audit.rope.audit` takes them.
    """
    if not isinstance(model, ModelConfig):
        raise ArgumentTypeError(f"model {describe(model)} must be a ModelConfig (load_model or load_config_dict "
                                "reads one)")
    if not isinstance(tolerance, (int, float)) or isinstance(tolerance, bool) or not tolerance > 0:
        raise ValueError(f"tolerance {tolerance!r} must be a number > 0")
    engine = check_choice(engine, "engine", ("numpy", "torch"))
    positions = check_flag(positions, "positions")
    progress = check_callable(progress, "progress")
    recipes, stacks = _names_or_none(recipes, "recipes"), _names_or_none(stacks, "stacks")
    lens = check_lengths(default_lengths(model) if lengths is None else lengths)
    fmts = list(dict.fromkeys(get_format(d).name for d in check_names(dtypes, "dtypes", "format name")))
    if stacks and model.kind != "rope":
        raise ValueError(f"{model.name}: stacks model RoPE code paths; this model uses {model.kind}")
    rows: list[ConfigRow] = []
    names = [] if stacks and recipes is None else _recipe_names(model, recipes)
    if model.kind == "rope":
        rows += _rope_rows(model, lens, fmts, names, list(stacks or ()), engine, progress, distances)
    elif model.kind == "alibi":
        rows += _alibi_rows(model, lens, fmts, names, tolerance, progress)
    else:
        rows += _table_rows(model, lens, fmts, names)
        positions = False  # the learned-id and bucket audits are about the position ids themselves
    if positions:
        from ..positions import audit_positions

        for p in audit_positions(lens, fmts, engine="torch" if engine == "torch" else "numpy"):
            rows.append(ConfigRow(
                component="positions", recipe="position ids", dtype=p.dtype, length=p.length,
                verdict=p.verdict, colliding_positions=p.colliding_positions,
                max_run=p.max_run, max_abs_error=p.max_abs_error, non_finite=p.non_finite, source=p))
    order = {"rope": 0, "alibi": 0, "relative": 0, "learned": 0, "positions": 1}
    layer_rank = {t: i for i, (t, _) in enumerate(model.rope)}
    rec_rank = {n: i for i, n in enumerate([*names, *(stacks or ())])}
    rows.sort(key=lambda r: (fmts.index(r.dtype), r.length, order[r.component],
                             layer_rank.get(r.layer_type or "all", 0), rec_rank.get(r.recipe, 0)))
    return rows


def _rope_rows(model: ModelConfig, lens: tuple[int, ...], fmts: Sequence[str], names: Sequence[str],
               stacks: Sequence[str], engine: str, progress: Callable[[int], None] | None,
               distances: int | Iterable[int] | None = None) -> list[ConfigRow]:
    """Every preset and stack of every dtype, one audit (one pass) per layer type's schedule."""
    from ..rope import audit, check_rope_lengths

    check_rope_lengths(lens)
    rows = []
    for layer_type, s in model.rope:
        lt = None if layer_type == "all" else layer_type
        reach = None if model.layers is None else model.layers.max_distance(layer_type)
        reach = reach if reach is not None and reach < max(lens) - 1 else None
        ds = distances if reach is None else window_distances(reach, lens, distances)
        found = []
        if names:
            found += audit(s, names, lens, fmts, progress=progress, engine=engine, distances=ds)
        if stacks:  # a stack's hows are modelled by the numpy engine (its kernels are not torch's)
            found += audit(s, stacks, lens, fmts, progress=progress, distances=ds)
        for r in found:
            rows.append(ConfigRow(
                component="rope", recipe=r.recipe, dtype=r.dtype, length=r.length, layer_type=lt,
                verdict=r.verdict, why=_bounded(r.lost, r.bound),
                max_rotation_error=r.max_rotation_error, mean_rotation_error=r.mean_rotation_error,
                colliding_positions=r.colliding_positions, cache_bound=r.cache_bound,
                ratio=r.max_rotation_error / r.cache_bound, stack=r.stack, pair_errors=r.pair_errors,
                bound=r.bound, max_distance=reach if reach is not None and reach < r.length - 1 else None,
                source=r))
    return rows


def window_distances(reach: int, lengths: Sequence[int], distances: int | Iterable[int] | None = None
                     ) -> tuple[int, ...]:
    """The pair distances that layers attending at most ``reach`` back are judged on: the asked ``distances``
    up to ``reach`` (``reach`` itself when none is), or the defaults of :func:`~precision_audit.rope.pairs.
    row_distances` up to ``reach`` plus ``reach`` (and, for lengths the window covers, their own defaults).

    >>> window_distances(1023, [32768, 131072])  # Gemma 3's sliding layers: window 1024
    (1, 16, 256, 1023)
    >>> window_distances(1023, [32768], [16, 4096])
    (16,)
    """
    from ..rope.pairs import DEFAULT_DISTANCES, check_distances

    lens = check_lengths(lengths)
    asked = check_distances(distances, lens)
    if asked is not None:
        return tuple(d for d in asked if d <= reach) or (reach,)
    out = {d for d in DEFAULT_DISTANCES if d <= reach} | {reach}
    out |= {min(d, L - 1) for L in lens if L - 1 <= reach for d in (*DEFAULT_DISTANCES, L // 2)}
    return tuple(sorted(out - {0}))


def _bounded(why: str | None, bound: str | None) -> str | None:
    """A row's why, said to be an upper bound where the row is one (CUDA fast math)."""
    return f"an upper bound, CUDA fast math: {why}" if why and bound else why


def training_differences(model: ModelConfig, stacks: Sequence[str], trained_on: str, lengths: Iterable[int],
                         dtypes: Sequence[str]) -> list[ConfigRow]:
    """Each of ``stacks`` against the stack the model was trained on (``trained_on``): per layer type, dtype and
    length, the rotation difference between their stored cos/sin (:func:`precision_audit.rope.compare.
    stack_difference`), judged as a rotation error against the stored format's bound.  ValueError when
    ``trained_on`` does not run the model's rope types.

    >>> from precision_audit.config import load_config_dict
    >>> m = load_config_dict({"model_type": "llama", "head_dim": 64, "max_position_embeddings": 4096})
    >>> [(r.recipe, r.reference, r.max_rotation_error) for r in training_differences(m, ["vllm"], "transformers",
    ...                                                                                  [4096], ["bf16"])]
    [('vllm', 'transformers', 0.0)]
    >>> r = training_differences(m, ["vllm"], "torchtune", [4096], ["bf16"])[0]  # torchtune keeps float32 cos/sin
    >>> 0 < r.max_rotation_error <= r.cache_bound, r.verdict
    (True, 'safe')
    """
    from ..rope import select_stacks, stack, stored_bound
    from ..rope.compare import stack_difference

    select_stacks([trained_on], [s.scaling for _, s in model.rope])  # the training stack must run the model
    rows = []
    for layer_type, s in model.rope:
        for d in dict.fromkeys(get_format(x).name for x in dtypes):
            recs = [stack(n, d, s) for n in stacks if n != trained_on]
            if not recs:
                continue
            bounds = {r.name: stored_bound(r, s.cos_sin_scale) for r in recs}
            for r in stack_difference(s, recs, stack(trained_on, d, s), lengths):
                bound = bounds[r.path]
                rows.append(ConfigRow(
                    component="rope", recipe=r.path, dtype=d, length=r.length, stack=r.path, reference=trained_on,
                    layer_type=None if layer_type == "all" else layer_type,
                    verdict=rope_verdict(r.max_rotation_difference, 0),
                    why=_bounded(rope_why(r.max_rotation_difference, 0), r.bound),
                    max_rotation_error=r.max_rotation_difference, mean_rotation_error=r.mean_rotation_difference,
                    cache_bound=bound, ratio=r.max_rotation_difference / bound, bound=r.bound, source=r))
    return rows


def _table_rows(model: ModelConfig, lens: tuple[int, ...], fmts: Sequence[str],
                names: Sequence[str]) -> list[ConfigRow]:
    """Relative buckets (T5: the encoder's bidirectional and the decoder's causal ones), relative sinusoids or
    learned position ids, per path, dtype and length (:mod:`precision_audit.relative`)."""
    from ..relative import audit_learned, audit_relative, audit_relative_sinusoid

    p = dict(model.scheme_params)
    rows = []
    if model.kind == "learned":
        for r in audit_learned(names, lens, fmts):
            rows.append(ConfigRow(component="learned", recipe=r.path, dtype=r.dtype, length=r.length,
                                  verdict=r.verdict, changed=r.wrong, first_changed=r.first_wrong,
                                  colliding_positions=r.collided, max_abs_error=float(r.max_error), source=r))
    elif model.scheme == "xlnet":
        for x in audit_relative_sinusoid(p["d_model"], names, lens, fmts, attn_type=p["attn_type"]):
            rows.append(ConfigRow(component="relative", recipe=x.path, dtype=x.dtype, length=x.klen,
                                  verdict=sinusoid_verdict(x.duplicate_rows, x.nn_shrink), changed=x.duplicate_rows,
                                  max_abs_error=x.max_abs_error, source=x))
    else:
        sides = ((True, "encoder"), (False, "decoder")) if model.scheme == "t5" else ((True, None),)
        for bidirectional, side in sides:
            for r in audit_relative(model.scheme, names, lens, fmts, bidirectional=bidirectional,  # type: ignore[arg-type]
                                    num_buckets=p["num_buckets"], max_distance=p["max_distance"]):
                rows.append(ConfigRow(component="relative", recipe=r.path, dtype=r.dtype, length=r.length,
                                      layer_type=side, verdict=r.verdict, changed=r.flipped,
                                      first_changed=r.first_flip, max_shift=r.max_shift, source=r))
    return rows


def _alibi_rows(model: ModelConfig, lens: tuple[int, ...], fmts: Sequence[str], names: Sequence[str],
                tolerance: float, progress: Callable[[int], None] | None) -> list[ConfigRow]:
    """Every ALiBi recipe of every dtype with the model's head count and slopes (MPT's own, else the reference
    rule)."""
    from ..alibi import audit_alibi

    return [ConfigRow(component="alibi", recipe=a.recipe, dtype=a.dtype, length=a.length,
                      verdict=alibi_verdict(a, tolerance), colliding_positions=a.length - a.min_distinct_biases,
                      min_distinct_biases=a.min_distinct_biases, max_run=a.max_run,
                      max_abs_error=a.max_abs_error, max_prob_change=a.max_prob_change,
                      non_finite=a.nonfinite_biases, source=a)
            for a in audit_alibi(int(model.num_heads), names, lens, fmts, slopes=model.alibi_slopes(),
                                 progress=progress)]  # type: ignore[arg-type]


