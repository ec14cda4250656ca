"""``scan``: each bug kind the tool knows, written here as a small module, is found with its op and line; the
float32 fix is safe; bad targets exit 2 with one line (API: ValueError).

Expected values: the line of each bug is the line this file writes it on (closed form); bfloat16 holds every
integer to 256 and not 257 (the first inexact position, ARCHITECTURE.md); the verdicts are
:mod:`precision_audit.verdicts`' rules, checked on the rows' own figures where a figure is asserted.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from precision_audit.cli import main

torch = pytest.importorskip("torch")

HEAD = """\
import torch


class Rotary(torch.nn.Module):
    def __init__(self, dim=64, base=10000.0):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / base ** (torch.arange(0, dim, 2).float() / dim), persistent=False)

"""
# the forward of each bug kind; the marked line (# BUG) is where the loss enters
BUGS = {
    "bf16_arange": """\
    def forward(self, x):
        pos = torch.arange(x.shape[1], dtype=x.dtype)  # BUG
        freqs = pos.float()[:, None] * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)
""",
    "cast_to_buffer": """\
    def forward(self, x, position_ids):
        pos = position_ids.to(self.inv_freq.dtype)  # BUG
        freqs = pos[..., None] * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)
""",
    "fp16_angles": """\
    def forward(self, x, position_ids):
        freqs = (position_ids[..., None].float() * self.inv_freq).to(x.dtype)  # BUG
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()
""",
    "downcast_inv_freq": """\
    def forward(self, x, position_ids):
        inv = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        freqs = (inv @ position_ids[:, None, :].float()).transpose(1, 2)  # BUG
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)
""",
    "fp32_fixed": """\
    def forward(self, x, position_ids):  # the frequencies made here in float32: no cast reaches them
        inv_freq = 1.0 / 10000.0 ** (torch.arange(0, 64, 2, dtype=torch.float32) / 64)
        freqs = position_ids[..., None].float() * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)
""",
}
BUCKET = """\
import math

import torch


def relative_bucket(seq_len, num_buckets=32, max_distance=128, dtype=torch.bfloat16):
    ctx = torch.arange(seq_len, dtype=dtype)  # BUG
    rel = (ctx[None, :] - ctx[:, None]).abs()
    exact = num_buckets // 2
    large = exact + (torch.log(rel.float().clamp(min=1) / exact) / math.log(max_distance / exact)
                     * (num_buckets - exact)).to(torch.long)
    large = large.clamp(max=num_buckets - 1)
    return torch.where(rel < exact, rel.to(torch.long), large)
