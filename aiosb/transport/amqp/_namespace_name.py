"""The name aiosb gives the namespace an AMQP transport connects to (where it connects
is the transport's :class:`~aiosb._endpoint.Endpoint`).

The name is :attr:`aiosb.Namespace.name`, and a pairing's backlog queues take it as their
first segment (``{name}/x-servicebus-transfer/{i}``, PN-7): two endpoints that share a
name, paired with one secondary, share backlog queues, and each pairing's syphon moves
the other's messages into the wrong primary. So different endpoints never share a name.
One endpoint written two ways may get two names; that only costs it separate backlog
queues, each drained into the right primary.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse

from ..._endpoint import AMQP_PORT, AMQPS_PORT
from ...errors import InvalidArgument

__all__ = ["namespace_name"]
#: What an entity path segment may not hold: it takes letters, digits, '.', '-' and '_'.
_NOT_IN_A_PATH = re.compile(r"[^a-z0-9._-]")


def namespace_name(netloc: str, *, emulator: bool = False) -> str:
    """The name of the namespace at ``netloc`` (``host[:port]``).

    A Service Bus host, ``NAME.servicebus.windows.net`` (or another cloud's
    ``NAME.servicebus.SUFFIX``), is named by its first label, as Service Bus names the
    namespace. Any other host (a development emulator, ``aiosb serve``) says nothing of
    a namespace, and several may listen on one machine, so the name is the host and the
    port joined by ``_``: ``localhost_5672``. The port is the one given, else the SDK's
    default (5672 for the emulator, 5671 over TLS). Host names hold no ``_``, so the
    join is unambiguous, and every character of the result is one an entity path takes
    (an IPv6 address is written out in full with ``-`` for ``:``).

    Args:
        netloc: The endpoint's ``host[:port]`` (``[v6]:port`` for IPv6).
        emulator: The endpoint speaks plain AMQP (``UseDevelopmentEmulator=true``).

    Returns:
        The name, e.g. ``contoso`` or ``localhost_5672``; ``servicebus`` for no host.

    Raises:
        InvalidArgument: The port is not a number from 0 to 65535.
    """
    netloc = netloc.rpartition("@")[2]
    labels = netloc.split(".")
    if "servicebus" in (label.lower() for label in labels[1:]):
        return labels[0]
    parts = urllib.parse.urlsplit(f"sb://{netloc}")
    try:
        port = parts.port
    except ValueError:
        raise InvalidArgument(f"the endpoint {netloc!r} has no valid port.") from None
    host = parts.hostname or ""
    if not host:
        return "servicebus"
    try:
        host = ipaddress.ip_address(host).exploded
    except ValueError:
        pass  # a host name
    if port is None:
        port = AMQP_PORT if emulator else AMQPS_PORT
    return f"{_NOT_IN_A_PATH.sub('-', host)}_{port}"
