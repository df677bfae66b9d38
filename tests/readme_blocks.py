"""The Python code blocks of README.md and of the documentation (docs/**/*.md), and how
each one runs (a test helper).

Each block is preceded by ``<!-- test: KIND -->``, which says what it needs:

- ``script``: a whole program, run as it is;
- ``ns``: top-level ``await``s on ``ns``, an open namespace on the embedded emulator;
- ``async``: top-level ``await``s that open their own connections;
- ``server``: code talking to ``http://127.0.0.1:5380``, run against an ``aiosb serve``
  on a free port (the address is replaced by the server's);
- ``pytest``: a test module, run by pytest in a subprocess with the configuration the
  README and docs/testing.md state;
- ``spark``: code with a SparkSession ``spark`` and a DataFrame ``events``
  (tests/spark/test_readme_spark.py runs it);
- ``sdk``: the official SDK against ``aiosb serve``'s AMQP port ``localhost:5672`` (and
  aiosb at ``http://127.0.0.1:5380``), run against one on free ports;
- ``admin``: the official administration client with the data plane's connection string,
  against an ``aiosb serve`` with a certificate (it makes the queue ``invoices``);
- ``azure``: needs a real Azure namespace: compiled (it must parse), not run.

Blocks start at the left margin (tests/test_docs.py refuses an indented one, which this
would not find).
"""

from __future__ import annotations

import ast
import inspect
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
KINDS = {"script", "ns", "async", "server", "sdk", "admin", "pytest", "spark", "azure"}
#: The address README blocks use for ``aiosb serve``.
SERVER = "http://127.0.0.1:5380"
#: The AMQP address README blocks use for ``aiosb serve`` (the official SDKs).
AMQP = "localhost:5672"
_BLOCK = re.compile(r"^(?:<!-- test: (\w+) -->\n)?```python\n(.*?)^```", re.S | re.M)
#: A Python block indented (under a list item): not run, so not allowed (test_docs.py).
INDENTED = re.compile(r"^[ \t]+```python", re.M)


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

    def with_code(self, code: str) -> Block:
        """The same block with its code changed (addresses replaced)."""
        return Block(self.kind, code, self.line, self.file)

    def compiled(self, *, name: str | None = None) -> Any:
        """The block compiled, top-level ``await`` allowed."""
        return compile(self.code, name or str(self), "exec",
                       flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)

    async def run(self, namespace: dict[str, Any]) -> None:
        """Run the block in ``namespace``, awaiting it when it awaits."""
        code = self.compiled()
        result = eval(code, namespace)
        if code.co_flags & inspect.CO_COROUTINE:
            await result


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
