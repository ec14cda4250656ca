"""Find the position code in a package, a module, a ``.py`` file or a folder: which modules to import, and which
``nn.Module`` classes and functions in them build or take positions.

A file is imported only when its text shows position code (:func:`mentions_positions`); a callable is a
candidate when its own source does (:func:`position_evidence`): an ``arange`` feeding sin/cos/pow/exp, a
parameter named like a position, sin/cos of a product, a bucket or a bias from distances, or a name such as
rotary / rope / position / alibi / sinusoid / bucket.  Nothing is called here: importing is all that runs.

>>> position_evidence("def f(seq_len, dim):\\n    t = torch.arange(seq_len)\\n    return torch.outer(t, w).cos()",
...                   "f", ("seq_len", "dim"))
('arange into sin/cos/pow/exp',)
>>> position_evidence("def g(x):\\n    return x + 1", "g", ("x",))
()
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.machinery
import importlib.util
import inspect
import os
import pkgutil
import re
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..trace.build import importable, package_path

__all__ = ["Candidate", "Loaded", "candidates", "load_target_modules", "mentions_positions", "position_evidence",
           "POSITION_PARAM"]

NAME_RE = re.compile(r"rotary|rope|position|posemb|pos_emb|pos_embed|alibi|sinusoid|bucket|freqs_cis|"
                     r"relative_pos|timestep_embed", re.I)
POSITION_PARAM = re.compile(r"^(pos|positions?|position_ids|pos_ids|input_pos|cache_position|"
                            r"relative_position|rel_pos|distances?|seq_pos|offsets?|indices|ids)$")
_MATH_RE = re.compile(r"\b(sin|cos|pow|exp|polar|outer|einsum|log)\b|\*\*")
_TRIG_RE = re.compile(r"\b(sin|cos|polar)\b")
_BUCKET_RE = re.compile(r"bucket|relative_position|distance", re.I)
_LAYER_RE = re.compile(r"\bnn\.(Linear|Conv[123]d|ModuleList|Sequential|LayerNorm|MultiheadAttention)\(|"
                       r"\b(Linear|Conv2d|ModuleList|Attention|Block|Transformer\w*)\(")
_TEXT_RE = re.compile(r"rotary|rope|position|alibi|sinusoid|bucket|freqs_cis", re.I)


@dataclass
class Loaded:
    """An imported module (``module``), or the one that failed (``module`` None, ``error`` why); ``note``: how
    it was loaded where that is not how Python imports it (its packages' ``__init__`` not run: why, in one
    line)."""

    name: str
    module: ModuleType | None
    error: str | None = None
    note: str | None = None


@dataclass
class Candidate:
    """A class or function with position evidence: where it is, and why it was picked.

    ``kind``: ``class`` (an ``nn.Module`` subclass) or ``function``; ``where``: ``file:line`` of its definition;
    ``evidence``: the signs found; ``layers``: a class that holds layers (Linear, Conv, attention blocks; or a
    transformers ``PreTrainedModel``, whose default config builds a whole model): a model or a layer, not
    position code by itself (listed, not built)."""

    module: str
    name: str
    obj: Any
    kind: str
    where: str
    evidence: tuple[str, ...]
    layers: bool = False

    @property
    def label(self) -> str:
        return f"{self.module}.{self.name}"


def _one_line(e: BaseException) -> str:
    text = " ".join(f"{type(e).__name__}: {e}".split())
    return text if len(text) <= 240 else text[:237] + "..."


def mentions_positions(path: str) -> bool:
    """Whether a source file's text could hold position code (a position-like name, or an ``arange`` beside
    sin / cos / bucket): the files a scan imports."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return False
    return bool(_TEXT_RE.search(text)) or ("arange" in text and bool(_TRIG_RE.search(text)))


def _try_import(name: str) -> tuple[ModuleType | None, BaseException | None]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return importlib.import_module(name), None
    except BaseException as e:  # noqa: BLE001 - SystemExit / KeyboardInterrupt-free: a module's import failing
        if isinstance(e, KeyboardInterrupt):
            raise
        return None, e


