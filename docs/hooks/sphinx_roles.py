"""A Griffe extension for the API reference: Sphinx roles become links, private aliases go (#51).

aiosb's docstrings cross-reference with Sphinx's roles (``:class:`~aiosb.errors.X```,
``:mod:`.codec```, ``:meth:`close```), which mkdocstrings shows as literal text. Loaded by
mkdocstrings (``extensions:`` in ``mkdocs.yml``), this extension rewrites each role, once
the whole package is loaded, into mkdocstrings' own cross-reference, ``[`X`][aiosb.errors.X]``,
resolving the name as Sphinx does:

- ``.x`` is looked for in the module's own package, ``..x`` one level up;
- a dotted name is looked for from the top first;
- then in the object's scope: its class, its module (with what the module imports), its
  package;
- a leading ``~`` shows the last part only; ``title <target>`` shows the title.

A name that leads to something the reference renders (the object of a ``::: name``
directive of ``docs/reference/``, or a public member of it with a docstring, as the
options of ``mkdocs.yml`` render them) becomes a link, which the strict build checks: one
that leads nowhere fails ``mkdocs build --strict``. A name that leads elsewhere (a private
or unrendered module, an attribute without a docstring, a name outside aiosb such as
``ValueError``) is shown as code, without a link, since a link would lead nowhere.

It also shows a private import alias in signatures by the name it imports: aiosb's modules
``import datetime as _dt``, and a signature reads ``datetime.timedelta``, not
``_dt.timedelta``.
"""

from __future__ import annotations

import builtins
import dataclasses
import functools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import griffe

ROLE = re.compile(
    r":(?:py:)?(?:mod|class|func|meth|attr|data|exc|obj|const):"
    r"`(?P<tilde>~?)(?:(?P<title>[^`<]*?)\s*<(?P<explicit>[^`>]+)>|(?P<target>[^`]+))`"
)

DIRECTIVE = re.compile(r"^::: ([\w.]+)\s*$", re.M)
REFERENCE = Path(__file__).parent.parent / "reference"


class SphinxRoles(griffe.Extension):
    """Rewrites Sphinx roles in every docstring of a loaded package into mkdocstrings links."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader,
                   **kwargs: Any) -> None:
        for obj in _objects(pkg):
            if obj.docstring is not None:
                obj.docstring.value = translate(obj.docstring.value, obj, loader)
            _unalias_signature(obj)


def translate(text: str, obj: griffe.Object, loader: griffe.GriffeLoader) -> str:
    """``text`` with each Sphinx role replaced by a link, or by code where none can lead."""

    def replace(match: re.Match[str]) -> str:
        written = (match["explicit"] or match["target"]).strip()
        bare = written.lstrip(".")
        if match["title"]:
            shown = match["title"]
        elif match["tilde"]:
            shown = bare.rsplit(".", 1)[-1]
        else:
            shown = bare
        target = resolve(written, obj, loader)
        if target is None or not rendered(target, loader):
            return f"`{shown}`"
        return f"[`{shown}`][{target}]"

    return ROLE.sub(replace, text)


def resolve(name: str, obj: griffe.Object, loader: griffe.GriffeLoader) -> str | None:
    """The dotted path ``name`` leads to from ``obj``'s docstring, or None (not in aiosb)."""
    module = obj if isinstance(obj, griffe.Module) else obj.module
    if name.startswith("."):
        dots = len(name) - len(name.lstrip("."))
        package = module.path if module.is_package else module.path.rsplit(".", 1)[0]
        base = package.split(".")
        return _found(".".join([*base[: len(base) - (dots - 1)], name.lstrip(".")]), loader)
    if "." in name and (found := _found(name, loader)):
        return found
    if hasattr(builtins, name):
        return None
    first, _, rest = name.partition(".")
    scopes: list[griffe.Object] = []
    scope: griffe.Object | None = obj
    while scope is not None:
        if isinstance(scope, griffe.Class | griffe.Module):
            scopes.append(scope)
        scope = scope.parent
    for scope in scopes:
        if first in scope.members:
            member = scope.members[first]
            path = member.target_path if isinstance(member, griffe.Alias) else member.path
            if found := _found(f"{path}.{rest}" if rest else path, loader):
                return found
    return None


