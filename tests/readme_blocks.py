"""The Python code blocks of README.md and of the documentation (docs/**/*.md), and how
each one runs (a test helper).

A block runs as a reader who copies it would run it (#51): in a fresh interpreter, with
nothing given to it but what its kind below says. A block that cannot run as written is
a *fragment*: its first line is a comment ``# fragment: ...`` that says what it needs,
naming every name it uses without defining or importing it (and saying ``async`` if it
awaits outside a function). A reader sees that line; the test checks it.

Each block is preceded by ``<!-- test: KIND -->``, which says how the test runs it:

- ``script``: a whole program, run by ``python`` in a subprocess;
- ``server``: a whole program talking to ``aiosb serve`` at its default addresses
  (``http://127.0.0.1:5380``, AMQP at ``localhost:5672``), run by ``python`` in a
  subprocess against an ``aiosb serve`` on free ports (the addresses replaced by its);
- ``sdk``: a ``server`` program using the official SDK that prints ``hello``;
- ``admin``: a ``server`` program using the official administration client with the
  data plane's connection string and the certificate the banner names (the path replaced
  by the server's); it makes the queue ``invoices``;
- ``pytest``: a test module, run by pytest in a subprocess with the configuration the
  README and docs/testing.md state;
- ``ns`` (a fragment): awaits on ``ns``, an open namespace on the embedded emulator, run
  in a subprocess that opens one and gives the block nothing else;
- ``spark`` (a fragment): code with a SparkSession ``spark`` and a DataFrame ``events``
  (tests/spark/test_readme_spark.py runs it);
- ``azure``: needs a real Azure namespace: compiled (it must parse), not run.

Blocks start at the left margin (tests/test_docs.py refuses an indented one, which this
would not find).
"""

from __future__ import annotations

import ast
import builtins
import inspect
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
KINDS = {"script", "server", "sdk", "admin", "pytest", "ns", "spark", "azure"}
#: The kinds run as written, with nothing given: never fragments.
WHOLE = {"script", "server", "sdk", "admin", "pytest"}
#: The kinds given what they lack: always fragments.
FRAGMENTS = {"ns", "spark"}
#: The address README blocks use for ``aiosb serve``.
SERVER = "http://127.0.0.1:5380"
#: The AMQP address README blocks use for ``aiosb serve`` (the official SDKs).
AMQP = "localhost:5672"
#: The first line of a block that cannot run as written.
FRAGMENT = "# fragment:"
_BLOCK = re.compile(r"^(?:<!-- test: (\w+) -->\n)?```python\n(.*?)^```", re.S | re.M)
#: A Python block indented (under a list item): not run, so not allowed (test_docs.py).
INDENTED = re.compile(r"^[ \t]+```python", re.M)
#: A Python block fenced by another name (```py): not run, so not allowed (test_docs.py).
OTHER_FENCE = re.compile(r"^[ \t]*```(?:py|py3|python3|pycon|ipython|ipython3)[ \t]*$", re.M)


@dataclass
class Block:
    kind: str
    code: str
    line: int
    file: str = "README.md"

    def __str__(self) -> str:
        return f"{self.file}:{self.line} ({self.kind})"

    @property
    def slug(self) -> str:
        """A name unique to the block, usable in a URL (``README-12``)."""
        return f"{Path(self.file).stem}-{self.line}"

    @property
    def fragment(self) -> str | None:
        """What the block says it needs (its ``# fragment:`` line), or None if it is whole."""
        first = self.code.split("\n", 1)[0]
        return first[len(FRAGMENT):].strip() if first.startswith(FRAGMENT) else None

    def with_code(self, code: str) -> Block:
        """The same block with its code changed (addresses replaced)."""
        return Block(self.kind, code, self.line, self.file)

    def compiled(self, *, name: str | None = None) -> Any:
        """The block compiled, top-level ``await`` allowed."""
        return compile(self.code, name or str(self), "exec",
                       flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)

    def awaits_at_top_level(self) -> bool:
        """Whether the block awaits outside a function (so runs in no file as written)."""
        return bool(self.compiled().co_flags & inspect.CO_COROUTINE)

    def undefined(self) -> set[str]:
        """The names the block uses and neither defines, imports nor finds among the
        builtins: what it needs given. (Scopes are not told apart: a name bound anywhere
        in the block counts as defined; enough for examples.)"""
        tree = ast.parse(self.code)
        used, bound = set(), set(dir(builtins))
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                (used if isinstance(node.ctx, ast.Load) else bound).add(node.id)
            elif isinstance(node, ast.alias):
                bound.add((node.asname or node.name).split(".")[0])
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                bound.add(node.name)
            elif isinstance(node, ast.arg):
                bound.add(node.arg)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                bound.add(node.name)
        return used - bound


def sources() -> list[Path]:
    """The README and every page of the documentation."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def blocks() -> list[Block]:
    """Every ``python`` block of the README and the docs, with its kind (``""`` when
    unmarked)."""
    found = []
    for path in sources():
        text = path.read_text()
        name = str(path.relative_to(ROOT))
        found += [
            Block(m.group(1) or "", m.group(2), text[: m.start()].count("\n") + 1, name)
            for m in _BLOCK.finditer(text)
        ]
    return found


def of_kind(*kinds: str) -> list[Block]:
    return [b for b in blocks() if b.kind in kinds]
