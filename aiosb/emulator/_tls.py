"""TLS for ``aiosb serve``: the official administration clients insist on HTTPS.

:func:`context` loads a certificate and key; :func:`self_signed` makes a certificate for
``localhost`` and ``127.0.0.1`` (with the ``cryptography`` package, ``pip install
aiosb[tls]``) for a client to trust explicitly (``connection_verify=CERT``).
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import ssl
from pathlib import Path

__all__ = ["context", "self_signed"]


def context(cert: str | Path, key: str | Path) -> ssl.SSLContext:
    """A server context that presents ``cert`` (PEM) with its private ``key`` (PEM)."""
    made = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    made.load_cert_chain(str(cert), str(key))
    return made


def self_signed(directory: str | Path, days: int = 365) -> tuple[Path, Path]:
    """Write ``aiosb-cert.pem`` and ``aiosb-key.pem`` to ``directory``: a certificate for
    localhost, valid ``days`` days; return their paths.

    Raises:
        ImportError: ``cryptography`` is not installed (the message says how to get it).
    """
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
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
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
    cert_path, key_path = folder / "aiosb-cert.pem", folder / "aiosb-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ))
    key_path.chmod(0o600)
    return cert_path, key_path
