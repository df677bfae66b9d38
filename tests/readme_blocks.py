"""The Python code blocks of README.md and how each one runs (a test helper).

Each block is preceded by ``<!-- readme-test: KIND -->``, which says what it needs:

- ``script``: a whole program, run as it is;
- ``ns``: top-level ``await``s on ``ns``, an open namespace on the embedded emulator;
- ``async``: top-level ``await``s that open their own connections;
- ``server``: code talking to ``http://127.0.0.1:5380``, run against an ``aiosb serve``
  on a free port (the address is replaced by the server's);
- ``pytest``: a test module, run by pytest in a subprocess with the configuration the
  README states;
- ``spark``: code with a SparkSession ``spark`` and a DataFrame ``events``
  (tests/spark/test_readme_spark.py runs it);
- ``sdk``: the official SDK against ``aiosb serve``'s AMQP port ``localhost:5672`` (and
  aiosb at ``http://127.0.0.1:5380``), run against one on free ports;
- ``azure``: needs a real Azure namespace: compiled (it must parse), not run.
"""

from __future__ import annotations

import ast
import inspect
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

README = Path(__file__).parent.parent / "README.md"
KINDS = {"script", "ns", "async", "server", "sdk", "admin", "pytest", "spark", "azure"}
#: The address README blocks use for ``aiosb serve``.
SERVER = "http://127.0.0.1:5380"
#: The AMQP address README blocks use for ``aiosb serve`` (the official SDKs).
AMQP = "localhost:5672"
_BLOCK = re.compile(r"(?:<!-- readme-test: (\w+) -->\n)?```python\n(.*?)```", re.S)


@dataclass
class Block:
    kind: str
    code: str
    line: int

    def __str__(self) -> str:
        return f"README.md:{self.line} ({self.kind})"

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


def blocks() -> list[Block]:
    """Every ``python`` block of the README, with its kind (``""`` when unmarked)."""
    text = README.read_text()
    return [
        Block(m.group(1) or "", m.group(2), text[: m.start()].count("\n") + 1)
        for m in _BLOCK.finditer(text)
    ]


def of_kind(*kinds: str) -> list[Block]:
    return [b for b in blocks() if b.kind in kinds]
