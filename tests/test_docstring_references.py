"""Issue #49: the rooms moved and were renamed, and a docstring's cross-reference
(``:mod:`._explorer```, ``:class:`~.server.AmqpServer```) does not move with them: it
still reads, and leads nowhere. Every reference of the form ``:mod:``, ``:class:``,
``:func:``, ``:meth:``, ``:attr:``, ``:data:``, ``:exc:`` in aiosb's modules names
something that exists (a relative one from the module's own package, as Sphinx reads
it)."""

from __future__ import annotations

import builtins
import importlib
import inspect
import re
from pathlib import Path

import aiosb

ROOT = Path(aiosb.__file__).parent
REFERENCE = re.compile(r":(?:mod|class|func|meth|attr|data|exc|obj):`~?([\w.]+)`")


def absolute(name: str, package: str) -> str:
    """``name`` as a dotted path from the top: ``.x`` is in ``package``, ``..x`` one up."""
    if not name.startswith("."):
        return name
    dots = len(name) - len(name.lstrip("."))
    base = package.split(".")
    return ".".join([*base[: len(base) - (dots - 1)], name.lstrip(".")])


def exists(name: str) -> bool:
    """Whether ``name`` leads to a builtin, a module, or a name (an attribute, a
    dataclass field, an annotated member, an instance attribute) of one."""
    parts = name.split(".")
    if len(parts) == 1 and hasattr(builtins, name):
        return True
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if hasattr(found, attribute):
                found = getattr(found, attribute)
                continue
            declared = set(getattr(found, "__annotations__", {}))
            declared |= set(getattr(found, "__dataclass_fields__", {}))
            declared |= set(getattr(found, "__slots__", ()))
            if isinstance(found, type):  # an instance attribute its methods set
                source = inspect.getsource(found)
                declared |= set(re.findall(r"\bself\.(\w+)\s*[:=]", source))
            return attribute in declared and attribute == parts[-1]
        return True
    return False


def classes(dotted: str) -> list[str]:
    """The classes a module defines, as dotted paths."""
    module = importlib.import_module(dotted)
    return [f"{dotted}.{name}" for name, value in vars(module).items()
            if isinstance(value, type) and value.__module__ == dotted]


def broken_references(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        dotted = ".".join(path.relative_to(root.parent).with_suffix("").parts)
        dotted = dotted.removesuffix(".__init__")
        package = dotted if path.name == "__init__.py" else dotted.rsplit(".", 1)[0]
        text = path.read_text()
        for match in REFERENCE.finditer(text):
            name = match.group(1)
            target = absolute(name, package)
            # as Sphinx: a name not found from the top is looked for in the module itself,
            # then in its classes (a method named inside its class's docstrings)
            if not exists(target) and (name.startswith(".") or not any(
                    exists(f"{inside}.{name}") for inside in [dotted, *classes(dotted)])):
                line = text[: match.start()].count("\n") + 1
                found.append(f"{path.relative_to(root.parent)}:{line}: {match.group(0)}")
    return found


def test_every_cross_reference_in_a_docstring_leads_somewhere():
    assert broken_references(ROOT) == []


def test_a_reference_to_a_module_that_moved_is_found(tmp_path, monkeypatch):
    """The check itself: a package whose docstrings name a module it no longer has, a
    name its module lacks, and a relative path one level too high, all three found."""
    package = tmp_path / "movedpkg"
    package.mkdir()
    (package / "__init__.py").write_text('"""See :mod:`.here` and :mod:`._gone`."""\n')
    (package / "here.py").write_text(
        '"""Has :func:`thing`, :func:`.here.thing`, not :func:`other` nor\n'
        ':class:`~.here.Missing`; and :mod:`..movedpkg.here`."""\n\ndef thing() -> None: ...\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    found = broken_references(package)
    assert found == [
        "movedpkg/__init__.py:1: :mod:`._gone`",
        "movedpkg/here.py:1: :func:`other`",
        "movedpkg/here.py:2: :class:`~.here.Missing`",
    ]
