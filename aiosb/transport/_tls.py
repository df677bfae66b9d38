"""What to say when TLS fails before anything answers: a certificate this machine does
not trust, or a port that does not speak TLS. Neither heals by itself, so both
transports say it at once rather than retry for the operation timeout, or call it
"nothing is listening" (issue 17)."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from typing import Any

from ..errors import InvalidOperation

__all__ = ["chain", "tls_failure"]

#: The links from an exception to its causes, in aiohttp, azure-core and the SDK.
_LINKS = ("inner_exception", "os_error", "__cause__", "__context__")


def tls_failure(exc: BaseException, where: str, not_tls_hint: str = "") -> InvalidOperation | None:
    """The error for a TLS failure anywhere in ``exc``'s chain, at ``where`` (a URL);
    ``None`` if it is no such failure. ``not_tls_hint`` ends the sentence for a port that
    does not speak TLS."""
    for cause in chain(exc, _LINKS):
        text = str(cause)
        if isinstance(cause, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in text:
            reason = getattr(cause, "verify_message", None) or text
            return InvalidOperation(
                f"the server at {where} presented a certificate this machine does not trust "
                f"({reason}). For `aiosb serve --tls`, trust the certificate it wrote: "
                "SSL_CERT_FILE=.aiosb-tls/aiosb-cert.pem (its --tls-dir) in the environment."
            )
        if "WRONG_VERSION_NUMBER" in text:
            return InvalidOperation(
                f"{where} does not speak TLS: the port answered in another protocol"
                + (f"; {not_tls_hint}" if not_tls_hint else ".")
            )
    return None


def chain(exc: BaseException, links: tuple[str, ...]) -> Iterator[Any]:
    """``exc`` and every exception reached from it through the attributes ``links``,
    each once, nearest first."""
    seen: set[int] = set()
    queue: list[Any] = [exc]
    while queue:
        candidate = queue.pop(0)
        if candidate is None or id(candidate) in seen:
            continue
        seen.add(id(candidate))
        yield candidate
        queue += [getattr(candidate, link, None) for link in links]
