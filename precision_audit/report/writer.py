"""The report writer: sections of text, tables and figures -> report.md,
report.html (self-contained: PNGs as base64 data URIs), the PNGs and
results.json, written atomically into an output directory.

Deterministic: PNGs carry no metadata, the HTML no date or random id, and
results.json has sorted keys, so two runs write byte-identical files.

>>> import tempfile, pathlib
>>> rep = Report("Demo", "demo", {"n": 1}, [Section("One", [Para("Hello `x`.")], {"rows": [{"a": 1}]})])
>>> with tempfile.TemporaryDirectory() as d:
...     sorted(p.name for p in write_report(rep, pathlib.Path(d) / "out"))
['report.html', 'report.md', 'results.json']
"""

from __future__ import annotations

import base64
import html
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

__all__ = ["Bullets", "Figure", "Para", "Report", "Section", "Table", "output_dir", "write_report"]


@dataclass(frozen=True)
class Para:
    """A paragraph of markdown-light text (`code` and **bold** only)."""

    text: str


@dataclass(frozen=True)
class Bullets:
    """A list of short markdown-light lines (one item each)."""

    items: tuple[str, ...]


@dataclass(frozen=True)
class Table:
    """A table: a header row and rows of cells (already formatted text)."""

    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def __post_init__(self) -> None:
        for r in self.rows:
            if len(r) != len(self.header):
                raise ValueError(f"table row {r!r} has {len(r)} cells for {len(self.header)} columns")


@dataclass(frozen=True)
class Figure:
    """A PNG named ``file``, drawn by ``draw(path)`` when the report is written."""

    file: str
    caption: str
    draw: Callable[[Path], Any] = field(compare=False, repr=False)

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+\.png", self.file):
            raise ValueError(f"figure file {self.file!r} must be a plain name ending in .png")


Block = Union[Para, Bullets, Table, Figure]


@dataclass(frozen=True)
class Section:
    """A titled part of the report; ``results`` maps a key to the JSON rows its numbers come from."""

    title: str
    blocks: Sequence[Block]
    results: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Report:
    """A whole report: ``kind`` (headline or model), the settings it ran with, its sections."""

    title: str
    kind: str
    settings: dict[str, Any]
    sections: Sequence[Section]
    intro: Sequence[Block] = ()

    def figures(self) -> list[Figure]:
        """Every figure, in order."""
        blocks = list(self.intro) + [b for s in self.sections for b in s.blocks]
        return [b for b in blocks if isinstance(b, Figure)]

    def results(self) -> dict[str, Any]:
        """results.json content: every number the report shows, keyed by section result name."""
        out: dict[str, Any] = {}
        for s in self.sections:
            for k, v in s.results.items():
                if k in out:
                    raise ValueError(f"two sections give results {k!r}")
                out[k] = v
        return {"report": self.kind, "title": self.title, "settings": self.settings, "results": out}


# ------------------------------------------------------------------------------ rendering

