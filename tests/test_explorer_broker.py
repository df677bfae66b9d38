"""The explorer on the broker's public operations (#49, item 6): it imports no private
name of :mod:`aiosb.emulator` and reaches into no object's private members; and its
faults are read by the one parser the fault API (``/{ns}/$faults``) uses, so it refuses
what that refuses."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import aiohttp
import pytest

import aiosb
from aiosb import emulator
from aiosb.server.explorer import Explorer
from aiosb.server.http import serve

pytestmark = pytest.mark.timeout(60)

EXPLORER = Path(aiosb.__file__).parent / "server" / "explorer"
PACKAGE = "aiosb.server.explorer"


def _absolute(module: str | None, level: int, package: str) -> str:
    """The absolute name of ``from {"." * level}{module} import ...`` in ``package``."""
    if not level:
        return module or ""
    parts = package.split(".")
    base = parts[: len(parts) - (level - 1)]
    return ".".join([*base, module] if module else base)


def _private_uses(path: Path) -> list[str]:
    """Where the module at ``path`` imports a private name of the emulator (a module or
    a name starting with ``_``), or reads a private member (``x._y``) of anything but
    itself (``self``/``cls``)."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        where = f"{path.name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.ImportFrom):
            module = _absolute(node.module, node.level, PACKAGE)  # every module's package
            if module == "aiosb.emulator" or module.startswith("aiosb.emulator."):
                parts = module.split(".")[2:]
                names = [alias.name for alias in node.names]
                if any(p.startswith("_") for p in parts) or any(
                    n.startswith("_") for n in names
                ):
                    found.append(f"{where}: from {module} import {', '.join(names)}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[:2] == ["aiosb", "emulator"] and any(
                    p.startswith("_") for p in parts[2:]
                ):
                    found.append(f"{where}: import {alias.name}")
        elif isinstance(node, ast.Attribute):
            name = node.attr
            private = name.startswith("_") and not (name.startswith("__") and name.endswith("__"))
            own = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            if private and not own:
                found.append(f"{where}: {ast.unparse(node)}")
    return found


def test_the_explorer_imports_no_private_broker_name_and_reads_no_private_member():
    """#49: the explorer works through the broker's public operations (methods of
    :class:`~aiosb.emulator.EmulatorNamespace`, names of :mod:`aiosb.emulator`), as the
    REST plane does: no ``aiosb.emulator._x`` import, no ``ns._resolve``, no
    ``store.hand_out``-style reach into another object's privates."""
    modules = sorted(EXPLORER.glob("*.py"))
    assert {m.name for m in modules} >= {"__init__.py", "_operations.py", "_live.py"}
    found = [use for module in modules for use in _private_uses(module)]
    assert found == [], "the explorer reaches past the broker's public operations:\n" + (
        "\n".join(found))


def test_the_walk_sees_what_it_looks_for(tmp_path):
    """The walk itself: each kind of private reach is seen (so an empty finding means
    none is there), and the explorer's own ``self._x`` is not one."""
    sample = tmp_path / "_sample.py"
    sample.write_text(
        "from ...emulator._record import AVAILABLE\n"
        "from ...emulator import _durable\n"
        "from ...emulator.durable._journal import Journal\n"
        "import aiosb.emulator._manage\n"
        "from ...emulator import EmulatorNamespace\n"
        "from . import _operations as ops\n"
        "def f(ns, self):\n"
        "    ns._resolve('q')\n"
        "    self._keys\n"
        "    ns.__class__\n"
    )
    found = _private_uses(sample)
    assert [line.split(": ", 1)[1] for line in found] == [
        "from aiosb.emulator._record import AVAILABLE",
        "from aiosb.emulator import _durable",
        "from aiosb.emulator.durable._journal import Journal",
        "import aiosb.emulator._manage",
        "ns._resolve",
    ]


# -- one fault parser ----------------------------------------------------------------------

#: Fault bodies the fault API refuses (400); the explorer must too.
REFUSED = [
    pytest.param({"entity": "p", "fragment": 5000}, id="fragment out of range"),
    pytest.param({"entity": "p", "fragment": -1}, id="negative fragment"),
    pytest.param({"entity": "p", "fragment": ""}, id="fragment not a number"),
    pytest.param({"entity": "p", "fragment": 2, "kind": "delay"}, id="fragment delay"),
    pytest.param({"fragment": 2}, id="fragment without entity"),
    pytest.param({"entity": "p", "kind": "unavailable", "seconds": 5}, id="seconds not a delay"),
    pytest.param({"entity": "p", "kind": "delay", "seconds": 4000}, id="delay too long"),
    pytest.param({"entity": "p", "kind": "delay"}, id="delay without seconds"),
    pytest.param({"entity": "p", "operations": []}, id="no operations"),
    pytest.param({"entity": "p", "operations": ["peek"]}, id="unknown operation"),
    pytest.param({"entity": "", "kind": "unavailable"}, id="empty entity"),
    pytest.param({"entity": 7}, id="entity not text"),
    pytest.param({"kind": "flood"}, id="unknown kind"),
    # a field the parser does not know: the explorer once dropped it and injected an
    # outage of the whole entity, every operation, for a one-fragment fault misspelt
    pytest.param({"entity": "p", "fragmnet": 1}, id="fragment misspelt"),
    pytest.param({"entity": "p", "operation": ["send"]}, id="operations misspelt"),
]


@pytest.mark.parametrize("body", REFUSED)
async def test_the_explorer_refuses_the_faults_the_fault_api_refuses(body):
    """#49: one parser reads a fault's JSON body for ``POST /{ns}/$faults`` and for the
    explorer's ``POST /explorer/api/faults``: what one refuses (a fragment out of range,
    seconds on a fault that is not a delay, no operations ...) the other refuses, and
    neither injects anything."""
    ns = "faulty"
    async with serve(sites=[Explorer]) as server:
        async with aiosb.connect(server.namespace_url(ns)) as client:
            await client.create_queue("p", enable_partitioning=True)
        jar = aiohttp.CookieJar(unsafe=True)
        async with aiohttp.ClientSession(server.url, cookie_jar=jar) as http:
            origin = {"Origin": server.url}
            async with http.post("/explorer/api/signin", json={
                    "key_name": server.key_name, "key": server.key},
                    headers={**origin, "X-Aiosb-Explorer": "1"}) as answer:
                assert answer.status == 200
                csrf = (await answer.json())["csrf"]
            async with http.post("/explorer/api/faults", json={"ns": ns, **body},
                                 headers={**origin, "X-Aiosb-Csrf": csrf}) as answer:
                explorer = (answer.status, await answer.text())
        assert emulator.namespace(ns).faults.active == []
        signed = {"Authorization": server.credential.token(f"{server.url}/{ns}")}
        async with aiohttp.ClientSession(server.url) as http:
            async with http.post(f"/{ns}/$faults", data=json.dumps(body),
                                 headers=signed) as answer:
                api = (answer.status, await answer.text())
        assert emulator.namespace(ns).faults.active == []
    assert api[0] == 400, api
    assert explorer[0] == 400, explorer
