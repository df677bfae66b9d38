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

from ..._endpoint import AMQP_PORT, AMQPS_PORT

__all__ = ["namespace_name"]
#: What an entity path segment may not hold: it takes letters, digits, '.', '-' and '_'.
_NOT_IN_A_PATH = re.compile(r"[^a-z0-9._-]")


def namespace_name(host: str, port: int | None, *, emulator: bool = False) -> str:
    """The name of the namespace at ``host`` and ``port`` (an endpoint's, already parsed).

    A Service Bus host, ``NAME.servicebus.windows.net`` (or another cloud's
    ``NAME.servicebus.SUFFIX``), is named by its first label, as Service Bus names the
    namespace. Any other host (a development emulator, ``aiosb serve``) says nothing of
    a namespace, and several may listen on one machine, so the name is the host (in
    lower case) and the port joined by ``_``: ``localhost_5672``. The port is the one
    given, else the SDK's default (5672 for the emulator, 5671 over TLS). Host names
    hold no ``_``, so the join is unambiguous, and every character of the result is one
    an entity path takes (an IPv6 address is written out in full with ``-`` for ``:``).

    Args:
        host: The endpoint's host, as given (an IPv6 address without brackets).
        port: The endpoint's port; ``None``: the SDK's default.
        emulator: The endpoint speaks plain AMQP (``UseDevelopmentEmulator=true``).

    Returns:
        The name, e.g. ``contoso`` or ``localhost_5672``; ``servicebus`` for no host.
    """
    labels = host.split(".")
    if "servicebus" in (label.lower() for label in labels[1:]):
        return labels[0]
    host = host.lower()
    if not host:
        return "servicebus"
    try:
        host = ipaddress.ip_address(host).exploded
    except ValueError:
        pass  # a host name
    if port is None:
        port = AMQP_PORT if emulator else AMQPS_PORT
    return f"{_NOT_IN_A_PATH.sub('-', host)}_{port}"
