"""TLS for ``aiosb serve``: the official administration clients insist on HTTPS.

:func:`context` loads a certificate and key; :func:`self_signed` makes a certificate for
``localhost``, ``127.0.0.1`` and ``::1`` (with the ``cryptography`` package, ``pip
install aiosb[tls]``) for a client to trust explicitly (``connection_verify=CERT``,
``NODE_EXTRA_CA_CERTS``, certifi's bundle), kept in a per-user folder
(:func:`default_dir`) unless ``--tls-dir`` chooses another.

Whoever trusts that certificate trusts whoever holds its key, so (#48):

- **The certificate is a leaf** (``BasicConstraints(ca=False)``, critical; key usage
  ``digitalSignature`` only): it vouches for those three names and nothing else. A
  certificate for another host signed with its key is refused by every verifier (OpenSSL
  says "invalid CA certificate"), where a CA would have vouched for it. OpenSSL (Python's
  ``ssl``, aiohttp, the SDKs, Proton) and Node take a self-signed leaf they are given to
  trust as its own trust anchor, so no CA is needed.
- **The key is never readable by others**: written to a fresh name in the folder with
  ``O_CREAT|O_EXCL|O_NOFOLLOW`` and mode 0600 (no window under any umask, no planted
  symlink followed), then renamed into place (a symlink planted at its name is replaced,
  not written through).
- **The folder is the user's own**: made 0700; one that is a symbolic link, belongs to
  another user or is writable by group or others is refused (:class:`UnsafeTlsFolder`).
- **Reuse checks what it reuses**: a key that is a symlink, not the user's, or readable
  by group or others may have been copied, so it is not reused: a new pair replaces it
  (and the server says so). An error would ask the user to do by hand the one safe
  thing, a new key; keeping it would go on vouching for whoever copied it.

On Windows (no ``O_NOFOLLOW``, no POSIX modes or owners) the files are written the same
way and the per-user folder (``%LOCALAPPDATA%``) is the user's by its ACL; the owner and
mode checks are POSIX's.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import ipaddress
import logging
import os
import secrets
import ssl
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

__all__ = ["CERT_FILE", "KEY_FILE", "UnsafeTlsFolder", "context", "default_dir", "self_signed"]

log = logging.getLogger(__name__)

#: The names of the certificate and key in the folder.
CERT_FILE, KEY_FILE = "aiosb-cert.pem", "aiosb-key.pem"
#: Whether files have POSIX owners and modes to check.
_POSIX = os.name == "posix"


class UnsafeTlsFolder(Exception):
    """The folder for the certificate and key is not one only this user can change."""


def context(cert: str | Path, key: str | Path) -> ssl.SSLContext:
    """A server context that presents ``cert`` (PEM) with its private ``key`` (PEM)."""
    made = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    made.load_cert_chain(str(cert), str(key))
    return made


def default_dir() -> Path:
    """Where ``aiosb serve`` keeps its certificate and key unless ``--tls-dir`` says:
    a per-user folder, never the working directory (a repository, where a key gets
    committed). ``$XDG_STATE_HOME/aiosb/tls`` where that is set (an absolute path),
    else ``~/.local/state/aiosb/tls`` (``~/Library/Application Support/aiosb/tls`` on
    macOS); ``%LOCALAPPDATA%\\aiosb\\tls`` on Windows."""
    if sys.platform == "win32":
        local = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(local) / "aiosb" / "tls"
    state = os.environ.get("XDG_STATE_HOME", "")
    if os.path.isabs(state):
        return Path(state) / "aiosb" / "tls"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "aiosb" / "tls"
    return Path.home() / ".local" / "state" / "aiosb" / "tls"


def self_signed(directory: str | Path, days: int = 365, *,
                reuse: bool = False) -> tuple[Path, Path]:
    """Write ``aiosb-cert.pem`` and ``aiosb-key.pem`` to ``directory`` (made 0700 if
    missing): a certificate for localhost, valid ``days`` days; return their paths.
    With ``reuse``, a pair already there that is valid for a day more, is a leaf and
    whose key only this user could read is kept (clients that trust it go on trusting
    it across restarts).

    Raises:
        UnsafeTlsFolder: ``directory`` is a symbolic link, not a folder, another user's,
            or writable by group or others (the message says which, in one sentence).
        ImportError: ``cryptography`` is not installed (the message says how to get it).
    """
    folder = Path(directory)
    _prepare(folder)
    with _locked(folder / ".lock"):  # two servers starting at once make one pair
        cert_path, key_path = folder / CERT_FILE, folder / KEY_FILE
        if reuse and _still_good(cert_path, key_path):
            return cert_path, key_path
        return _make(folder, days)


def _prepare(folder: Path) -> None:
    """Make ``folder`` (0700; its parents as the umask says) unless it exists, then
    check it is this user's own: raise :class:`UnsafeTlsFolder` if not."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(folder, 0o700)
    try:
        found = os.lstat(folder)
    except OSError as exc:
        raise UnsafeTlsFolder(f"the TLS folder {folder} cannot be read ({exc.strerror}).") \
            from None
    if stat.S_ISLNK(found.st_mode):
        raise UnsafeTlsFolder(
            f"the TLS folder {folder} is a symbolic link, which aiosb does not follow to "
            "write a private key: give the folder itself with --tls-dir.")
    if not stat.S_ISDIR(found.st_mode):
        raise UnsafeTlsFolder(f"the TLS folder {folder} is not a folder: give another "
                              "--tls-dir.")
    if not _POSIX:
        return
    if found.st_uid != os.geteuid():
        raise UnsafeTlsFolder(
            f"the TLS folder {folder} belongs to another user (uid {found.st_uid}), who "
            "could swap the key or certificate: give a folder of yours with --tls-dir.")
    if found.st_mode & 0o022:
        raise UnsafeTlsFolder(
            f"the TLS folder {folder} is writable by group or others (mode "
            f"{stat.S_IMODE(found.st_mode):04o}), who could swap the key or certificate: "
            f"chmod go-w {folder}, or give another --tls-dir.")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (POSIX; elsewhere, nothing)."""
    try:
        import fcntl
    except ImportError:  # Windows
        yield
        return
    handle = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)  # and the lock with it


def _write(folder: Path, name: str, data: bytes, mode: int) -> Path:
    """Put ``data`` at ``folder/name``, readable as ``mode`` allows from its first
    byte: written to a fresh name (``O_EXCL``: never an existing file, nor a symlink
    planted there), then renamed over ``name`` (which replaces a symlink there rather
    than follow it)."""
    fresh = folder / f".{name}.{secrets.token_hex(8)}"
    flags = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
             | getattr(os, "O_BINARY", 0))
    made = os.open(fresh, flags, mode)  # whatever was there (it cannot be) is not ours
    try:
        with open(made, "wb") as out:
            if _POSIX and not mode & 0o077:  # private: exactly ``mode``, whatever the umask
                os.fchmod(out.fileno(), mode)
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(fresh, folder / name)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(fresh)
        raise
    return folder / name


def _make(folder: Path, days: int) -> tuple[Path, Path]:
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError:
        raise ImportError(
            "aiosb serve --tls makes its certificate with the cryptography package: "
            "pip install aiosb[tls] (or give --tls-cert and --tls-key)"
        ) from None
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = _dt.datetime.now(_dt.UTC)
    addresses = [ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")]
    usage = dict.fromkeys(("content_commitment", "key_encipherment", "data_encipherment",
                           "key_agreement", "key_cert_sign", "crl_sign", "encipher_only",
                           "decipher_only"), False)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(minutes=5))
        .not_valid_after(now + _dt.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), *(x509.IPAddress(a) for a in addresses)]),
            critical=False)
        # A leaf: it signs TLS handshakes, never another certificate.
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, **usage), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                       critical=False)
        # Both identifiers, as strict verifiers (Python 3.13's VERIFY_X509_STRICT) want.
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                       critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(key.public_key()),
                       critical=False)
        .sign(key, hashes.SHA256())
    )
    key_path = _write(folder, KEY_FILE, key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ), 0o600)
    cert_path = _write(folder, CERT_FILE, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return cert_path, key_path


def _still_good(cert_path: Path, key_path: Path) -> bool:
    """Whether ``cert_path`` holds a leaf certificate valid for a day more, whose key is
    ``key_path`` (a pair a server can present), both regular files of this user's that
    others cannot change, the key one others cannot read either."""
    try:
        from cryptography import x509
    except ImportError:
        return False
    try:
        unsafe = _unsafe(key_path, 0o077) or _unsafe(cert_path, 0o022)
        if unsafe:
            log.warning("aiosb: %s, so it may have been copied or changed: a new "
                        "certificate and key replace it; trust the new certificate.", unsafe)
            return False
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        context(cert_path, key_path)  # the key is the certificate's
        leaf = not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except (OSError, ValueError, ssl.SSLError, x509.ExtensionNotFound):
        return False
    if not leaf:
        log.warning("aiosb: %s is a certificate authority (an earlier aiosb made it so); a "
                    "certificate for localhost alone replaces it: trust the new one.",
                    cert_path)
        return False
    left = cert.not_valid_after_utc - _dt.datetime.now(_dt.UTC)
    return left > _dt.timedelta(days=1)


def _unsafe(path: Path, others: int) -> str:
    """Why ``path`` must not be reused ("" if it may): a symlink, not a regular file,
    another user's, or with any of the permission bits ``others``."""
    found = os.lstat(path)  # OSError (missing): not reused, silently
    if stat.S_ISLNK(found.st_mode):
        return f"{path} is a symbolic link"
    if not stat.S_ISREG(found.st_mode):
        return f"{path} is not a regular file"
    if _POSIX and found.st_uid != os.geteuid():
        return f"{path} belongs to another user (uid {found.st_uid})"
    if _POSIX and found.st_mode & others:
        return f"{path} has mode {stat.S_IMODE(found.st_mode):04o}"
    return ""
