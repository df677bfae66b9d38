"""Shared access signatures: Service Bus's token format, signed with HMAC-SHA256."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
import urllib.parse
from dataclasses import dataclass, field

from .errors import InvalidArgument

__all__ = ["SasCredential", "parse_connection_string"]


@dataclass(frozen=True, slots=True)
class SasCredential:
    """A shared access key, which signs tokens the way Service Bus expects.

    Args:
        key_name: The policy name, e.g. ``RootManageSharedAccessKey``.
        key: The key (the base64 text shown in the portal, used as is).
        token_lifetime: Seconds a generated token stays valid.
    """

    key_name: str
    key: str = field(repr=False)
    token_lifetime: int = 3600

    def __post_init__(self) -> None:
        if not self.key_name or not isinstance(self.key_name, str):
            raise InvalidArgument("a SAS credential needs a key name.")
        if not self.key or not isinstance(self.key, str):
            raise InvalidArgument(f"the SAS credential {self.key_name!r} has an empty key.")

    def token(self, resource: str, *, expiry: float | None = None) -> str:
        """A ``SharedAccessSignature sr=&sig=&se=&skn=`` token for ``resource``.

        Args:
            resource: The resource URI the token is scoped to (e.g.
                ``https://contoso.servicebus.windows.net/orders``).
            expiry: UTC epoch seconds when it expires (default: now + lifetime).
        """
        se = int(expiry if expiry is not None else time.time() + self.token_lifetime)
        sr = urllib.parse.quote(resource.lower(), safe="")
        sig = sign(self.key, f"{sr}\n{se}")
        return (
            f"SharedAccessSignature sr={sr}&sig={urllib.parse.quote(sig, safe='')}"
            f"&se={se}&skn={urllib.parse.quote(self.key_name, safe='')}"
        )


def sign(key: str, text: str) -> str:
    """Base64 HMAC-SHA256 of ``text`` under ``key`` (the Service Bus SAS signature)."""
    digest = hmac.new(key.encode(), text.encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def parse_connection_string(text: str) -> dict[str, str]:
    """Split ``Endpoint=sb://...;SharedAccessKeyName=...;SharedAccessKey=...``.

    Raises:
        InvalidArgument: No ``Endpoint``, or a part without ``=``.
    """
    parts: dict[str, str] = {}
    for chunk in text.strip().strip(";").split(";"):
        if not chunk.strip():
            continue
        key, sep, value = chunk.partition("=")
        if not sep:
            raise InvalidArgument(f"connection string part {chunk!r} has no '='.")
        parts[key.strip()] = value.strip()
    if "Endpoint" not in parts:
        raise InvalidArgument("the connection string has no Endpoint=sb://... part.")
    return parts
