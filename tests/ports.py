"""Ports for the tests that need a fixed one (the SDK's 5671, Microsoft's 5672 and 5300,
the proxy sample's 8899)."""

from __future__ import annotations

import socket

__all__ = ["port_free"]


def port_free(port: int) -> bool:
    """Whether ``port`` on 127.0.0.1 can be bound now, as the server binds it."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
