"""A proxy.py plugin for the SDK's ``proxy`` sample: the proxy sends a tunnel to
``localhost:80`` or ``:443`` (where the SDK aims AMQP over WebSockets: it drops the port
of a connection string) on to the port ``AIOSB_PROXY_PORT_MAP`` names
(``"80=41234,443=41235"``), as a gateway before a namespace would. Everything else goes
where it was asked to."""

from __future__ import annotations

import os
from typing import Any

from proxy.http.proxy import HttpProxyBasePlugin


class PortMap(HttpProxyBasePlugin):  # type: ignore[misc]
    """Sends a request for a mapped port of localhost to the port it maps to."""

    def before_upstream_connection(self, request: Any) -> Any:
        pairs = os.environ.get("AIOSB_PROXY_PORT_MAP", "")
        ports = dict(pair.split("=", 1) for pair in pairs.split(",") if "=" in pair)
        host = request.host.decode() if isinstance(request.host, bytes) else request.host
        if host in ("localhost", "127.0.0.1") and str(request.port) in ports:
            request.port = int(ports[str(request.port)])
        return request
