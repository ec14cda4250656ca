"""The scan: every position callable found in a target, built, called in each mode under the tracer, with a
verdict per output kind, the op and ``file:line`` where the loss enters, and the fix.

Modes (:data:`MODES`): ``float32`` (as built, float32 vectors), ``bfloat16-inputs`` and ``float16-inputs``
(float32 buffers, vectors in the narrow dtype: what autocast and a bf16 pipeline do; only for calls that take
vectors), ``cast-bfloat16`` (a fresh instance after ``.to(torch.bfloat16)``, bf16 vectors; only for classes).
Every mode is held against the float64 shadows of the ``float32`` run: an ``inv_freq`` that the cast rounded is
found although the cast module's own shadow computes from the rounded values.  Where the verdict is degraded or
broken, :func:`precision_audit.trace.trace` names the op (or the downcast operand) where the loss enters.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..checks import ArgumentTypeError, check_callable, check_flag, check_int, describe
from ..rows import Row
from ..trace import MAX_TRACE_LENGTH, run_traced
from ..trace import trace as trace_code
from ..trace.report import op_fix, tf32_gemms
from ..verdicts import VERDICTS, worst
from .build import DIM, HEADS, CallPlan, build_instance, call_plans, parse_arg, position_methods
from .discover import Candidate, candidates, load_target_modules
from .verdict import output_verdict

__all__ = ["MAX_VALUES", "MODES", "ScanFinding", "scan"]

MODES = ("float32", "bfloat16-inputs", "float16-inputs", "cast-bfloat16")
_DTYPES = {"float32": "float32", "bfloat16-inputs": "bfloat16", "float16-inputs": "float16",
           "cast-bfloat16": "bfloat16"}
_CAST_FIX = "keep the frequencies float32 through the cast (precision_audit.fix.keep_rotary_fp32(model) before " \
            "model.to(dtype)), cast only the final cos/sin"
_PROBE = 16
MAX_VALUES = 2**25
"""The most values a call may return at the scan's length (estimated from its outputs at 16 and 32 positions, as
the power of the positions they grow by: :func:`_estimate`): each has a float64 shadow, and a scan calls many
callables."""
_NOTHING = "nothing to judge"


@dataclass(frozen=True)
class ScanFinding(Row):
    """One callable, call and mode of a scan (``status`` ``scanned``), or a callable (or module) that could not
    be built, called or imported (``status`` ``skipped``, ``reason`` why; ``mode`` ``-``).

    ``verdict``: the worst of its outputs' verdicts (:mod:`precision_audit.scan.verdict`), ``kind`` and ``why``
    that output's; ``op`` and ``where`` (``file:line``): where the loss enters (degraded / broken only), ``fix``
    the fix; ``error``: that output's largest error (radians for angles, cos/sin and rotations; the value's
    otherwise); ``defined``: ``file:line`` of the callable's definition; ``evidence``: why it was picked;
    ``tf32_gemms``: each float32 GEMM on a position-derived tensor (``op at file:line``), which tensor-core GPUs
    run in TF32 under ``set_float32_matmul_precision('high')`` (positions exact only to 2048): the flag ``trace``
    gives (:func:`precision_audit.trace.report.tf32_gemms`); on a CPU it computes in float32, so the verdict does
    not show it.  ``note``: how the callable's module was loaded where that is not how Python imports it (a file
    whose packages' ``__init__`` does not import, loaded without running it: why), else empty.
    """

    module: str
    callable: str
    call: str
    mode: str
    status: str
    length: int
    verdict: str | None = None
    kind: str | None = None
    why: str | None = None
    op: str | None = None
    where: str | None = None
    fix: str | None = None
    error: float | None = None
    reason: str = ""
    defined: str = ""
    evidence: tuple[str, ...] = ()
    tf32_gemms: tuple[str, ...] = ()
    note: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.status, str) or self.status not in ("scanned", "skipped"):
            raise ValueError(f"status {self.status!r} must be scanned or skipped")
        if self.verdict is not None and (not isinstance(self.verdict, str) or self.verdict not in VERDICTS):
            raise ValueError(f"verdict {self.verdict!r} must be one of {', '.join(VERDICTS)}")


class _Bound:
    """A callable a trace can name buffers of: ``fn`` (a bound method, a constructor) with ``owner``'s buffers;
    when ``fn`` returns None, the owner's floating buffers are its outputs (a method that fills a cache)."""

    def __init__(self, fn: Callable[..., Any], owner: Any, label: str, sig: inspect.Signature | None) -> None:
        self.fn, self.owner, self.__qualname__ = fn, owner, label
        if sig is not None:
            self.__signature__ = sig

    def named_buffers(self) -> Iterable[tuple[str, Any]]:
        return self.owner.named_buffers() if hasattr(self.owner, "named_buffers") else iter(())

    def named_parameters(self) -> Iterable[tuple[str, Any]]:
        return self.owner.named_parameters() if hasattr(self.owner, "named_parameters") else iter(())

    def __call__(self, **kwargs: Any) -> Any:
        out = self.fn(**kwargs)
        if out is None and hasattr(self.owner, "named_buffers"):
            return tuple(b for _, b in self.owner.named_buffers() if b.is_floating_point() or b.is_complex())
        return out


