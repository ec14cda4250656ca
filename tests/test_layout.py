"""The package's shape (issue 27): no import cycle, lazy imports included, and no private name imported across
packages.  Read from the source (every ``import`` statement, at any depth), not from a run; the last tests run
a fresh interpreter to see which modules loading a name or running a command imports (on demand)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "precision_audit"


def _modules() -> dict[str, Path]:
    out = {}
    for f in PKG.rglob("*.py"):
        parts = ("precision_audit", *f.relative_to(PKG).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _is_package(name: str, mods: dict[str, Path]) -> bool:
    return mods[name].name == "__init__.py"


def _imports(name: str, mods: dict[str, Path]) -> list[tuple[str, list[str], int]]:
    """(target module, imported names, line) of every import of the package in module ``name``."""
    tree = ast.parse(mods[name].read_text())
    here = name if _is_package(name, mods) else name.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "precision_audit":
                continue
            names = [a.name for a in node.names]
            subs = [f"{target}.{n}" for n in names if f"{target}.{n}" in mods]  # `from . import module`
            out.append((target, [n for n in names if f"{target}.{n}" not in mods], node.lineno))
            out += [(s, [], node.lineno) for s in subs]
        elif isinstance(node, ast.Import):
            out += [(a.name, [], node.lineno) for a in node.names if a.name.split(".")[0] == "precision_audit"]
    return out


def _graph() -> dict[str, set[str]]:
    """Module -> the modules importing it runs: each target and its parent packages (those not already being
    imported as the importer's own ancestors)."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m in mods:
        mine = {".".join(m.split(".")[:i]) for i in range(1, m.count(".") + 2)}
        for target, _, _ in _imports(m, mods):
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                t = ".".join(parts[:i])
                if t in mods and t not in mine and t != m:
                    graph[m].add(t)
    return graph


def test_no_import_cycle():
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert cycles == []


def _package_of(module: str) -> str:
    """``precision_audit.rope.audit`` -> ``rope``; a top-level module is a package of its own."""
    return module.split(".")[1] if "." in module else ""


def test_no_private_name_imported_across_packages():
    mods = _modules()
    bad = []
    for m in mods:
        for target, names, line in _imports(m, mods):
            if _package_of(target) == _package_of(m):
                continue
            bad += [f"{m}:{line} imports {target}.{n}" for n in names if n.startswith("_") and not n.endswith("__")]
    assert bad == []


def _loaded_after(code: str) -> set[str]:
    """The precision_audit modules a fresh interpreter has loaded after running ``code``."""
    probe = code + "\nimport sys\nprint('MODULES', *(m for m in sys.modules if m.startswith('precision_audit')))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return set(next(line for line in out.splitlines() if line.startswith("MODULES")).split()[1:])


def test_api_names_load_on_first_use():
    # `import precision_audit` loads the package alone; a name loads its own module (PEP 562)
    assert _loaded_after("import precision_audit") == {"precision_audit"}
    got = _loaded_after("import precision_audit as pa\npa.alibi_slopes")
    assert "precision_audit.alibi" in got and not any(m.startswith("precision_audit.rope") for m in got)


def test_every_api_name_resolves_and_unknown_names_fail():
    import precision_audit as pa

    for name in pa.__all__:
        assert getattr(pa, name) is not None
        assert name in dir(pa)
    namespace: dict[str, object] = {}
    exec("from precision_audit import *", namespace)  # noqa: S102  (the star import goes through __getattr__)
    assert set(pa.__all__) <= set(namespace)
    with pytest.raises(AttributeError, match="no attribute 'audit_nothing'"):
        pa.audit_nothing  # noqa: B018


def test_a_command_loads_only_its_own_modules():
    # `precision-audit rope` never imports the model, transformers, effect or incident code
    got = _loaded_after("from precision_audit.cli import main\n"
                        "main(['rope', '-l', '64', '-d', 'bf16'], standalone_mode=False)")
    assert "precision_audit.rope" in got and "precision_audit.cli.auditors" in got
    for other in ("precision_audit.cli.models", "precision_audit.cli.live", "precision_audit.cli.effect",
                  "precision_audit.cli.effect_model", "precision_audit.cli.weights", "precision_audit.cli.incidents",
                  "precision_audit.config", "precision_audit.effect", "precision_audit.hf", "precision_audit.incidents"):
        assert other not in got


def test_every_command_is_listed_and_loads():
    import click

    from precision_audit.cli import COMMANDS, main

    every = main.every_command()
    assert set(every) == set(COMMANDS) == set(main.list_commands(click.Context(main)))
    assert all(cmd.name == name for name, cmd in every.items())