def _found(path: str, loader: griffe.GriffeLoader) -> str | None:
    """``path`` if it names a loaded object (through aliases), else None."""
    try:
        loader.modules_collection[path]
    except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None
    return path


def rendered(path: str, loader: griffe.GriffeLoader) -> bool:
    """Whether the reference renders ``path``: a directive's object, or a public member of
    one (not a module: submodules are not shown) that has a docstring."""
    found = loader.modules_collection[path]
    canonical = found.canonical_path
    for directive in _directives(REFERENCE):
        root = _found(directive, loader)
        if root is None:
            continue
        top = loader.modules_collection[root].canonical_path
        if canonical == top:
            return True
        if canonical.startswith(top + ".") and _public(canonical[len(top) + 1:]):
            return bool(found.docstring) and not found.is_module
    return False


@functools.cache
def _directives(pages: Path) -> tuple[str, ...]:
    return tuple(DIRECTIVE.findall("\n".join(p.read_text() for p in sorted(pages.glob("*.md")))))


def _public(path: str) -> bool:
    """Whether no part of the dotted ``path`` is private."""
    return not any(part.startswith("_") and not part.startswith("__")
                   for part in path.split("."))


def _objects(obj: griffe.Object) -> Iterator[griffe.Object]:
    yield obj
    for member in obj.members.values():
        if not isinstance(member, griffe.Alias):
            yield from _objects(member)


def _unalias_signature(obj: griffe.Object) -> None:
    """Each ``_x.name`` of a signature, ``_x`` a private alias of an import, shown by the
    imported name (``_dt.timedelta`` -> ``datetime.timedelta``); a private constant of
    the module in a parameter's default or a class field's, shown by its value
    (``= _MINUTE`` -> ``= datetime.timedelta(minutes=1)``)."""
    expressions: list[object] = []
    module = obj if isinstance(obj, griffe.Module) else obj.module
    if isinstance(obj, griffe.Function):
        for parameter in obj.parameters:
            parameter.default = _constant(parameter.default, module)
            expressions += [parameter.annotation, parameter.default]
        expressions.append(obj.returns)
    elif isinstance(obj, griffe.Attribute):
        if isinstance(obj.parent, griffe.Class):  # a field: a default of its class's signature
            obj.value = _constant(obj.value, module)
        expressions += [obj.annotation, obj.value]
    elif isinstance(obj, griffe.Class):
        expressions += obj.bases
    for expression in expressions:
        if not isinstance(expression, griffe.Expr):
            continue
        for part in expression.iterate(flat=True):
            if (isinstance(part, griffe.ExprName) and part.name.startswith("_")
                    and not part.name.startswith("__")
                    and not isinstance(part.parent, griffe.ExprName)):
                imported = module.imports.get(part.name)
                if imported is not None:
                    part.name = imported


def _constant(default: object, module: griffe.Module) -> object:
    """``default`` with each private module constant it names replaced by its value
    (``2 * _MINUTE`` -> ``2 * datetime.timedelta(minutes=1)``)."""
    if (isinstance(default, griffe.ExprName) and default.name.startswith("_")
            and not default.name.startswith("__")
            and not isinstance(default.parent, griffe.ExprName)):
        member = module.members.get(default.name)
        if isinstance(member, griffe.Attribute) and member.value is not None:
            return member.value
        return default
    if isinstance(default, griffe.Expr) and dataclasses.is_dataclass(default):
        for field in dataclasses.fields(default):
            if field.name == "parent":
                continue
            value = getattr(default, field.name)
            if isinstance(value, list):
                setattr(default, field.name, [_constant(item, module) for item in value])
            elif isinstance(value, griffe.Expr):
                setattr(default, field.name, _constant(value, module))
    return default
