"""Shared access signatures: Service Bus's token format, signed with HMAC-SHA256, and
checked (:class:`SasChecker`, what aiosb's servers use); the development key of the local
emulator. Vocabulary: imports only :mod:`aiosb.errors`."""

from __future__ import annotations

import base64
import difflib
import hashlib
import hmac
import time
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .errors import InvalidArgument, Unauthorized

__all__ = [
    "DEV_KEY",
    "DEV_KEY_NAME",
    "MAX_TOKEN_SECONDS",
    "MICROSOFT_DEV_KEY",
    "RIGHTS",
    "SasChecker",
    "SasCredential",
    "hostname",
    "key_table",
    "is_connection_string",
    "parse_connection_string",
]

#: The key name the server accepts unless told otherwise.
DEV_KEY_NAME = "RootManageSharedAccessKey"
#: The well-known development key: for a local emulator only, never for anything real.
DEV_KEY = "aiosbDevelopmentKeyForTheLocalEmulatorOnly000="



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


#: The parts of a Service Bus connection string aiosb reads, by their lower-cased names
#: (the SDKs read the names without regard to case). ``HostName`` stands for ``Endpoint``
#: where that is missing, as the SDK has it.
_CONNECTION_PARTS = {
    name.lower(): name
    for name in (
        "Endpoint", "HostName", "SharedAccessKeyName", "SharedAccessKey",
        "SharedAccessSignature", "EntityPath", "UseDevelopmentEmulator",
    )
}


def is_connection_string(text: str) -> bool:
    """Whether ``text`` is a connection string (``Part=value;...``, parts in any order)
    rather than a URL, which has no ``=`` before its ``://``."""
    return "=" in text.split("://", 1)[0]


def parse_connection_string(text: str) -> dict[str, str]:
    """Split ``Endpoint=sb://...;SharedAccessKeyName=...;SharedAccessKey=...`` into its
    parts, named as Service Bus spells them (whatever their case in ``text``). Parts
    other tools add (``TransportType``, ``OperationTimeout`` ...) are kept as they are
    and play no part, as in the SDK.

    Raises:
        InvalidArgument: No ``Endpoint`` (nor ``HostName``), a part without ``=``, a part
            given twice, a part named almost as one aiosb reads (a misspelt key would
            otherwise be ignored), or an empty key, key name, or a key name without its
            key or the other way round (a half-given key would otherwise fall back to
            another credential).
    """
    parts: dict[str, str] = {}
    for chunk in text.strip().strip(";").split(";"):
        if not chunk.strip():
            continue
        key, sep, value = chunk.partition("=")
        if not sep:
            raise InvalidArgument(f"connection string part {chunk!r} has no '='.")
        key = key.strip()
        name = _CONNECTION_PARTS.get(key.lower())
        if name is None:
            near = difflib.get_close_matches(key.lower(), _CONNECTION_PARTS, n=1, cutoff=0.8)
            if near:
                raise InvalidArgument(
                    f"the connection string has a part {key!r}: did you mean "
                    f"{_CONNECTION_PARTS[near[0]]}?"
                )
            name = key
        if name.lower() in (k.lower() for k in parts):
            raise InvalidArgument(f"the connection string gives {name} twice.")
        parts[name] = value.strip()
    if "Endpoint" not in parts and "HostName" in parts:
        host = parts["HostName"]
        parts["Endpoint"] = host if "://" in host else f"sb://{host}"
    if "Endpoint" not in parts:
        raise InvalidArgument("the connection string has no Endpoint=sb://... part.")
    for name in ("SharedAccessKeyName", "SharedAccessKey"):
        if name in parts and not parts[name]:
            raise InvalidArgument(f"the connection string's {name} is empty.")
    if ("SharedAccessKeyName" in parts) != ("SharedAccessKey" in parts):
        given, missing = (
            ("SharedAccessKeyName", "SharedAccessKey") if "SharedAccessKeyName" in parts
            else ("SharedAccessKey", "SharedAccessKeyName")
        )
        raise InvalidArgument(
            f"the connection string gives {given} but no {missing}: a shared access key "
            "needs both."
        )
    return parts


def hostname(netloc: str) -> str:
    """The host of ``host[:port]`` (or ``[v6]:port``), lower-cased, without the port: a
    token names the machine, not which of its listeners the client used."""
    netloc = netloc.lower().rpartition("@")[2]
    if netloc.startswith("["):
        return netloc.partition("]")[0] + "]"
    return netloc.partition(":")[0]


#: The rights a shared access key may hold, as Service Bus names them.
RIGHTS = ("Manage", "Send", "Listen")
#: A token may be valid for at most this long from now (Service Bus's portal offers
#: up to a year; an unbounded token is a key in all but name).
MAX_TOKEN_SECONDS = 366 * 24 * 3600


