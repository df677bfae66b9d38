"""TLS for ``aiosb serve``: the official administration clients insist on HTTPS.

:func:`context` loads a certificate and key; :func:`self_signed` makes a certificate for
``localhost`` and ``127.0.0.1`` (with the ``cryptography`` package, ``pip install
aiosb[tls]``) for a client to trust explicitly (``connection_verify=CERT``).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import ipaddress
import ssl
from collections.abc import Iterator
from pathlib import Path

__all__ = ["context", "self_signed"]


def context(cert: str | Path, key: str | Path) -> ssl.SSLContext:
    """A server context that presents ``cert`` (PEM) with its private ``key`` (PEM)."""
    made = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    made.load_cert_chain(str(cert), str(key))
    return made


def self_signed(directory: str | Path, days: int = 365, *,
                reuse: bool = False) -> tuple[Path, Path]:
    """Write ``aiosb-cert.pem`` and ``aiosb-key.pem`` to ``directory``: a certificate for
    localhost, valid ``days`` days; return their paths. With ``reuse``, a pair already
    there that is valid for a day more is kept (clients that trust it go on trusting it
    across restarts).

    Raises:
        ImportError: ``cryptography`` is not installed (the message says how to get it).
    """
    folder = Path(directory)
    if not reuse:
        return _make(folder, days)
    folder.mkdir(parents=True, exist_ok=True)
    with _locked(folder / ".lock"):  # two servers starting at once make one pair
        cert_path, key_path = folder / "aiosb-cert.pem", folder / "aiosb-key.pem"
        if _still_good(cert_path, key_path):
            return cert_path, key_path
        return _make(folder, days)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (POSIX; elsewhere, nothing)."""
    try:
        import fcntl
    except ImportError:  # Windows
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _make(folder: Path, days: int) -> tuple[Path, Path]:
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        raise ImportError(
            "aiosb serve --tls makes its certificate with the cryptography package: "
            "pip install aiosb[tls] (or give --tls-cert and --tls-key)"
        ) from None
    folder.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = folder / "aiosb-cert.pem", folder / "aiosb-key.pem"
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = _dt.datetime.now(_dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(minutes=5))
        .not_valid_after(now + _dt.timedelta(days=days))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ))
    key_path.chmod(0o600)
    return cert_path, key_path


def _still_good(cert_path: Path, key_path: Path) -> bool:
    """Whether ``cert_path`` holds a certificate valid for a day more, whose key is
    ``key_path`` (a pair a server can present)."""
    try:
        from cryptography import x509

        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        context(cert_path, key_path)  # the key is the certificate's
    except (ImportError, OSError, ValueError, ssl.SSLError):
        return False
    left = cert.not_valid_after_utc - _dt.datetime.now(_dt.UTC)
    return left > _dt.timedelta(days=1)
