"""The trust and the network of the machine the SDK samples run on
(tests/realclock/samples.py): certifi's bundle, which the official SDK reads for AMQP
over TLS and no environment variable changes, is the bundle ``AIOSB_TRUSTED_BUNDLE``
names (certifi's own certificates and ``aiosb serve``'s); and port 5671 of localhost,
where the SDK speaks AMQP over TLS to a namespace given by name (and nowhere else), is
the port ``AIOSB_AMQPS_PORT`` names, as a port forward would make it: the suite passes
with 5671 taken by another process. Python imports this module at start-up, before
the sample runs; the sample itself is unmodified."""

import os

_bundle = os.environ.get("AIOSB_TRUSTED_BUNDLE")
if _bundle:
    try:
        import certifi
    except ImportError:
        pass
    else:
        certifi.where = lambda: _bundle

_amqps = os.environ.get("AIOSB_AMQPS_PORT")
if _amqps:
    import socket

    _getaddrinfo = socket.getaddrinfo

    def _forwarded(host, port, *args, **kwargs):  # type: ignore[no-untyped-def]
        """socket.getaddrinfo, with localhost:5671 forwarded to the server's port (both
        the SDK's socket.create_connection and asyncio's open_connection ask it)."""
        if str(port) == "5671" and host in ("localhost", "127.0.0.1"):
            port = int(_amqps)
        return _getaddrinfo(host, port, *args, **kwargs)

    socket.getaddrinfo = _forwarded