class SasChecker:
    """Checks Service Bus shared access signatures against the server's keys, each with
    its rights (``Manage`` includes ``Send`` and ``Listen``)."""

    def __init__(self, keys: Mapping[str, tuple[str | tuple[str, ...], frozenset[str]]]
                 ) -> None:
        self.keys = keys
        self._good: dict[str, tuple[int, str, frozenset[str], str]] = {}

    def check(self, token: str | None, host: str, path: str, needs: str) -> float:
        """Raise unless ``token`` signs a request to ``host`` (``host[:port]``) for
        ``path`` (``/namespace/entity...``, lower case), in time, with the right ``needs``;
        when it does, until when (its expiry, epoch seconds).

        Raises:
            Unauthorized: What is wrong with the token, in a sentence.
        """
        if not token:
            raise Unauthorized(
                "the request is not signed: send 'Authorization: SharedAccessSignature "
                "sr=...&sig=...&se=...&skn=...' signed with the server's key."
            )
        known = self._good.get(token)
        if known is None:
            known = self._verify(token)
            if len(self._good) > 1000:
                self._good.clear()
            self._good[token] = known
        expiry, scope, rights, signed_host = known
        if signed_host and signed_host != hostname(host):
            raise Unauthorized(
                f"the signature is for host {signed_host!r}, not {hostname(host)!r}; "
                "sign the URL you send to."
            )
        if expiry <= time.time():
            raise Unauthorized(f"the signature expired at {expiry} (epoch seconds); sign anew.")
        if scope and path != scope and not path.startswith(scope + "/"):
            raise Unauthorized(
                f"the signature is for {scope!r}, which does not cover {path!r}."
            )
        if needs not in rights:
            raise Unauthorized(
                f"the key this request was signed with has {', '.join(sorted(rights))} "
                f"rights; this operation needs {needs}."
            )
        return expiry

    def key_rights(self, key_name: str, key: str) -> frozenset[str]:
        """The rights of the key ``key_name`` when ``key`` is its key (one of its keys,
        while a second one is given): how a client that signs in with the pair itself,
        not with a token made from it (AMQP's SASL PLAIN), is let in.

        Raises:
            Unauthorized: No key of that name, or not that key.
        """
        entry = self.keys.get(key_name)
        if entry is None or not any(
            hmac.compare_digest(one.encode(), key.encode("utf-8", "replace"))
            for one in (entry[0] if isinstance(entry[0], tuple) else (entry[0],))
        ):
            raise Unauthorized(
                f"the key name {key_name[:60]!r} and key given are not a key of this server."
            )
        return entry[1]

    def _verify(self, token: str) -> tuple[int, str, frozenset[str], str]:
        scheme, _, rest = token.strip().partition(" ")
        if scheme != "SharedAccessSignature" or not rest:
            raise Unauthorized("the Authorization header is not a SharedAccessSignature.")
        fields: dict[str, str] = {}
        for part in rest.split("&"):
            key, sep, value = part.partition("=")
            if not sep or key not in ("sr", "sig", "se", "skn") or key in fields:
                raise Unauthorized(
                    f"the signature has a bad part {part[:40]!r}; it needs sr, sig, se, skn."
                )
            fields[key] = value
        if set(fields) != {"sr", "sig", "se", "skn"}:
            raise Unauthorized("the signature needs all of sr, sig, se and skn.")
        skn = urllib.parse.unquote(fields["skn"])
        entry = self.keys.get(skn)
        if entry is None:
            raise Unauthorized(f"the key name {skn[:60]!r} is not known to this server.")
        secret, rights = entry
        if not fields["se"].isdigit() or len(fields["se"]) > 12:
            raise Unauthorized("the signature's expiry (se) is not epoch seconds.")
        if int(fields["se"]) > time.time() + MAX_TOKEN_SECONDS:
            raise Unauthorized(
                f"the signature is valid until {fields['se']} (epoch seconds), more than a "
                "year from now; sign with a shorter lifetime."
            )
        given = urllib.parse.unquote(fields["sig"]).encode("utf-8", "replace")
        secrets = secret if isinstance(secret, tuple) else (secret,)
        if not any(
            hmac.compare_digest(sign(one, f"{fields['sr']}\n{fields['se']}").encode(), given)
            for one in secrets
        ):
            raise Unauthorized("the signature does not match: it was not made with this key.")
        resource = urllib.parse.unquote(fields["sr"]).lower()
        if "://" in resource:
            parts = urllib.parse.urlsplit(resource)
            host, resource = hostname(parts.netloc), parts.path
        else:
            netloc, _, rest = resource.partition("/")
            host, resource = hostname(netloc), "/" + rest
        return int(fields["se"]), resource.rstrip("/"), rights, host


#: The development key Microsoft's Service Bus emulator documents: its connection
#: strings say ``SharedAccessKey=SAS_KEY_VALUE``. ``aiosb serve --microsoft-emulator``
#: accepts it (beside its own key) for RootManageSharedAccessKey, and nothing else does.
MICROSOFT_DEV_KEY = "SAS_KEY_VALUE"


def key_table(
    key_name: str,
    key: str,
    keys: Mapping[str, tuple[str, Iterable[str]]] | None = None,
    *,
    also: str | None = None,
) -> dict[str, tuple[str | tuple[str, ...], frozenset[str]]]:
    """The keys a server accepts, each with its rights: ``key_name``/``key`` with every
    right (and ``key_name``/``also``, a second secret, when given), and ``keys``
    (``{name: (key, rights)}``, rights among ``Manage``, ``Send``, ``Listen``;
    ``Manage`` includes the other two).

    Raises:
        InvalidArgument: An empty name or key, unknown or no rights, a name given twice.
    """
    SasCredential(key_name, key)  # validates both
    secret: str | tuple[str, ...] = key if also is None or also == key else (key, also)
    table: dict[str, tuple[str | tuple[str, ...], frozenset[str]]] = {
        key_name: (secret, frozenset(RIGHTS))
    }
    for name, (secret, rights) in (keys or {}).items():
        SasCredential(name, secret)
        given = set(rights)
        unknown = sorted(given - set(RIGHTS))
        if unknown or not given:
            raise InvalidArgument(
                f"key {name!r} has rights {sorted(given)}; give some of {', '.join(RIGHTS)}."
            )
        if name in table:
            raise InvalidArgument(f"the key name {name!r} is given twice.")
        table[name] = (secret, frozenset(RIGHTS) if "Manage" in given else frozenset(given))
    return table