def _np(t: Any) -> Any:
    import torch

    t = t.detach()
    if t.is_complex():
        return t.to(torch.complex128).numpy()
    return t.to(torch.float64).numpy() if t.is_floating_point() else t.numpy()


def _verdicts(traced: Any, ref: list[Any], n: int, x_shape: tuple[int, ...] | None, hint: str) -> dict[str, Any]:
    """The worst output's verdict (``{"kind", "verdict", "error", "why"}``), held against ``ref`` shadows."""
    import torch

    pairs = [(o, s) for o, s in zip(traced.outputs, ref) if s is not None and isinstance(s, torch.Tensor)
             and s.shape == o.shape and o.dtype != torch.bool and any(d and d % n == 0 for d in o.shape)]
    # only outputs indexed by position (a cos/sin table, not an inv_freq buffer)
    found, used = [], set()
    for i, (o, s) in enumerate(pairs):
        if i in used:
            continue
        rotated = x_shape is not None and tuple(o.shape) == tuple(x_shape)
        partner = None
        if not rotated and o.is_floating_point() and i + 1 < len(pairs) and pairs[i + 1][0].shape == o.shape \
                and float(s.abs().max()) <= 1 and float(pairs[i + 1][1].abs().max()) <= 1:
            partner = (_np(pairs[i + 1][0]), _np(pairs[i + 1][1]))
            used.add(i + 1)
        found.append(output_verdict(_np(o), _np(s), n, dtype=str(o.dtype).removeprefix("torch."), hint=hint,
                                    partner=partner, rotated=rotated))
    if not found:
        return {}
    top = worst([f["verdict"] for f in found])
    return max((f for f in found if f["verdict"] == top), key=lambda f: f["error"])