def _md_table(t: Table) -> str:
    def row(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    return "\n".join([row(t.header), "| " + " | ".join("---" for _ in t.header) + " |"] + [row(r) for r in t.rows])


def _md_block(b: Block) -> str:
    if isinstance(b, Para):
        return b.text
    if isinstance(b, Bullets):
        return "\n".join(f"- {item}" for item in b.items)
    if isinstance(b, Table):
        return _md_table(b)
    return f"![]({b.file})\n\n*{b.caption}*"  # the caption once, under the image (alt text would repeat it)


def render_markdown(rep: Report) -> str:
    """report.md: headings, paragraphs, tables and image links to the PNGs beside it."""
    parts = [f"# {rep.title}"] + [_md_block(b) for b in rep.intro]
    for s in rep.sections:
        parts.append(f"## {s.title}")
        parts += [_md_block(b) for b in s.blocks]
    parts.append("Every number above is in `results.json`.")
    return "\n\n".join(parts) + "\n"


def _inline(text: str) -> str:
    t = html.escape(text, quote=False)
    t = re.sub(r"`([^`]+)`", r"<code>\1</code>", t)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", t)


def _html_block(b: Block, images: dict[str, bytes]) -> str:
    if isinstance(b, Para):
        return f"<p>{_inline(b.text)}</p>"
    if isinstance(b, Bullets):
        return "<ul>" + "".join(f"<li>{_inline(item)}</li>" for item in b.items) + "</ul>"
    if isinstance(b, Table):
        head = "".join(f"<th>{_inline(c)}</th>" for c in b.header)
        body = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in b.rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    data = base64.b64encode(images[b.file]).decode("ascii")
    cap = html.escape(b.caption)
    return (f'<figure><img alt="{cap}" src="data:image/png;base64,{data}">'
            f"<figcaption>{cap}</figcaption></figure>")


_CSS = ("body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}"
        "table{border-collapse:collapse;margin:1em 0;font-size:90%}th,td{border:1px solid #bbb;padding:3px 8px;"
        "text-align:right}th{background:#eee}code{background:#f3f3f3;padding:0 3px}img{max-width:100%}"
        "figure{margin:1.5em 0}figcaption{font-style:italic;color:#444}")


def render_html(rep: Report, images: dict[str, bytes]) -> str:
    """report.html: one self-contained file, the PNGs embedded as base64 data URIs."""
    parts = [f"<h1>{_inline(rep.title)}</h1>"] + [_html_block(b, images) for b in rep.intro]
    for s in rep.sections:
        parts.append(f"<h2>{_inline(s.title)}</h2>")
        parts += [_html_block(b, images) for b in s.blocks]
    parts.append("<p>Every number above is in <code>results.json</code>.</p>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(rep.title)}</title><style>{_CSS}</style></head><body>\n"
            + "\n".join(parts) + "\n</body></html>\n")


# ------------------------------------------------------------------------------ output directory

class OutputDirError(ValueError):
    """The output directory cannot be written (it is a file, or not writable)."""


@contextmanager
def output_dir(out: str | Path) -> Iterator[Path]:
    """A temporary directory beside ``out`` to build in; on success its files move into ``out``.

    ``out`` that does not exist yet is created by one rename; an existing
    directory gets each file replaced by a rename (never half-written).  On
    error nothing is left behind.  Raises :class:`OutputDirError` (a
    ValueError naming the path) before any work when ``out`` is a file or
    its folder is not writable.
    """
    target = Path(out)
    if target.exists() and not target.is_dir():
        raise OutputDirError(f"--out {str(out)!r} is a file, not a directory")
    parent = target.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=parent))
    except OSError as e:
        raise OutputDirError(f"cannot write the report into {str(out)!r}: {e.strerror or e}") from None
    if target.exists() and not os.access(target, os.W_OK | os.X_OK):
        shutil.rmtree(tmp, ignore_errors=True)
        raise OutputDirError(f"cannot write the report into {str(out)!r}: permission denied")
    try:
        yield tmp
        os.chmod(tmp, 0o755)
        if target.exists():
            for f in sorted(tmp.iterdir()):
                os.replace(f, target / f.name)
            tmp.rmdir()
        else:
            os.replace(tmp, target)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise OutputDirError(f"cannot write the report into {str(out)!r}: {e.strerror or e}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_into(rep: Report, d: Path, progress: Callable[[str], None] | None = None) -> list[Path]:
    """Draw the figures and write report.md, report.html and results.json into the folder ``d``."""
    images: dict[str, bytes] = {}
    for i, fig in enumerate(rep.figures(), 1):
        if fig.file in images:
            raise ValueError(f"two figures named {fig.file!r}")
        if progress:
            progress(f"drawing {fig.file} ({i}/{len(rep.figures())})")
        fig.draw(d / fig.file)
        images[fig.file] = (d / fig.file).read_bytes()
    (d / "report.md").write_text(render_markdown(rep), encoding="utf-8")
    (d / "report.html").write_text(render_html(rep, images), encoding="utf-8")
    (d / "results.json").write_text(
        json.dumps(rep.results(), indent=1, sort_keys=True, allow_nan=False) + "\n", encoding="utf-8")
    return [d / n for n in list(images) + ["report.md", "report.html", "results.json"]]


def write_report(rep: Report, out: str | Path, progress: Callable[[str], None] | None = None) -> list[Path]:
    """Write ``rep`` into ``out`` atomically (see :func:`output_dir`); returns the paths written."""
    with output_dir(out) as tmp:
        names = [p.name for p in write_into(rep, tmp, progress)]
    return [Path(out) / n for n in names]