"""


def _write(tmp_path: Path, name: str, text: str) -> tuple[Path, int]:
    path = tmp_path / f"scanme_{name}.py"
    path.write_text(text)
    line = next((i for i, s in enumerate(text.splitlines(), 1) if "# BUG" in s), 0)
    return path, line


def _rotary(tmp_path: Path, kind: str) -> tuple[Path, int]:
    return _write(tmp_path, kind, HEAD + BUGS[kind])


def _rows(path: Path, modes: list[str], length: int = 8192) -> dict[str, dict]:
    from precision_audit.scan import scan

    rows = scan(str(path), length=length, modes=modes)
    return {r.mode: r for r in rows if r.callable.endswith("forward") or r.callable == "relative_bucket"}


@pytest.mark.parametrize("kind, mode, op", [
    ("bf16_arange", "bfloat16-inputs", "aten.arange.default"),
    ("cast_to_buffer", "cast-bfloat16", "aten._to_copy.default"),
    ("fp16_angles", "float16-inputs", "aten._to_copy.default"),
])
def test_bug_found_with_op_and_line(tmp_path: Path, kind: str, mode: str, op: str) -> None:
    """Each bug is broken in the mode that makes it (and safe in float32), at the op and line written above."""
    path, line = _rotary(tmp_path, kind)
    rows = _rows(path, ["float32", mode])
    assert rows["float32"].verdict == "safe", rows["float32"]
    bad = rows[mode]
    assert bad.verdict == "broken", bad
    assert (bad.op, bad.where) == (op, f"{path.name}:{line}")
    assert bad.fix


def test_bf16_arange_first_collision(tmp_path: Path) -> None:
    """bf16 positions: 257 rounds to 256, so the rows collide (local order lost); 0..8191 rounded to bfloat16 (by
    ml_dtypes, independently of torch) take 897 distinct values (issue 51's count), so 8192 - 897 = 7295
    positions share their neighbour's rotation."""
    import ml_dtypes
    import numpy as np

    distinct = np.unique(np.arange(8192).astype(ml_dtypes.bfloat16)).size
    assert distinct == 897
    path, _ = _rotary(tmp_path, "bf16_arange")
    bad = _rows(path, ["bfloat16-inputs"])["bfloat16-inputs"]
    assert bad.kind == "cos/sin"
    assert bad.why == f"local order lost: {8192 - distinct} positions share the previous one's rotation"


def test_downcast_inv_freq_after_cast(tmp_path: Path) -> None:
    """model.to(bfloat16) rounds inv_freq: degraded at 8K (fast pairs a quarter turn off between far positions,
    those that resolve the distance not), and the operand is named at the line that multiplies it."""
    path, line = _rotary(tmp_path, "downcast_inv_freq")
    rows = _rows(path, ["float32", "cast-bfloat16"])
    assert rows["float32"].verdict == "safe"
    bad = rows["cast-bfloat16"]
    assert bad.verdict == "degraded" and "in the pairs that resolve them" in bad.why
    assert bad.op.startswith("operand inv_freq") and bad.where == f"{path.name}:{line}"
    assert "keep_rotary_fp32" in bad.fix


def test_fp32_fix_is_safe_in_every_mode(tmp_path: Path) -> None:
    path, _ = _rotary(tmp_path, "fp32_fixed")
    rows = _rows(path, ["float32", "bfloat16-inputs", "float16-inputs", "cast-bfloat16"])
    assert {m: r.verdict for m, r in rows.items()} == dict.fromkeys(
        ["float32", "bfloat16-inputs", "float16-inputs", "cast-bfloat16"], "safe")
    assert all(r.op is None for r in rows.values())


def test_bf16_distances_into_buckets(tmp_path: Path) -> None:
    """Distances from bfloat16 positions move buckets (T5-style log buckets over 0..1023)."""
    path, line = _write(tmp_path, "bucket", BUCKET)
    row = _rows(path, ["float32"], length=1024)["float32"]
    assert row.kind == "buckets" and row.verdict in ("degraded", "broken")
    assert (row.op, row.where) == ("aten.arange.default", f"{path.name}:{line}")


def test_cli_json_and_fail_on(tmp_path: Path) -> None:
    path, line = _rotary(tmp_path, "bf16_arange")
    res = CliRunner().invoke(main, ["scan", str(path), "--mode", "bfloat16-inputs", "--json", "--fail-on",
                                    "broken"])
    assert res.exit_code == 1, res.output
    data = json.loads(res.stdout)
    assert data["auditor"] == "scan"
    (row,) = [r for r in data["results"] if r["callable"] == "Rotary.forward"]
    assert (row["verdict"], row["op"], row["where"]) == ("broken", "aten.arange.default", f"{path.name}:{line}")
    assert "scan: scanme_bf16_arange: 1 position callable" in res.stderr


def test_cli_table_safe_exits_0(tmp_path: Path) -> None:
    path, _ = _rotary(tmp_path, "fp32_fixed")
    res = CliRunner().invoke(main, ["scan", str(path), "--mode", "float32", "--fail-on", "degraded", "-l", "1K"])
    assert res.exit_code == 0, res.output
    assert "Rotary.forward" in res.stdout and "safe" in res.stdout
    assert "TF32" not in res.stdout  # a broadcast multiply: no GEMM, no TF32 note


def test_float32_gemm_on_positions_carries_the_tf32_flag(tmp_path: Path) -> None:
    """The angle as a float32 matmul (``inv_freq[None, :, None] @ positions``, K = 1: an aten.bmm) is flagged as
    ``trace`` flags it (tensor cores may run it in TF32: positions exact only to 2048), in the row, in --json and
    in the text; the broadcast multiply of the fix is not a GEMM and is not flagged.  On this CPU the GEMM is
    float32, so the verdict stays safe."""
    from precision_audit.trace.report import TF32_NOTE

    path, line = _rotary(tmp_path, "downcast_inv_freq")
    gemm = f"aten.bmm.default at {path.name}:{line}"
    row = _rows(path, ["float32"], length=1024)["float32"]
    assert (row.verdict, row.tf32_gemms) == ("safe", (gemm,))
    fixed, _ = _rotary(tmp_path, "fp32_fixed")
    assert _rows(fixed, ["float32"], length=1024)["float32"].tf32_gemms == ()

    args = ["scan", str(path), "--mode", "float32", "-l", "1K"]
    res = CliRunner().invoke(main, [*args, "--json"])
    assert res.exit_code == 0, res.output
    (data,) = [r for r in json.loads(res.stdout)["results"] if r["callable"] == "Rotary.forward"]
    assert data["tf32_gemms"] == [gemm]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    (note,) = [ln for ln in res.stdout.splitlines() if TF32_NOTE in ln]
    assert note.startswith(f"tf32: float32 {gemm} {TF32_NOTE}") and "48450" in note


def test_unbuildable_is_listed_with_why(tmp_path: Path) -> None:
    path, _ = _write(tmp_path, "needs", "import torch\n\n\ndef rotary_angles(positions, weird):\n"
                                         "    return positions[:, None] * torch.ones(4)\n")
    from precision_audit.scan import scan

    (row,) = scan(str(path), length=64)
    assert row.status == "skipped" and "cannot infer argument weird" in row.reason
    rows = scan(str(path), length=64, args={"weird": 1})
    assert {r.status for r in rows} == {"scanned"}


@pytest.mark.parametrize("target, text, message", [
    ("no_such_pkg_xyz", None, "TARGET no_such_pkg_xyz: does not import: ModuleNotFoundError"),
    ("broken.py", "def f(:\n", "syntax error at line 1"),
    ("plain", "", "no position code found"),
])
def test_bad_target_exits_2_with_one_line(tmp_path: Path, target: str, text: str | None, message: str) -> None:
    from precision_audit.scan import scan

    arg = target
    if text is not None and target.endswith(".py"):
        (tmp_path / target).write_text(text)
        arg = str(tmp_path / target)
    elif text is not None:
        (tmp_path / target).mkdir()
        (tmp_path / target / "util.py").write_text("def add(a, b):\n    return a + b\n")
        arg = str(tmp_path / target)
    res = CliRunner().invoke(main, ["scan", arg])
    assert res.exit_code == 2, res.output
    assert message in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    with pytest.raises(ValueError, match=message):
        scan(arg)


def test_bad_arg_and_mode() -> None:
    from precision_audit.scan import scan

    res = CliRunner().invoke(main, ["scan", "x", "--arg", "nonsense"])
    assert res.exit_code == 2 and "NAME=VALUE" in res.output
    with pytest.raises(ValueError, match="unknown mode 'fast'"):
        scan("precision_audit.trace.examples", modes=["fast"])
    with pytest.raises(ValueError, match="length 1 must be at least 2"):
        scan("precision_audit.trace.examples", length=1)


def test_callable_package() -> None:
    """precision_audit.scan is the package and, called, the scan (whatever was imported first)."""
    import precision_audit
    import precision_audit.scan.run as run

    assert precision_audit.scan.scan is run.scan
    rows = precision_audit.scan("precision_audit.trace.examples", length=512, modes=["float32"])
    assert {(r.callable, r.verdict) for r in rows if r.status == "scanned" and r.callable.endswith("forward")} \
        == {("bf16_positions().forward", "broken"), ("fp32_rotary().forward", "safe")}


ALIBI = """\
import torch


def alibi_bias(seq_len, num_heads=8, dtype=torch.float32):
    slopes = 2.0 ** (-8.0 * torch.arange(1, num_heads + 1) / num_heads)
    pos = torch.arange(seq_len, dtype=dtype)  # BUG
    return (slopes[:, None] * (pos[None, :] - (seq_len - 1))).float()
"""


@pytest.mark.parametrize("dtype, verdict", [("torch.float32", "safe"), ("torch.bfloat16", "broken")])
def test_alibi_bias_from_bf16_positions(tmp_path: Path, dtype: str, verdict: str) -> None:
    """A bias from distances: with positions in bfloat16, keys above 256 share their neighbour's position, so
    neighbouring keys share a bias (broken: the ALiBi rule); in float32 every distance to 1023 is exact and the
    bias is off by float32 rounding only (safe)."""
    path, line = _write(tmp_path, f"alibi_{dtype[6:]}", ALIBI.replace("dtype=torch.float32", f"dtype={dtype}"))
    from precision_audit.scan import scan

    (row,) = [r for r in scan(str(path), length=1024) if r.callable == "alibi_bias"]
    assert (row.kind, row.verdict) == ("biases", verdict)
    if verdict == "broken":
        assert "neighbouring keys share a bias" in row.why
        assert (row.op, row.where) == ("aten.arange.default", f"{path.name}:{line}")


def test_a_length_by_length_bias_is_estimated_as_one(tmp_path: Path) -> None:
    """A bias over every query and key (length x length values) grows as the square of the positions: the probe
    at 16 and 32 positions sees 256 and 1024 values, so at 8192 it estimates 8192**2 = 2**26 values, more than
    MAX_VALUES (2**25) to shadow: listed with why, never run (a linear estimate, 256 * 512, let it run and
    hold gigabytes of float64 shadows); at 1024 (2**20 values) it runs."""
    path, _ = _write(tmp_path, "square_bias", "import torch\n\n\ndef distance_bias(seq_len):\n"
                                               "    pos = torch.arange(seq_len)\n"
                                               "    return (pos[None, :] - pos[:, None]).float().abs().neg()\n")
    from precision_audit.scan import scan
    from precision_audit.scan.run import MAX_VALUES

    (row,) = scan(str(path), length=8192)
    assert 8192**2 > MAX_VALUES and row.status == "skipped"
    assert row.reason == (f"returns 256 values at 16 positions and 1024 at 32, about {8192**2} at 8192: more than "
                          f"{MAX_VALUES} to shadow in float64 (give a smaller --length)")
    (row,) = scan(str(path), length=1024)
    assert row.status == "scanned"


def test_constructor_that_raises_is_listed(tmp_path: Path) -> None:
    path, _ = _write(tmp_path, "raises", "import torch\n\n\nclass RotaryEmbedding(torch.nn.Module):\n"
                                         "    def __init__(self, dim):\n        raise RuntimeError('no GPU here')\n\n"
                                         "    def forward(self, x, position_ids):\n        return x\n")
    from precision_audit.scan import scan

    (row,) = scan(str(path))
    assert row.status == "skipped" and row.callable == "RotaryEmbedding"
    assert row.reason == "cannot build: RotaryEmbedding(dim=64) raised RuntimeError: no GPU here"


@pytest.mark.parametrize("kwargs, message", [
    ({"targets": 3}, "targets 3 must be a string or an iterable of strings"),
    ({"targets": ["ok", 3]}, r"targets\[1\] 3 must be a string"),
    ({"targets": "x", "progress": 1}, "progress 1 must be callable"),
    ({"targets": "x", "locate": "yes"}, "locate 'yes' must be True or False"),
    ({"targets": "x", "args": {"1x": 2}}, "args key '1x' must be a parameter name"),
    ({"targets": "x", "args": ["dim"]}, "must be NAME=VALUE"),
])
def test_api_bad_arguments_raise_value_error(kwargs: dict, message: str) -> None:
    from precision_audit.scan import scan

    with pytest.raises(ValueError, match=message):
        scan(**kwargs)


def test_package_folder_with_relative_imports(tmp_path: Path) -> None:
    """A folder that is a package is imported as one: its modules' relative imports resolve."""
    pkg = tmp_path / "scanme_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "consts.py").write_text("BASE = 10000.0\n")
    (pkg / "rope.py").write_text(HEAD.replace("import torch\n", "import torch\n\nfrom .consts import BASE\n", 1)
                                 .replace("base=10000.0", "base=BASE") + BUGS["bf16_arange"])
    from precision_audit.scan import scan

    rows = [r for r in scan(str(pkg), length=1024, modes=["bfloat16-inputs"]) if r.callable == "Rotary.forward"]
    assert [(r.module, r.verdict, r.op) for r in rows] == [("scanme_pkg.rope", "broken", "aten.arange.default")]


def _package(tmp_path: Path, name: str, init: str, rope_extra: str = "") -> Path:
    """A package ``name`` (``__init__`` text ``init``) with a subpackage ``layers`` holding ``rope.py``: the
    bf16-arange rotary, its base from a sibling by a relative import (and ``rope_extra`` at its top)."""
    sub = tmp_path / name / "layers"
    sub.mkdir(parents=True)
    (tmp_path / name / "__init__.py").write_text(init)
    (sub / "__init__.py").write_text("")
    (sub / "consts.py").write_text("BASE = 10000.0\n")
    (sub / "rope.py").write_text(HEAD.replace("import torch\n", f"import torch\n{rope_extra}\nfrom .consts import "
                                              "BASE\n", 1).replace("base=10000.0", "base=BASE") + BUGS["bf16_arange"])
    return sub / "rope.py"


def test_file_in_a_package_is_imported_as_its_module(tmp_path: Path) -> None:
    """A .py file inside package folders is imported as Python imports it (``pkg.layers.rope``, the packages'
    ``__init__`` first): its relative imports resolve, and no note."""
    import sys

    from precision_audit.scan import scan

    path = _package(tmp_path, "scanme_okpkg", "MARK = 1\n")
    rows = [r for r in scan(str(path), length=1024, modes=["bfloat16-inputs"]) if r.callable == "Rotary.forward"]
    assert [(r.module, r.verdict, r.op, r.note) for r in rows] == [
        ("scanme_okpkg.layers.rope", "broken", "aten.arange.default", "")]
    assert sys.modules["scanme_okpkg"].MARK == 1  # the real package, imported as Python imports it


def test_file_whose_package_init_does_not_import_is_loaded_with_a_note(tmp_path: Path) -> None:
    """timm's case (its ``__init__`` needs torchvision, its RoPE file does not): the file is loaded with its
    packages as namespace stand-ins (the relative import loads the real sibling), each row says so in one line,
    the text output once; after the scan the stand-ins are gone from ``sys.modules``."""
    import sys

    from precision_audit.scan import scan

    path = _package(tmp_path, "scanme_badinit", "import scanme_no_such_dependency\n")
    rows = [r for r in scan(str(path), length=1024, modes=["bfloat16-inputs"]) if r.callable == "Rotary.forward"]
    note = ("loaded without running the __init__ of scanme_badinit, scanme_badinit.layers (importing "
            "scanme_badinit.layers.rope raised ModuleNotFoundError: No module named 'scanme_no_such_dependency'): "
            "namespace stand-ins, so its own imports load the real files")
    assert [(r.module, r.verdict, r.op, r.note) for r in rows] == [
        ("scanme_badinit.layers.rope", "broken", "aten.arange.default", note)]
    assert not [k for k in sys.modules if k.startswith("scanme_badinit")]
    res = CliRunner().invoke(main, ["scan", str(path), "-l", "1024", "--mode", "bfloat16-inputs"])
    assert res.exit_code == 0, res.output
    assert res.stdout.count(f"note: scanme_badinit.layers.rope: {note}") == 1


def test_file_that_does_not_import_without_its_init_either(tmp_path: Path) -> None:
    """The file itself needs the missing package: a one-line error naming it, and that it fails the same way
    with its packages' ``__init__`` not run."""
    from precision_audit.scan import scan

    path = _package(tmp_path, "scanme_badboth", "import scanme_no_such_dependency\n",
                    rope_extra="import scanme_no_such_dependency\n")
    with pytest.raises(ValueError, match=r"import failed: ModuleNotFoundError: No module named "
                                         r"'scanme_no_such_dependency' \(the same without its packages' __init__\)$"):
        scan(str(path), length=64)


def _stand_in_note(packages: str, what: str) -> str:
    return (f"loaded without running the __init__ of {packages} (importing {what} raised ModuleNotFoundError: No "
            "module named 'scanme_no_such_dependency'): namespace stand-ins, so its own imports load the real files")


def _forward_rows(rows: list) -> list[tuple]:
    return [(r.module, r.verdict, r.op, r.note) for r in rows if r.callable == "Rotary.forward"]


def test_package_name_whose_init_does_not_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """timm's case by NAME (``scan timm``: its ``__init__`` needs torchvision): the package's files are found
    without running it (``find_spec`` of the top package) and each module that mentions positions is loaded
    with its packages as namespace stand-ins, a note on each row; a module that still does not import is listed
    with why; a module named directly gives the rows its file gives; the stand-ins are gone afterwards."""
    import sys

    from precision_audit.scan import scan

    path = _package(tmp_path, "scanme_byname", "import scanme_no_such_dependency\n")
    (path.parent / "needs.py").write_text("import scanme_no_such_dependency  # a rotary helper needs it\n")
    monkeypatch.chdir(tmp_path)  # a name imports from the current folder, as python -m finds it
    kw = dict(length=1024, modes=["bfloat16-inputs"])
    rows = scan("scanme_byname", **kw)
    assert _forward_rows(rows) == [("scanme_byname.layers.rope", "broken", "aten.arange.default",
                                    _stand_in_note("scanme_byname, scanme_byname.layers", "scanme_byname"))]
    (needs,) = [r for r in rows if r.module == "scanme_byname.layers.needs"]
    assert needs.status == "skipped" and needs.reason == (
        "import failed: ModuleNotFoundError: No module named 'scanme_no_such_dependency' (loaded without running "
        "the __init__ of scanme_byname, scanme_byname.layers: importing scanme_byname raised ModuleNotFoundError: "
        "No module named 'scanme_no_such_dependency')")
    assert not [k for k in sys.modules if k.startswith("scanme_byname")]
    by_name = [r.to_dict() for r in scan("scanme_byname.layers.rope", **kw)]
    assert by_name == [r.to_dict() for r in scan(str(path), **kw)]
    assert by_name[0]["note"] == _stand_in_note("scanme_byname, scanme_byname.layers", "scanme_byname.layers.rope")
    assert [r.to_dict() for r in scan(str(tmp_path / "scanme_byname"), **kw)] == [r.to_dict() for r in rows]
    assert not [k for k in sys.modules if k.startswith("scanme_byname")]
    res = CliRunner().invoke(main, ["scan", "scanme_byname", "-l", "1024", "--mode", "bfloat16-inputs"])
    assert res.exit_code == 0, res.output
    assert "scan: scanme_byname.layers.needs: import failed" in res.stderr
    with pytest.raises(ValueError, match=r"^TARGET scanme_byname.nosuch: does not import: ModuleNotFoundError: No "
                                         r"module named 'scanme_no_such_dependency'; no file for it in "):
        scan("scanme_byname.nosuch", **kw)
    with pytest.raises(ValueError, match=r"^TARGET scanme_byname.layers.needs: does not import: ModuleNotFoundError: "
                                         r".*\(the same without its packages' __init__\)$"):
        scan("scanme_byname.layers.needs", **kw)


def test_subpackage_whose_init_does_not_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A package that imports, with a subpackage whose ``__init__`` does not: its modules are loaded without
    that ``__init__`` (the real package stays), not dropped as ``pkgutil.walk_packages`` drops them."""
    from precision_audit.scan import scan

    path = _package(tmp_path, "scanme_subbad", "MARK = 1\n")
    (path.parent / "__init__.py").write_text("import scanme_no_such_dependency\n")
    (tmp_path / "scanme_subbad" / "needs.py").write_text("import scanme_no_such_dependency  # rotary\n")
    monkeypatch.chdir(tmp_path)
    rows = scan("scanme_subbad", length=1024, modes=["bfloat16-inputs"])
    assert _forward_rows(rows) == [("scanme_subbad.layers.rope", "broken", "aten.arange.default",
                                    _stand_in_note("scanme_subbad.layers", "scanme_subbad.layers"))]
    # a module whose packages import fails on its own: the error, no second try without them
    with pytest.raises(ValueError, match=r"^TARGET scanme_subbad.needs: does not import: ModuleNotFoundError: No "
                                         r"module named 'scanme_no_such_dependency'$"):
        scan("scanme_subbad.needs", length=1024)


# --------------------------------------------------------------------------- the verdict per output kind


def test_output_verdict_positions_count_collisions() -> None:
    """Positions 0..8191 rounded to bfloat16 by ml_dtypes: 8192 - 897 collide with their neighbour; the nearest
    inexact to zero is 257 (bfloat16 keeps 8 significant bits)."""
    import ml_dtypes
    import numpy as np

    from precision_audit.scan import output_verdict

    exact = np.arange(8192, dtype=np.float64)
    low = exact.astype(ml_dtypes.bfloat16).astype(np.float64)
    v = output_verdict(low, exact, 8192)
    assert (v["kind"], v["verdict"], v["colliding"], v["first_inexact"]) == ("positions", "broken", 8192 - 897, 257)
    assert output_verdict(exact.astype(np.float32), exact, 8192)["verdict"] == "safe"


@pytest.mark.parametrize("shift, verdict", [(0, "safe"), (1, "degraded"), (2, "broken")])
def test_output_verdict_buckets(shift: int, verdict: str) -> None:
    """The relative auditor's rule: a bucket moved to its neighbour is degraded, further is broken."""
    import numpy as np

    from precision_audit.scan import output_verdict

    exact = np.arange(32)
    real = exact.copy()
    real[20] += shift
    assert output_verdict(real, exact.astype(np.float64), 32, hint="bucket")["verdict"] == verdict


def test_output_verdict_cos_sin_pairs_against_the_rope_rule() -> None:
    """cos/sin of angles m * theta with a relative frequency error r: the pair error of frequency j at distance D
    is D * theta_j * r (closed form, wrapped); the resolved error its max over the j that turn at most 4 times
    across D; the verdict is rope_verdict's on those pairs (pi/8 degraded, pi/2 in a resolving pair broken)."""
    import numpy as np

    from precision_audit.scan import output_verdict
    from precision_audit.verdicts import rope_verdict

    m = np.arange(8192.0)[:, None]
    theta = np.array([1.0, 0.1, 0.01])
    seen = set()
    for r in (1e-6, 5e-4, 0.1):  # 5e-4: 2.05 rad 4096 apart in the fast pair only; 0.1: 1.6 rad 16 apart at theta 1
        exact, real = m * theta, m * theta * (1 + r)
        v = output_verdict(np.cos(real), np.cos(exact), 8192, partner=(np.sin(real), np.sin(exact)))
        pairs = []
        for d in (1, 16, 256, 4096):
            e = np.abs(np.angle(np.exp(1j * d * theta * r)))
            pairs.append((d, float(e.max()), float(np.where(d * theta <= 8 * np.pi, e, 0.0).max())))
        assert v["verdict"] == rope_verdict(float(np.abs(np.angle(np.exp(1j * (real - exact)))).max()), 0,
                                            pair_errors=pairs)
        for (d, e, res), (d2, e2, res2) in zip(pairs, v["pairs"]):
            assert d == d2 and e2 == pytest.approx(e, rel=1e-6, abs=1e-9)
            assert res2 == pytest.approx(res, rel=1e-6, abs=1e-9)
        seen.add(v["verdict"])
    assert seen == {"safe", "degraded", "broken"}


def test_folder_skips_environments_and_refuses_a_whole_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder scan reads the user's files, not a virtual environment inside it, and refuses a tree past its
    limits at once (``scan /`` was walked for minutes) with a ValueError naming the target; the CLI exits 2."""
    from precision_audit.scan import discover, scan

    (tmp_path / "rope.py").write_text(HEAD + BUGS["bf16_arange"])
    for skipped in ("venv", "site-packages", ".hidden", "node_modules"):
        (tmp_path / skipped).mkdir()
        (tmp_path / skipped / "other_rope.py").write_text(HEAD + BUGS["bf16_arange"])
    (tmp_path / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "kept.py").write_text("x = 1\n")
    assert discover._folder_files(str(tmp_path)) == [str(tmp_path / "rope.py"), str(tmp_path / "code" / "kept.py")]
    rows = [r for r in scan(str(tmp_path), length=512, modes=["bfloat16-inputs"]) if r.callable == "Rotary.forward"]
    assert [(r.module, r.verdict) for r in rows] == [("rope", "broken")]

    monkeypatch.setattr(discover, "MAX_FOLDER_FILES", 1)
    with pytest.raises(ValueError, match=f"TARGET {tmp_path}: a tree of more than 1 .py files"):
        list(scan(str(tmp_path)))
    result = CliRunner().invoke(main, ["scan", str(tmp_path)])
    assert result.exit_code == 2 and "a tree of more than 1 .py files" in result.output
