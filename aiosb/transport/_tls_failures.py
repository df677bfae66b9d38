"""What to say when TLS fails before anything answers: a certificate this machine does
not trust (or one for another name, or out of date), or a port that does not speak
TLS. Neither heals by itself, so both transports say it at once rather than retry for
the operation timeout, or call it "nothing is listening" (issue 17)."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from typing import Any

from ..errors import InvalidOperation

__all__ = ["chain", "tls_failure"]

#: OpenSSL's verify codes for a certificate issued for another host name or address.
_NOT_ITS_NAME = frozenset({62, 64})  # X509_V_ERR_HOSTNAME_MISMATCH, _IP_ADDRESS_MISMATCH
#: And for one not valid at this time.
_OUT_OF_DATE = frozenset({9, 10})  # X509_V_ERR_CERT_NOT_YET_VALID, _CERT_HAS_EXPIRED
#: The links from an exception to its causes, in aiohttp, azure-core and the SDK.
_LINKS = ("inner_exception", "os_error", "__cause__", "__context__")


def tls_failure(exc: BaseException, where: str, not_tls_hint: str = "") -> InvalidOperation | None:
    """The error for a TLS failure anywhere in ``exc``'s chain, at ``where`` (a URL);
    ``None`` if it is no such failure. ``not_tls_hint`` ends the sentence for a port that
    does not speak TLS."""
    causes = list(chain(exc, _LINKS))
    # The verification error itself (its code says why), else any cause that names it.
    verify = next((c for c in causes if isinstance(c, ssl.SSLCertVerificationError)), None)
    verify = verify or next((c for c in causes if "CERTIFICATE_VERIFY_FAILED" in str(c)), None)
    if verify is not None:
        reason = getattr(verify, "verify_message", None) or str(verify)
        code = getattr(verify, "verify_code", None)
        if code in _NOT_ITS_NAME:
            return InvalidOperation(
                f"the server at {where} presented a certificate for another name "
                f"({reason}): connect with a name it was issued for (`aiosb serve --tls` "
                "makes one for localhost and 127.0.0.1)."
            )
        if code in _OUT_OF_DATE:
            return InvalidOperation(
                f"the server at {where} presented a certificate that is not valid now "
                f"({reason}): the server needs a new one (`aiosb serve --tls` makes a new "
                "one each time it starts), or this machine's clock is wrong."
            )
        return InvalidOperation(
            f"the server at {where} presented a certificate this machine does not trust "
            f"({reason}). For `aiosb serve`, trust the certificate its banner names "
            "(aiosb-cert.pem in its TLS folder, ~/.local/state/aiosb/tls on Linux unless "
            "--tls-dir says): SSL_CERT_FILE=THAT_FILE in the environment, or "
            "connection_verify=THAT_FILE."
        )
    if any("WRONG_VERSION_NUMBER" in str(c) for c in causes):
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
