"""keep_rotary_fp32's buffer matching on small hand-made modules (mutation testing, issue 21:
``python scripts/mutation.py "fix buffer matching"``).

Expected values are torch's own casting behaviour, which the fix must leave intact for everything it does not
protect: a module never protected, cast the same way, is the referee (its parameters and buffers after
``.half()``), and ``Module._apply`` converts each tensor once.  No transformers model is built here.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from precision_audit.fix import buffer_kind, keep_rotary_fp32  # noqa: E402


class Rotary(torch.nn.Module):
    """The rotary protocol (forward(x, position_ids)) with a child module and extra floating buffers."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(2, 2)  # a child: casts must still reach it
        self.register_buffer("inv_freq", torch.tensor([1.0, 0.1], dtype=torch.float32), persistent=False)
        self.register_buffer("scale", torch.tensor([0.5], dtype=torch.float32))  # not a position buffer
        self.register_buffer("steps", torch.tensor([3], dtype=torch.int64))  # not floating
        self.register_buffer("unused_inv_freq", None)

    def forward(self, x, position_ids):
        angles = position_ids[..., None].float() * self.inv_freq.float()
        return angles.cos().to(x.dtype), angles.sin().to(x.dtype)


def dtypes(module) -> dict[str, torch.dtype]:
    return {n: t.dtype for n, t in [*module.named_parameters(), *module.named_buffers()]}


def test_only_position_buffers_keep_float32_children_and_other_buffers_cast():
    fixed, plain = Rotary(), Rotary()
    keep_rotary_fp32(fixed)
    got, want = dtypes(fixed.half()), dtypes(plain.half())
    assert want["inv_freq"] == torch.float16 and want["proj.weight"] == torch.float16  # torch's referee
    assert got == {**want, "inv_freq": torch.float32}
    assert fixed.steps.dtype == torch.int64 and fixed.unused_inv_freq is None


def test_protected_module_converts_each_tensor_once():
    # Module._apply(fn) calls fn once per parameter and buffer, children included (torch's own behaviour,
    # measured on an unprotected module); the guard must neither skip nor repeat a tensor
    def counted(module):
        calls: list[tuple[int, ...]] = []

        def fn(t):
            calls.append(tuple(t.shape))
            return t.to(torch.float16)

        module._apply(fn)
        return sorted(calls)

    fixed = Rotary()
    keep_rotary_fp32(fixed)
    assert counted(fixed) == counted(Rotary())
    parent = torch.nn.Sequential(torch.nn.Linear(3, 1), Rotary())
    keep_rotary_fp32(parent)
    assert counted(parent) == counted(torch.nn.Sequential(torch.nn.Linear(3, 1), Rotary()))


class NotRotary(torch.nn.Module):
    """A vision-style table: forward(x) only.  Its inv_freq is left to casts; its ALiBi slopes are kept."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("inv_freq", torch.tensor([1.0, 0.1]))
        self.register_buffer("slopes", torch.tensor([0.5, 0.25]))

    def forward(self, x):
        return x


def test_outside_the_protocol_only_alibi_buffers_are_kept():
    m = NotRotary()
    report = keep_rotary_fp32(m)
    assert [(b.name, b.protected) for b in report.buffers] == [("inv_freq", False), ("slopes", True)]
    m.half()
    assert (m.inv_freq.dtype, m.slopes.dtype) == (torch.float16, torch.float32)


class BuiltinForward(torch.nn.Module):
    """A forward without a Python signature (a builtin): not recognisably the rotary protocol."""

    forward = torch.relu

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("inv_freq", torch.tensor([1.0, 0.1]))


def test_forward_without_signature_is_not_the_rotary_protocol():
    import inspect

    with pytest.raises(ValueError):  # the premise: this forward has no signature to read
        inspect.signature(BuiltinForward().forward)
    m = BuiltinForward()
    (b,) = keep_rotary_fp32(m).buffers
    assert (b.name, b.rotary_protocol, b.protected) == ("inv_freq", False, False)
    assert m.half().inv_freq.dtype == torch.float16


@pytest.mark.parametrize("bad", [3, None, b"inv_freq"])
def test_buffer_kind_names_the_bad_value(bad):
    with pytest.raises(TypeError, match=f"^name {bad!r} .*must be a string"):
        buffer_kind(bad)


class Plain(torch.nn.Module):
    """Rotary protocol; a non-position floating tensor attribute and a non-tensor attribute named like one."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("inv_freq", torch.tensor([1.0, 0.1]))
        self.cache = torch.zeros(2)  # a plain tensor attribute, not a position tensor
        self.rope_slopes = [0.5, 0.25]  # named like an ALiBi tensor, but not a tensor

    def forward(self, x, position_ids):
        return x, x