def _locate(fn: Any, inputs: dict[str, Any], plan: CallPlan, mode: str, traced: Any) -> tuple[str, str, str]:
    """(op, file:line, fix) where the loss enters: trace's culprit, else a downcast operand, else the first op
    that lost a position."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = trace_code(fn, 1, dtype="float32", inputs=dict(inputs), positions=plan.positions or ())
        ops = {o.index: o for o in r.ops}
        if r.culprits:
            c = r.culprits[0]
            return c.op, c.where, op_fix(c)
        narrow = [o for o in r.operands if o.downcast or (mode == "cast-bfloat16" and o.dtype == "bfloat16")]
        if narrow:  # a buffer the cast rounded, met as it is or copied back to float32
            o = narrow[0]
            first = ops.get(o.first_op)
            return f"operand {o.name} ({o.note})", first.where if first else "?", _CAST_FIX
    except ValueError:
        pass
    lost = [rec for rec in traced.records if rec.first_inexact is not None and rec.added > 0]
    if lost:
        return lost[0].op, lost[0].where, "build positions in int64 or float32; cast only the final output"
    if mode == "cast-bfloat16":
        return "module.to(bfloat16) rounds a buffer built from positions", "?", \
            "keep that buffer float32 through the cast (or build it from int64 positions in forward)"
    top = max(traced.records, key=lambda rec: rec.added)
    return top.op, top.where, f"run {top.op} in float32 and cast only the final output"


def _x_shapes(owner: Any, n: int) -> list[tuple[int, ...]]:
    dim = DIM
    for attr in ("head_dim", "dim", "rotary_dim", "embed_dim", "d_model"):
        v = getattr(owner, attr, None)
        if isinstance(v, int) and 1 < v <= 4096:
            dim = v
            break
    else:
        inv = getattr(owner, "inv_freq", None)
        if inv is not None and hasattr(inv, "numel"):
            dim = 2 * inv.numel()
    return [(1, n, HEADS, dim), (1, n, dim), (1, HEADS, n, dim), (n, dim)]


def _numel(out: Any) -> int:
    from torch.utils._pytree import tree_flatten

    return sum(t.numel() for t in tree_flatten(out)[0] if hasattr(t, "numel") and callable(t.numel))


def _probe(fn: Any, plan: CallPlan, owner: Any, small: CallPlan | None = None, double: CallPlan | None = None
           ) -> tuple[int | None, dict[str, tuple[int, ...]], int, int]:
    """The vector layout (an index into :func:`_x_shapes`) and the position shapes the callable accepts (tried
    at :data:`_PROBE` positions), how many values it returned there, and at twice as many positions (``double``:
    the plan there; the same count where that call raises or there is no such plan); ValueError with the last
    error when no layout works."""
    import itertools

    import torch

    xs: list[Any] = _x_shapes(owner, _PROBE) if plan.vectors else [None]
    options = [[(p, s) for s in (plan.pos_shapes.get(p) or [(_PROBE,)])] for p in plan.positions]
    last: Exception | None = None

    def call(n: int, chosen: CallPlan, i: int | None, combo: tuple) -> int:
        x = _x_shapes(owner, n)[i] if i is not None else (1,)
        shapes = {p: tuple(n if d == max(s) else d for d in s) for p, s in combo}  # at n positions
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return _numel(fn(**chosen.inputs(torch.float32, n, x, shapes)))

    for i, x in enumerate(xs):
        for combo in itertools.product(*options) if options else [()]:
            layout = i if x is not None else None
            try:
                size = call(_PROBE, small or plan, layout, combo)
            except Exception as e:  # the callable's own error: try the next layout
                last = e
                continue
            twice = size
            if double is not None:
                try:
                    twice = call(2 * _PROBE, double, layout, combo)
                except Exception:  # noqa: BLE001 - no second size: the estimate stays linear
                    pass
            return layout, {p: s for p, s in combo}, size, twice
    raise ValueError(f"every call layout raised; last: {type(last).__name__}: {' '.join(str(last).split())[:200]}")


def _estimate(size: int, twice: int, length: int) -> int:
    """The values a call returns at ``length`` positions from ``size`` at :data:`_PROBE` and ``twice`` at twice
    as many: growing as the observed power of the positions (at least linearly: a table of positions), so a
    call that returns a length x length mask or bias is estimated as one.

    >>> _estimate(16 * 64, 32 * 64, 8192), _estimate(16 * 16, 32 * 32, 8192)
    (524288, 67108864)
    """
    power = max(1.0, math.log2(twice / size)) if size > 0 and twice > size else 1.0
    return int(size * (length / _PROBE) ** power)


class _Scanner:
    def __init__(self, length: int, modes: tuple[str, ...], overrides: dict[str, Any], locate: bool) -> None:
        self.length, self.modes, self.overrides, self.locate = length, modes, overrides, locate
        self.rows: list[ScanFinding] = []

    def skip(self, c: Candidate, name: str, reason: str, call: str = "-") -> None:
        self.rows.append(ScanFinding(c.module, name, call, "-", "skipped", self.length, reason=reason,
                                     defined=c.where, evidence=c.evidence))

    def candidate(self, c: Candidate) -> None:
        if c.kind == "function":
            made = self.factory_output(c)
            if made is not None:  # a factory of a module (no required argument): scan the module it returns
                self.instance(c, made, c.obj, f"{c.name}()", {})
                return
            self.callable(c, c.name, lambda mode: (c.obj, None), c.obj)
            return
        if c.layers:
            self.skip(c, c.name, "holds layers (Linear, Conv, attention blocks): a model or a layer, not position "
                                 "code by itself; its position submodules are scanned on their own")
            return
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                inst, kwargs = build_instance(c.obj, self.length, self.overrides)
        except ValueError as e:
            self.skip(c, c.name, f"cannot build: {e}")
            return
        self.instance(c, inst, lambda: c.obj(**kwargs), f"{c.name}({', '.join(kwargs)})", kwargs)

    def factory_output(self, c: Candidate) -> Any:
        """The module a function with no required argument returns (None: it needs arguments, raises or
        returns something else)."""
        import torch

        try:
            sig = inspect.signature(c.obj)
        except (TypeError, ValueError):
            return None
        if any(p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
               for p in sig.parameters.values()):
            return None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                made = c.obj()
        except Exception:
            return None
        return made if isinstance(made, torch.nn.Module) else None

    def instance(self, c: Candidate, inst: Any, make: Callable[[], Any], label: str, kwargs: dict[str, Any]
                 ) -> None:
        """Scan a built module: its construction (positions made in ``__init__``) and its position methods."""
        def fresh(cast: bool) -> Any:
            if not cast:
                return inst
            import torch

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return make().to(torch.bfloat16)

        def construct(mode: str) -> tuple[Any, Any]:
            import torch

            def build() -> Any:
                m = make()
                if mode == "cast-bfloat16":
                    m = m.to(torch.bfloat16)
                return tuple(b for _, b in m.named_buffers() if b.is_floating_point() or b.is_complex())
            return build, None

        name = c.name if c.kind == "class" else f"{c.name}()"  # a factory's module: named by its factory
        self.run_plans(c, f"{name}.__init__", construct, [CallPlan(label, {})], owner=inst,
                       modes=tuple(m for m in ("float32", "cast-bfloat16") if m in self.modes))
        for meth in position_methods(type(inst)):
            def get(mode: str, meth: str = meth) -> tuple[Any, Any]:
                owner = fresh(mode == "cast-bfloat16")
                return getattr(owner, meth), owner
            self.callable(c, f"{name}.{meth}", get, getattr(inst, meth), owner=inst)

    def callable(self, c: Candidate, name: str, get: Callable[[str], tuple[Any, Any]], fn: Any,
                 owner: Any = None) -> None:
        try:
            plans = call_plans(fn, self.length, self.overrides, name.rsplit(".", 1)[-1])
        except ValueError as e:
            self.skip(c, name, str(e))
            return
        if not plans:
            self.skip(c, name, "no way to call it with positions (no position argument, and it needs one)")
            return
        modes = tuple(m for m in self.modes if owner is not None or m != "cast-bfloat16")
        small = call_plans(fn, _PROBE, self.overrides, name.rsplit(".", 1)[-1])  # the same plans at 16 positions
        double = call_plans(fn, 2 * _PROBE, self.overrides, name.rsplit(".", 1)[-1])  # and at 32: how it grows
        self.run_plans(c, name, get, plans, owner, modes, small if len(small) == len(plans) else None,
                       double if len(double) == len(plans) else None)

    def run_plans(self, c: Candidate, name: str, get: Callable[[str], tuple[Any, Any]], plans: list[CallPlan],
                  owner: Any, modes: tuple[str, ...], small: list[CallPlan] | None = None,
                  double: list[CallPlan] | None = None) -> None:
        for k, plan in enumerate(plans):
            fn0, own0 = get("float32")
            try:
                x_shape, pos_shapes, size, twice = _probe(
                    fn0, plan, own0 if own0 is not None else owner, small[k] if small else None,
                    double[k] if small and double else None) \
                    if (plan.vectors or plan.positions or small) else (None, {}, 0, 0)
            except ValueError as e:
                self.skip(c, name, f"cannot call: {e}", plan.label)
                continue
            estimate = _estimate(size, twice, self.length)
            if estimate > MAX_VALUES:  # it grows with the positions: estimated at length
                self.skip(c, name, f"returns {size} values at {_PROBE} positions"
                          + (f" and {twice} at {2 * _PROBE}" if twice != size else "")
                          + f", about {estimate} at {self.length}: more than {MAX_VALUES} to shadow in float64 "
                          "(give a smaller --length)", plan.label)
                continue
            x_shape = None if x_shape is None else _x_shapes(own0 if own0 is not None else owner, self.length)[x_shape]
            pos = {p: tuple(self.length if d == max(s) else d for d in s) for p, s in pos_shapes.items()}
            ref = None
            for mode in modes:
                if mode.endswith("-inputs") and not plan.vectors:
                    continue  # no vectors to give in another dtype: the float32 run already is this one
                before = len(self.rows)
                ref = self.one(c, name, plan, mode, get, x_shape, pos, ref)
                if mode == "float32" and self.rows[before].reason.startswith(_NOTHING):
                    if name.endswith(".__init__"):  # a constructor that builds nothing by position: no row
                        del self.rows[before:]
                    break  # no position op or output: the other modes would say the same

    def one(self, c: Candidate, name: str, plan: CallPlan, mode: str, get: Callable[[str], tuple[Any, Any]],
            x_shape: tuple[int, ...] | None, pos: dict[str, tuple[int, ...]], ref: list[Any] | None
            ) -> list[Any] | None:
        import torch

        base = dict(module=c.module, callable=name, call=plan.label, length=self.length, defined=c.where,
                    evidence=c.evidence)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fn, owner = get(mode)
                dtype = getattr(torch, _DTYPES[mode])
                inputs = plan.inputs(dtype, self.length, x_shape or (1,), pos)
                sig = _signature(fn)
                bound = _Bound(fn, owner, f"{c.module}.{name}", sig)
                traced = run_traced(bound, (), inputs, seeds=list(plan.positions),
                                    names=dict(bound.named_buffers()))
        except Exception as e:
            self.rows.append(ScanFinding(**base, mode=mode, status="skipped", reason=f"the call raised "
                                         f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"))
            return ref
        if not traced.records:
            self.rows.append(ScanFinding(**base, mode=mode, status="skipped", reason=f"{_NOTHING}: no op used a "
                                         "position input or made positions (arange)"))
            return ref
        shadows = traced.shadows
        if ref is not None and len(ref) == len(shadows) and all(
                (a is None) == (b is None) and (a is None or a.shape == b.shape) for a, b in zip(ref, shadows)):
            shadows = ref
        n = self.length
        v = _verdicts(traced, shadows, n, x_shape, name)
        if not v:
            self.rows.append(ScanFinding(**base, mode=mode, status="skipped", reason=f"{_NOTHING}: no returned "
                                         "tensor (or built buffer) derives from the positions along a position "
                                         "axis"))
            return ref if ref is not None else traced.shadows
        op = where = fix = None
        if v["verdict"] != "safe" and self.locate:
            op, where, fix = _locate(bound, inputs, plan, mode, traced)
            if where == "?":  # the cast itself rounded a buffer made at construction: the class that makes it
                where = c.where
        err = v["error"]
        gemms = tuple(dict.fromkeys(f"{rec.op} at {rec.where}" for rec in tf32_gemms(traced.records)))
        self.rows.append(ScanFinding(**base, mode=mode, status="scanned", verdict=v["verdict"], kind=v["kind"],
                                     why=v["why"], op=op, where=where, fix=fix,
                                     error=err if math.isfinite(err) else math.inf, tf32_gemms=gemms))
        return ref if ref is not None else traced.shadows


def _signature(fn: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def _strings(value: Any, name: str) -> list[str]:
    """One string or an iterable of strings; else ArgumentTypeError naming ``name``."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, (bytes, dict)) or not isinstance(value, Iterable):
        raise ArgumentTypeError(f"{name} {describe(value)} must be a string or an iterable of strings")
    out = list(value)
    for i, v in enumerate(out):
        if not isinstance(v, str):
            raise ArgumentTypeError(f"{name}[{i}] {describe(v)} must be a string")
    return out


