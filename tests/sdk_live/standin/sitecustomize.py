"""What stands, for the SDK's tests, for the network and the trust of a machine that talks
to Azure (``./dev sdk-tests``; Python imports this at start-up, the tests stay unmodified).

- **The port map** (``AIOSB_PORT_MAP``, ``5671=PORT,443=PORT``): a connection to a loopback
  address at 5671 (AMQP over TLS: the SDK always uses it for a namespace given by name or
  by a connection string without ``UseDevelopmentEmulator``) or 443 (HTTPS: the
  administration clients, AMQP over WebSockets) goes to the server's port instead, as
  DNS sends ``NAME.servicebus.windows.net`` to the namespace's gateway. The server
  listens on free ports, never on these.
- **The trust**: certifi's bundle, which the SDK reads for AMQP over TLS and no
  environment variable changes, is ``AIOSB_TRUSTED_BUNDLE`` (certifi's certificates and
  ``aiosb serve``'s); ``SSL_CERT_FILE`` and ``REQUESTS_CA_BUNDLE`` name the same file.
"""

import os
import socket

_map = {int(a): int(b) for a, b in (pair.split("=", 1) for pair in
                                    os.environ.get("AIOSB_PORT_MAP", "").split(",") if pair)}
_LOOPBACK = ("127.0.0.1", "::1", "localhost")

if _map:
    _connect = socket.socket.connect
    _connect_ex = socket.socket.connect_ex

    def _mapped(address):
        if (isinstance(address, tuple) and len(address) >= 2 and address[0] in _LOOPBACK
                and address[1] in _map):
            return (address[0], _map[address[1]], *address[2:])
        return address

    def connect(self, address):
        return _connect(self, _mapped(address))

    def connect_ex(self, address):
        return _connect_ex(self, _mapped(address))

    socket.socket.connect = connect
    socket.socket.connect_ex = connect_ex

_bundle = os.environ.get("AIOSB_TRUSTED_BUNDLE")
if _bundle:
    try:
        import certifi
    except ImportError:
        pass
    else:
        certifi.where = lambda: _bundle
