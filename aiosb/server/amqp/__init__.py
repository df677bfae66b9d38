"""An AMQP 1.0 front end for the embedded emulator, so the official Service Bus SDKs
work against it unmodified (issue #15).

The codec (:mod:`.codec`), the performatives (:mod:`.performatives`), the message map
(:mod:`.messages`), the connection state machine (:mod:`.connection`) and the listener
(:mod:`.front_end`) are aiosb's own, in asyncio; the broker never learns of AMQP: each link
calls the namespace's Transport-protocol methods.
"""

from __future__ import annotations

from .front_end import AmqpServer, serve_amqp

__all__ = ["AmqpServer", "serve_amqp"]