def _import(name: str) -> Loaded:
    module, e = _try_import(name)
    return Loaded(name, module) if e is None else Loaded(name, None, f"import failed: {_one_line(e)}")


def _import_file(path: str, name: str) -> Loaded:
    label, old = name, sys.modules.get(name)
    if old is not None and os.path.abspath(getattr(old, "__file__", "") or "") != os.path.abspath(path):
        name = f"_scanned_{abs(hash(os.path.abspath(path)))}_{name}"  # a module of that name is another file
    elif old is not None:
        return Loaded(label, old)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        return Loaded(label, None, f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            spec.loader.exec_module(module)
    except BaseException as e:  # noqa: BLE001
        if isinstance(e, KeyboardInterrupt):
            raise
        sys.modules.pop(name, None)
        return Loaded(label, None, f"import failed: {_one_line(e)}")
    return Loaded(label, module)


def _stand_in(name: str, folder: str) -> ModuleType:
    """A package with no ``__init__`` run: a namespace over ``folder``, so its modules import from there."""
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = [folder]
    module = importlib.util.module_from_spec(spec)
    module.__path__ = [folder]
    return module


def _under(package: str) -> dict[str, ModuleType]:
    """``package`` and its modules as ``sys.modules`` holds them now."""
    return {k: v for k, v in sys.modules.items() if k == package or k.startswith(package + ".")}


def _restore(package: str, saved: dict[str, ModuleType]) -> None:
    """``package`` and its modules in ``sys.modules`` back to ``saved`` (what a failed import left half-loaded,
    stand-ins and the modules loaded under them removed)."""
    for k in [k for k in _under(package) if k not in saved]:
        del sys.modules[k]
    sys.modules.update(saved)


def _note(packages: str, what: str, err: str) -> str:
    return (f"loaded without running the __init__ of {packages} (importing {what} raised {err}): namespace "
            "stand-ins, so its own imports load the real files")


@contextlib.contextmanager
def _package_module(path: str, root: str, parts: list[str], failed: str | None = None) -> Iterator[Loaded]:
    """The file ``path`` imported as the module ``parts`` names (``package.module``, ``root`` importable), as
    Python imports it: its packages' ``__init__`` first.  Where that fails and the file itself imports without
    them (an ``__init__`` that needs a package not installed here, for code the file does not use), it is loaded
    with its packages as stand-ins (:func:`_stand_in`: relative and absolute imports of its siblings load the
    real files), noted in ``Loaded.note``; the stand-ins and the modules loaded under them leave ``sys.modules``
    when the block ends.  A module of that name from another file: None (the caller loads the file by itself).
    ``failed``: the error (``import failed: ...``) that importing it raised already (not tried again).
    """
    full, dotted, top = os.path.abspath(path), ".".join(parts), parts[0]
    saved = _under(top)
    if failed is None:
        with importable(root):
            loaded = _import(dotted)
        if loaded.module is not None:
            same = os.path.abspath(getattr(loaded.module, "__file__", "") or "") == full
            yield Loaded(dotted, loaded.module) if same else Loaded(dotted, None)
            return
        _restore(top, saved)  # what the failed import left half-loaded
    else:
        loaded = Loaded(dotted, None, failed)
    try:
        for i in range(1, len(parts)):  # each package not imported (a real one already imported stays)
            name = ".".join(parts[:i])
            if name not in sys.modules:
                sys.modules[name] = _stand_in(name, os.path.join(root, *parts[:i]))
        with importable(root):
            again = _import(dotted)
        if again.module is None or os.path.abspath(getattr(again.module, "__file__", "") or "") != full:
            err = (loaded.error or "").removeprefix("import failed: ")
            also = (again.error or "").removeprefix("import failed: ")
            yield Loaded(dotted, None, f"import failed: {err}" + (
                " (the same without its packages' __init__)" if also == err else
                f"; without its packages' __init__: {also}"))
            return
        packages = ", ".join(n for n in (".".join(parts[:i]) for i in range(1, len(parts))) if n not in saved)
        if not packages:  # every package was imported already: it imported now as Python imports it
            yield Loaded(dotted, again.module)
            return
        yield Loaded(dotted, again.module, note=_note(packages, dotted,
                                                      (loaded.error or "").removeprefix("import failed: ")))
    finally:
        _restore(top, saved)


def _check_syntax(path: str) -> None:
    try:
        with open(path, encoding="utf-8") as fh:
            ast.parse(fh.read(), filename=path)
    except SyntaxError as e:
        raise ValueError(f"TARGET {path}: syntax error at line {e.lineno}: {e.msg}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"TARGET {path}: cannot read it ({type(e).__name__}: {e})") from None


def _walk_package(pkg: ModuleType) -> Iterator[Loaded]:
    """``pkg`` and each of its modules whose text mentions positions, imported; the modules of a subpackage whose
    ``__init__`` raised ImportError are loaded without it (:func:`_without_inits`), another error is listed."""
    yield Loaded(pkg.__name__, pkg)
    failed: dict[str, tuple[str, BaseException | None]] = {}
    finders: dict[str, Any] = {}
    infos = []

    def onerror(name: str) -> None:  # a subpackage that did not import: walk_packages skips its modules
        failed[name] = (os.path.join(getattr(finders.get(name), "path", ""), name.rsplit(".", 1)[1]),
                        sys.exc_info()[1])

    for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".", onerror=onerror):
        finders[info.name] = info.module_finder
        infos.append(info)
    for info in sorted(infos, key=lambda i: i.name):
        if info.ispkg:
            continue
        path = os.path.join(getattr(info.module_finder, "path", ""), info.name.rsplit(".", 1)[1] + ".py")
        if os.path.isfile(path) and not mentions_positions(path):
            continue
        yield _import(info.name)
    for name, (folder, e) in sorted(failed.items()):
        if isinstance(e, ImportError) and os.path.isdir(folder):
            yield from _without_inits(name, folder, _one_line(e))
        else:
            yield Loaded(name, None, f"import failed: {_one_line(e) if e is not None else 'unknown error'}")


def _package_files(folder: str, package: str) -> list[tuple[str, str]]:
    """(dotted name, file) of each ``.py`` file of the package ``package`` in ``folder`` and its subpackages
    (folders with an ``__init__.py``), sorted by name; an ``__init__.py`` is named by its package."""
    out = []
    for d, subdirs, names in os.walk(folder):
        subdirs[:] = [s for s in subdirs if s.isidentifier() and os.path.isfile(os.path.join(d, s, "__init__.py"))]
        rel = os.path.relpath(d, folder)
        base = package if rel == os.curdir else package + "." + rel.replace(os.sep, ".")
        for n in names:
            if n.endswith(".py") and n[:-3].isidentifier():
                out.append((base if n == "__init__.py" else f"{base}.{n[:-3]}", os.path.join(d, n)))
    return sorted(out)


def _defines(path: str) -> bool:
    """Whether a file defines a function or class at its top level (an ``__init__`` that only imports does not)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            tree = ast.parse(fh.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return True
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for n in tree.body)


def _without_inits(package: str, folder: str, err: str) -> Iterator[Loaded]:
    """The modules of ``package`` (its files in ``folder``), whose import raised ``err`` (an ImportError: an
    ``__init__`` that needs a package not installed here), each file whose text mentions positions loaded with
    every package of the tree (and those above it that are not imported) as namespace stand-ins, as a file
    target is (:func:`_package_module`), each with the note; a module that still does not import is yielded
    with why.  An ``__init__`` that defines position code of its own is listed as not run.  The stand-ins and
    the modules loaded under them leave ``sys.modules`` when the iteration ends.
    """
    parts = package.split(".")
    root = os.path.abspath(folder)
    for _ in parts:
        root = os.path.dirname(root)
    for k in _under(package):  # what the failed import left half-loaded
        del sys.modules[k]
    saved = _under(parts[0])
    files = _package_files(folder, package)
    made: set[str] = set()
    try:
        packages = [".".join(parts[:i]) for i in range(1, len(parts))] + [n for n, f in files
                                                                        if f.endswith("__init__.py")]
        for name in packages:
            if name not in sys.modules:
                sys.modules[name] = _stand_in(name, os.path.join(root, *name.split(".")))
                made.add(name)
        for dotted, path in files:
            if path.endswith("__init__.py"):
                if mentions_positions(path) and _defines(path):
                    yield Loaded(dotted, None, f"not run: importing {package} raised {err} (its modules are "
                                               "scanned with namespace stand-ins for its packages)")
                continue
            if not mentions_positions(path):
                continue
            stood = ", ".join(n for n in (".".join(dotted.split(".")[:i]) for i in range(1, dotted.count(".") + 1))
                              if n in made)
            with importable(root):
                loaded = _import(dotted)
            if loaded.module is None:
                yield Loaded(dotted, None, f"{loaded.error} (loaded without running the __init__ of {stood}: "
                                           f"importing {package} raised {err})")
            elif os.path.abspath(getattr(loaded.module, "__file__", "") or "") != os.path.abspath(path):
                yield Loaded(dotted, None, f"import failed: {dotted} is another module than {path}")
            else:
                yield Loaded(dotted, loaded.module, note=_note(stood, package, err) if stood else None)
    finally:
        _restore(parts[0], saved)


MAX_FOLDER_FILES = 5000  # .py files a folder scan reads (a user's code, not a whole disk)
MAX_FOLDER_DIRS = 5000  # folders it walks
_SKIPPED_DIRS = frozenset({"__pycache__", "site-packages", "node_modules"})


def _folder_files(path: str) -> list[str]:
    """The ``.py`` files under ``path`` in sorted order, skipping hidden folders, ``__pycache__``,
    ``site-packages``, ``node_modules`` and virtual environments (a folder holding ``pyvenv.cfg``).  A tree
    past :data:`MAX_FOLDER_FILES` files or :data:`MAX_FOLDER_DIRS` folders raises ValueError as soon as the walk
    passes the limit, so ``/`` or a home folder is refused in a fraction of a second instead of walked."""
    root = os.path.abspath(path)
    files: list[str] = []
    dirs = 0
    for d, subdirs, names in os.walk(root):
        dirs += 1
        subdirs[:] = sorted(s for s in subdirs if not s.startswith(".") and s not in _SKIPPED_DIRS
                            and not os.path.isfile(os.path.join(d, s, "pyvenv.cfg")))
        files += [os.path.join(d, n) for n in sorted(names) if n.endswith(".py")]
        if len(files) > MAX_FOLDER_FILES or dirs > MAX_FOLDER_DIRS:
            raise ValueError(f"TARGET {path}: a tree of more than {MAX_FOLDER_FILES} .py files or "
                             f"{MAX_FOLDER_DIRS} folders; name a package or a smaller folder of your code")
    return files


def _folder(path: str) -> Iterator[Loaded]:
    root = os.path.abspath(path)
    files = _folder_files(path)
    for f in files:
        if not mentions_positions(f):
            continue
        rel = os.path.relpath(f, root)[:-3].replace(os.sep, ".")
        with importable(root):
            loaded = _import_file(f, rel.removesuffix(".__init__") or os.path.basename(root))
        yield loaded


def load_target_modules(target: str) -> Iterator[Loaded]:
    """The modules a scan of ``target`` imports: a ``.py`` file, a folder of ``.py`` files (each file whose
    text mentions positions), or an importable module or package (each submodule whose text does).  A target
    that does not exist, does not parse or does not import raises ValueError naming it; a submodule that does
    not import is yielded with its error (and listed by the scan).  A file inside a package is imported as its
    module (``package.module``); where a package's ``__init__`` does not import and the file does without it,
    it is loaded with namespace stand-ins for its packages, with a ``note``, until the iteration moves on.  A
    name, or a package folder, whose import raises ImportError (an ``__init__`` that needs a package not
    installed here, as timm's needs torchvision) is found by ``find_spec`` of its top package (its folder;
    nothing runs) and its module files are loaded the same way, each with the note; a subpackage whose
    ``__init__`` raises, the same (:func:`_without_inits`).

    >>> [(m.name, m.error) for m in load_target_modules("precision_audit.trace.examples")]
    [('precision_audit.trace.examples', None)]
    """
    if not isinstance(target, str) or not target.strip():
        raise ValueError(f"TARGET {target!r} must be a package or module name, a .py file or a folder")
    if target.endswith(".py") or os.path.isfile(target):
        if not os.path.isfile(target):
            raise ValueError(f"TARGET {target}: no such file")
        _check_syntax(target)
        root, parts = package_path(target)
        if len(parts) > 1 and all(p.isidentifier() for p in parts):  # a file inside a package
            with _package_module(target, root, parts) as loaded:
                if loaded.error is not None:
                    raise ValueError(f"TARGET {target}: {loaded.error}")
                if loaded.module is not None:
                    yield loaded
                    return
        name = os.path.basename(target)[:-3] if target.endswith(".py") else os.path.basename(target)
        with importable(os.path.dirname(os.path.abspath(target))):
            loaded = _import_file(target, name)
        if loaded.module is None:
            raise ValueError(f"TARGET {target}: {loaded.error}")
        yield loaded
        return
    if os.path.isdir(target) and os.path.isfile(os.path.join(target, "__init__.py")):
        root = os.path.abspath(target)
        name = os.path.basename(root)
        saved = _under(name)
        with importable(os.path.dirname(root)):  # a package folder: imported as a package (relative imports work)
            module, e = _try_import(name)
            if module is None and isinstance(e, ImportError) and name.isidentifier():
                _restore(name, saved)
                yield from _without_inits(name, root, _one_line(e))
                return
            if module is None or os.path.dirname(os.path.abspath(module.__file__ or "")) != root:
                raise ValueError(f"TARGET {target}: " + (f"does not import: {_one_line(e)}" if e is not None
                                                         else f"another package {name} is imported first: scan "
                                                         "it by name"))
            yield from _walk_package(module)
        return
    if os.path.isdir(target):
        yield from _folder(target)
        return
    if not re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*", target):
        raise ValueError(f"TARGET {target!r} is neither a .py file, a folder nor a module name")
    top = target.split(".")[0]
    saved = _under(top)
    with importable(os.getcwd()):  # a module of the current folder, as python -m finds it
        module, e = _try_import(target)
    if module is None:
        _restore(top, saved)
        yield from _by_name_without_inits(target, e)
        return
    if hasattr(module, "__path__"):
        yield from _walk_package(module)
    else:
        yield Loaded(target, module)


def _by_name_without_inits(target: str, e: BaseException | None) -> Iterator[Loaded]:
    """A module or package named ``target`` whose import raised ``e``: where that is an ImportError and the
    files are found without running any of them (``find_spec`` of the top package: its folder), a package's
    modules as :func:`_without_inits` loads them, a module whose packages do not all import as a file target is
    (:func:`_package_module`); else ValueError naming the target and the error."""
    err = _one_line(e) if e is not None else "unknown error"
    parts = target.split(".")
    folder = None
    if isinstance(e, ImportError) and e.name != target:  # not the target missing: something it imports
        with importable(os.getcwd()):
            try:
                spec = importlib.util.find_spec(parts[0])  # a top-level name: nothing runs
            except (ImportError, ValueError):
                spec = None
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        if len(locations) == 1:
            folder = os.path.join(locations[0], *parts[1:])
    if folder is not None and os.path.isfile(os.path.join(folder, "__init__.py")):
        yield from _without_inits(target, folder, err)
        return
    if folder is not None and os.path.isfile(folder + ".py") and not all(
            ".".join(parts[:i]) in sys.modules for i in range(1, len(parts))):  # else its packages import: its own
        root = os.path.dirname(locations[0])
        with _package_module(folder + ".py", root, parts, failed=f"import failed: {err}") as loaded:
            if loaded.module is not None:
                yield loaded
                return
            raise ValueError(f"TARGET {target}: {(loaded.error or err).replace('import failed', 'does not import')}")
    raise ValueError(f"TARGET {target}: does not import: {err}" + (
        f"; no file for it in {locations[0]}" if folder is not None and not os.path.isfile(folder + ".py") else ""))


def _source(obj: Any) -> str:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return ""


def _params(fn: Any) -> tuple[str, ...]:
    try:
        return tuple(p for p in inspect.signature(fn).parameters if p != "self")
    except (TypeError, ValueError):
        return ()


def position_evidence(source: str, name: str, params: tuple[str, ...]) -> tuple[str, ...]:
    """The signs of position code in a callable's source, its name and its parameter names (empty: none)."""
    found = []
    if NAME_RE.search(name):
        found.append(f"name {name}")
    pos = [p for p in params if POSITION_PARAM.match(p)]
    if pos:
        found.append(f"position argument {pos[0]}")
    if "arange" in source and _MATH_RE.search(source):
        found.append("arange into sin/cos/pow/exp")
    elif "arange" in source:
        found.append("arange")
    if _TRIG_RE.search(source) and ("*" in source or "outer" in source or "einsum" in source) \
            and not any(f.startswith("arange") for f in found):
        found.append("sin/cos of a product")
    if _BUCKET_RE.search(source) and ("arange" in source or pos):
        found.append("bucket or bias from distances")
    strong = [f for f in found if not f.startswith(("position argument", "arange")) or f.startswith("arange into")]
    return tuple(found) if strong or (pos and "arange" in source) else ()


def _where(obj: Any) -> str:
    try:
        return f"{os.path.basename(inspect.getsourcefile(obj) or '?')}:{inspect.getsourcelines(obj)[1]}"
    except (OSError, TypeError):
        return "?"


def _is_module_class(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and inspect.isclass(obj) and issubclass(obj, torch.nn.Module)


def _pretrained_model(cls: type) -> bool:
    """A transformers model class (``PreTrainedModel`` in its bases): built from its default config it is a
    whole model (Qwen2-VL's: 8B parameters), however its ``__init__`` makes its layers (``_from_config``)."""
    return any(b.__name__ == "PreTrainedModel" and b.__module__.startswith("transformers.")
               for b in inspect.getmro(cls)[1:])


def candidates(module: ModuleType, keep: Callable[[str], bool] | None = None) -> list[Candidate]:
    """The classes and functions defined in ``module`` (not imported into it) with position evidence, in
    definition order; ``keep``: only these names.

    >>> import precision_audit.trace.examples as ex
    >>> [(c.name, c.kind) for c in candidates(ex)]
    [('bf16_positions', 'function'), ('fp32_rotary', 'function')]
    """
    out = []
    for name, obj in list(vars(module).items()):
        if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue
        if keep is not None and not keep(name):
            continue
        if _is_module_class(obj):
            src = _source(obj)
            methods = [f for f in vars(obj).values() if inspect.isfunction(f)]
            params = tuple(p for f in methods if f.__name__ == "forward" for p in _params(f))
            ev = position_evidence(src, name, params)
            if ev:
                init = _source(vars(obj)["__init__"]) if "__init__" in vars(obj) else ""
                out.append(Candidate(module.__name__, name, obj, "class", _where(obj), ev,
                                     layers=bool(_LAYER_RE.search(init)) or _pretrained_model(obj)))
        elif inspect.isfunction(obj):
            ev = position_evidence(_source(obj), name, _params(obj))
            if ev:
                out.append(Candidate(module.__name__, name, obj, "function", _where(obj), ev))
    return sorted(out, key=lambda c: _line(c.where))


def _line(where: str) -> int:
    try:
        return int(where.rsplit(":", 1)[1])
    except (IndexError, ValueError):
        return 0