def _overrides(args: Any) -> dict[str, Any]:
    if args is None:
        return {}
    if isinstance(args, dict):
        bad = [k for k in args if not isinstance(k, str) or not k.isidentifier()]
        if bad:
            raise ValueError(f"args key {bad[0]!r} must be a parameter name")
        return dict(args)
    return dict(parse_arg(a) for a in _strings(args, "args"))


def scan(targets: str | Iterable[str], *, length: int = 8192, modes: Iterable[str] | None = None,
         args: dict[str, Any] | Iterable[str] | None = None, progress: Callable[[str], None] | None = None,
         locate: bool = True) -> list[ScanFinding]:
    """Scan ``targets`` (package or module names, ``.py`` files, folders) for position code and judge each
    callable in each mode (:data:`MODES`) at positions ``0..length-1``.

    Only importing the targets' modules and calling the position callables found runs their code.  ``args``:
    ``{"dim": 128}`` or ``["dim=128"]``, overriding inferred and default arguments by name; ``progress`` is
    called with a line per module; ``locate=False`` skips naming the op of a degraded / broken row.  A target
    that does not exist, parse or import, or holds no position code: ValueError naming it.

    >>> rows = scan("precision_audit.trace.examples", length=1024, modes=["float32"])
    >>> [(r.callable, r.verdict, r.op) for r in rows if r.callable.endswith("forward")]
    [('bf16_positions().forward', 'broken', 'aten.arange.default'), ('fp32_rotary().forward', 'safe', None)]
    """
    length = check_int(length, "length", minimum=2, maximum=MAX_TRACE_LENGTH)
    progress = check_callable(progress, "progress")
    locate = check_flag(locate, "locate")
    chosen = tuple(MODES if modes is None else _strings(modes, "modes"))
    for m in chosen:
        if m not in MODES:
            raise ValueError(f"unknown mode {m!r}; valid: {', '.join(MODES)}")
    names = _strings(targets, "targets")
    if not names:
        raise ValueError("targets: give at least one package, module, .py file or folder")
    import torch  # noqa: F401 - the candidates' classes are torch modules

    s = _Scanner(length, chosen, _overrides(args), locate)
    for target in names:
        found = 0
        for loaded in load_target_modules(target):
            if loaded.module is None:
                s.rows.append(ScanFinding(loaded.name, loaded.name, "-", "-", "skipped", length,
                                          reason=loaded.error or "import failed"))
                if progress is not None:
                    progress(f"scan: {loaded.name}: {loaded.error or 'import failed'}")
                continue
            cands = candidates(loaded.module)
            found += len(cands)
            if progress is not None and cands:
                progress(f"scan: {loaded.name}: {len(cands)} position callable{'s' * (len(cands) != 1)}"
                         + (f"; {loaded.note}" if loaded.note else ""))
            before = len(s.rows)
            for c in cands:
                c.module = loaded.name  # a file's module as its file names it
                s.candidate(c)
            if loaded.note:
                s.rows[before:] = [dataclasses.replace(r, note=loaded.note) for r in s.rows[before:]]
        if not found:
            raise ValueError(f"TARGET {target}: no position code found (no class or function that builds or takes "
                             "positions)")
    return s.rows