def test_only_floating_position_tensors_are_listed():
    m = Plain()
    report = keep_rotary_fp32(m)
    assert [(b.name, b.where) for b in report.buffers] == [("inv_freq", "buffer")]


def test_a_module_shared_twice_is_listed_once():
    rot = Rotary()
    model = torch.nn.Module()
    model.a, model.b = rot, rot  # named_modules visits it once, as "a"
    report = keep_rotary_fp32(model)
    assert [b.path for b in report.buffers] == ["a.inv_freq"]
    assert model.half().b.inv_freq.dtype == torch.float32


def test_a_module_with_its_own_apply_is_refused_by_path():
    def own_apply(fn, recurse=True):
        return None

    m = Rotary()
    m.__dict__["_apply"] = own_apply
    with pytest.raises(ValueError, match=r"^Rotary already overrides _apply; cannot protect it$"):
        keep_rotary_fp32(m)
    model = torch.nn.Sequential(torch.nn.Linear(1, 1), m)
    with pytest.raises(ValueError, match=r"^1 already overrides _apply; cannot protect it$"):
        keep_rotary_fp32(model)


class ConfigRotary(torch.nn.Module):
    """Built from a config, like transformers' rotary modules; ``long_inv_freq`` is a plain attribute."""

    def __init__(self, config) -> None:
        super().__init__()
        self.config = config
        inv_freq = 1.0 / config.base ** (torch.arange(0, 4, 2, dtype=torch.float32) / 4)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.long_inv_freq = inv_freq / 3

    def forward(self, x, position_ids):
        return x, x


def test_a_downcast_attribute_is_rebuilt_from_config_in_place():
    from types import SimpleNamespace

    m = ConfigRotary(SimpleNamespace(base=10000.0))
    want = m.long_inv_freq.clone()
    m.long_inv_freq = m.long_inv_freq.to(torch.bfloat16)  # a low-precision attribute (casts never touch one)
    report = keep_rotary_fp32(m)
    assert [(b.name, b.where, b.dtype, b.restored) for b in report.buffers] == [
        ("inv_freq", "buffer", "float32", False), ("long_inv_freq", "attribute", "bfloat16", True)]
    assert "long_inv_freq" in vars(m) and "long_inv_freq" not in m._buffers
    assert m.long_inv_freq.dtype == torch.float32 and torch.equal(m.long_inv_freq, want)


def test_a_downcast_buffer_is_rebuilt_as_a_buffer():
    # a rebuilt buffer must replace the buffer itself (state_dict, later casts and named_buffers see it), not
    # shadow it with an attribute
    from types import SimpleNamespace

    m = ConfigRotary(SimpleNamespace(base=10000.0))
    want = m.inv_freq.clone()
    m.inv_freq = m.inv_freq.to(torch.bfloat16)  # nn.Module.__setattr__ keeps it a buffer
    assert m._buffers["inv_freq"].dtype == torch.bfloat16
    report = keep_rotary_fp32(m)
    assert [(b.name, b.where, b.restored) for b in report.buffers][0] == ("inv_freq", "buffer", True)
    assert "inv_freq" not in vars(m)
    assert torch.equal(m._buffers["inv_freq"], want) and m._buffers["inv_freq"].dtype == torch.float32
    assert dict(m.named_buffers())["inv_freq"].dtype == torch.float32


class GrownDynamic(Rotary):
    """A dynamic-NTK module whose frequencies were regrown past its built context, then cast."""

    def __init__(self) -> None:
        super().__init__()
        self.rope_type, self.max_seq_len_cached, self.original_max_seq_len = "dynamic", 8192, 4096
        self.inv_freq = self.inv_freq.half()


def test_grown_dynamic_refusal_names_the_module_and_buffer():
    msg = ("dynamic RoPE frequencies regrown for 8192 positions are already float16; "
           "call keep_rotary_fp32 before casting")
    with pytest.raises(ValueError, match=f"^GrownDynamic: {msg}$"):
        keep_rotary_fp32(GrownDynamic())
    with pytest.raises(ValueError, match=f"^0: {msg}$"):
        keep_rotary_fp32(torch.nn.Sequential(GrownDynamic()))
