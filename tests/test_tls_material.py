"""Issue 48, item 2: the certificate and key ``aiosb serve`` makes and reuses are TLS
material a careful user would accept. The key is 0600 in a 0700 folder, never readable
by others while it is written, never written through a planted symlink; a folder that
is a symlink, another user's or writable by others is refused in one sentence; a key
others could read is not reused; the certificate is a leaf that vouches for localhost,
127.0.0.1 and ::1 and no other host; the folder is per user, not the working
directory."""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import logging
import os
import re
import ssl
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import quote

import pytest

import aiosb

pytest.importorskip("cryptography", reason="aiosb makes its certificate with cryptography")
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509.oid import NameOID

from aiosb.server import tls as _tls
from aiosb.server.process import ServerProcess

#: Anyone else's user id: nobody's.
NOBODY = 65534
#: OpenSSL's verification as Python 3.13's default context does it (strict, partial
#: chains allowed), beside the default of the Pythons aiosb supports.
VERIFY_FLAGS = [0, ssl.VERIFY_X509_STRICT | ssl.VERIFY_X509_PARTIAL_CHAIN]


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


# --- the key: written unseen, never through a symlink, in a folder of the user's own ---


class _Watch:
    """Every moment the process touches the file system (an audit event), each file in
    ``folder`` that holds a private key, with the permission bits others have on it."""

    active: ClassVar[list[_Watch]] = []  # the hook below is for the process's life: it checks these

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.seen: list[tuple[str, str, int]] = []  # (event, file, mode) of a readable key
        self._inside = False

    def __call__(self, event: str) -> None:
        if self._inside or not self.folder.is_dir():
            return
        self._inside = True
        try:
            for entry in os.scandir(self.folder):
                if entry.is_file(follow_symlinks=False) \
                        and b"PRIVATE KEY" in Path(entry.path).read_bytes() \
                        and _mode(Path(entry.path)) & 0o077:
                    self.seen.append((event, entry.name, _mode(Path(entry.path))))
        finally:
            self._inside = False


def _audit(event: str, args: Any) -> None:
    if event.startswith(("open", "os.")):
        for watch in _Watch.active:
            watch(event)


sys.addaudithook(_audit)


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The common umask, under which a file opened without a mode is 0644."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_the_key_is_0600_in_a_0700_folder_and_never_readable_by_others_meanwhile(
        tmp_path: Path, umask_022: None):
    """At no moment between the folder's making and the call's return is a file there
    holding the private key readable by group or others (the key was written with the
    umask's 0644 and chmodded after); the folder is 0700 (it was 0755)."""
    folder = tmp_path / "state" / "tls"
    watch = _Watch(folder)
    _Watch.active.append(watch)
    try:
        _, key = _tls.self_signed(folder, reuse=True)
    finally:
        _Watch.active.remove(watch)
    assert watch.seen == []
    assert _mode(folder) == 0o700
    assert _mode(key) == 0o600 and stat.S_ISREG(os.lstat(key).st_mode)
    assert sorted(p.name for p in folder.iterdir()) == [".lock", "aiosb-cert.pem",
                                                        "aiosb-key.pem"]


@pytest.mark.parametrize("reuse", [True, False])
def test_a_symlink_planted_at_the_key_path_is_not_followed(tmp_path: Path, reuse: bool):
    """A symlink at ``aiosb-key.pem`` to a file elsewhere: the file is left as it was
    (the key was written through the link, and the target chmodded), the link replaced
    by the key itself."""
    folder, elsewhere = tmp_path / "tls", tmp_path / "elsewhere"
    folder.mkdir(mode=0o700)
    elsewhere.write_text("someone else's file\n")
    elsewhere.chmod(0o644)
    (folder / "aiosb-key.pem").symlink_to(elsewhere)
    _, key = _tls.self_signed(folder, reuse=reuse)
    assert elsewhere.read_text() == "someone else's file\n" and _mode(elsewhere) == 0o644
    assert not key.is_symlink() and _mode(key) == 0o600
    assert b"PRIVATE KEY" in key.read_bytes()


def _give_to_nobody(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``path`` another user's: really where this runs as root, else by making the
    process another user in aiosb's eyes."""
    if os.geteuid() == 0:
        os.chown(path, NOBODY, NOBODY)
    else:
        monkeypatch.setattr(os, "geteuid", lambda: NOBODY)


@pytest.mark.parametrize("case", ["a symlink", "writable by others", "writable by its group",
                                  "another user's"])
def test_a_folder_not_the_users_own_is_refused_in_one_sentence(
        tmp_path: Path, case: str, monkeypatch: pytest.MonkeyPatch):
    """Nothing is written there, and the error says which folder and why."""
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    folder = tmp_path / "tls"
    if case == "a symlink":
        folder.symlink_to(real, target_is_directory=True)
    else:
        folder = real
        if case == "another user's":
            _give_to_nobody(folder, monkeypatch)
        else:
            folder.chmod(0o777 if case == "writable by others" else 0o770)
    says = {"a symlink": "is a symbolic link", "another user's": "belongs to another user",
            "writable by others": "is writable by group or others (mode 0777)",
            "writable by its group": "is writable by group or others (mode 0770)"}[case]
    starts = "^" + re.escape(f"the TLS folder {folder} {says}")
    with pytest.raises(_tls.UnsafeTlsFolder, match=starts) as got:
        _tls.self_signed(folder, reuse=True)
    assert str(got.value).count(". ") == 0 and str(got.value).endswith(".")
    assert list(real.iterdir()) == []


def test_aiosb_serve_says_a_refused_folder_in_one_line_and_stops(tmp_path: Path):
    """The CLI: exit status 2 and one line on stderr, no server started."""
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "tls").symlink_to(real, target_is_directory=True)
    done = subprocess.run(
        [sys.executable, "-m", "aiosb.cli", "serve", "--port", "0", "--amqp-port", "0",
         "--amqps-port", "0", "--tls-dir", str(tmp_path / "tls")],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"aiosb: the TLS folder {tmp_path / 'tls'} is a symbolic link, which aiosb does not "
        "follow to write a private key: give the folder itself with --tls-dir."]
    assert list(real.iterdir()) == []


@pytest.mark.parametrize("case", ["key mode 0644", "key another user's", "key a symlink",
                                  "an earlier aiosb's CA"])
def test_a_pair_that_may_have_been_copied_or_vouches_for_others_is_not_reused(
        tmp_path: Path, case: str, caplog: pytest.LogCaptureFixture):
    """A key others could read (or another user's, or a link to one) may have been
    copied: a new pair replaces it, and the server says so. So does a certificate
    authority an earlier aiosb made. The pair left as it is is reused (the control)."""
    folder = tmp_path / "tls"
    cert, key = _tls.self_signed(folder)
    assert _tls.self_signed(folder, reuse=True) == (cert, key)
    made = cert.read_bytes(), key.read_bytes()
    if case == "key mode 0644":
        key.chmod(0o644)
    elif case == "key another user's":
        if os.geteuid() != 0:
            pytest.skip("only root can give a file to another user")
        os.chown(key, NOBODY, NOBODY)
    elif case == "key a symlink":
        moved = tmp_path / "moved-key.pem"
        key.rename(moved)
        key.symlink_to(moved)
    else:
        _ca_as_before(folder)
        made = cert.read_bytes(), key.read_bytes()
    with caplog.at_level(logging.WARNING, logger="aiosb"):
        assert _tls.self_signed(folder, reuse=True) == (cert, key)
    assert cert.read_bytes() != made[0] and key.read_bytes() != made[1]
    assert _mode(key) == 0o600 and not key.is_symlink() and os.lstat(key).st_uid == os.geteuid()
    _tls.context(cert, key)
    assert _is_leaf(cert)
    said = {"key mode 0644": "has mode 0644", "key another user's": "belongs to another user",
            "key a symlink": "is a symbolic link",
            "an earlier aiosb's CA": "is a certificate authority"}[case]
    assert said in caplog.text and "trust the new" in caplog.text


def _ca_as_before(folder: Path) -> None:
    """What aiosb made before #48: a self-signed CA, no path length, no name constraints
    (its key 0600, so only what it is replaces it)."""
    key = serialization.load_pem_private_key((folder / "aiosb-key.pem").read_bytes(), None)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=365))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    (folder / "aiosb-cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _is_leaf(cert: Path) -> bool:
    loaded = x509.load_pem_x509_certificate(cert.read_bytes())
    return not loaded.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


# --- the certificate vouches for localhost and no other host ---


def _forge(key: Any, issuer: x509.Name, host: str) -> x509.Certificate:
    """A certificate for ``host`` made with the server's key: issued in the name of
    the server's certificate, or self-signed if ``issuer`` is its own subject."""
    now = dt.datetime.now(dt.UTC)
    return (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
            .issuer_name(issuer).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))


def _handshake(chain: bytes, key: Path, trusted: Path, host: str, flags: int,
               tmp_path: Path) -> None:
    """A TLS handshake in memory: a server presenting ``chain`` with ``key``, a client
    that trusts ``trusted`` alone and wants ``host``; raises what the client raises."""
    presented = tmp_path / "presented.pem"
    presented.write_bytes(chain)
    server_ctx = _tls.context(presented, key)
    client_ctx = ssl.create_default_context(cafile=str(trusted))
    client_ctx.verify_flags |= flags
    wires = [ssl.MemoryBIO() for _ in range(4)]
    client = client_ctx.wrap_bio(wires[0], wires[1], server_hostname=host)
    server = server_ctx.wrap_bio(wires[2], wires[3], server_side=True)
    for _ in range(10):
        done = 0
        for side, out, into in ((client, wires[1], wires[2]), (server, wires[3], wires[0])):
            try:
                side.do_handshake()
                done += 1
            except ssl.SSLWantReadError:
                pass
            finally:
                into.write(out.read())
        if done == 2:
            return
    raise AssertionError("the handshake did not end")


@pytest.mark.parametrize("flags", VERIFY_FLAGS, ids=["default", "strict+partial"])
def test_the_certificate_vouches_for_localhost_and_no_other_host(tmp_path: Path, flags: int):
    """A client trusting the certificate (as ``connection_verify``, certifi's bundle or
    ``NODE_EXTRA_CA_CERTS`` make it) reaches localhost, 127.0.0.1 and ::1 through it;
    a certificate for ``evil.test`` made with its key, issued in its name or
    self-signed, is refused: it is a leaf, not a CA."""
    cert, key = _tls.self_signed(tmp_path / "tls")
    pem = cert.read_bytes()
    loaded = x509.load_pem_x509_certificate(pem)
    constraints = loaded.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and not constraints.value.ca
    assert not loaded.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    names = loaded.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["localhost"]
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1"),
                                                         ipaddress.ip_address("::1")]
    for host in ("localhost", "127.0.0.1", "::1"):
        _handshake(pem, key, cert, host, flags, tmp_path)
    private = serialization.load_pem_private_key(key.read_bytes(), None)
    issued = _forge(private, loaded.subject, "evil.test")
    with pytest.raises(ssl.SSLCertVerificationError, match="invalid CA certificate"):
        _handshake(issued.public_bytes(serialization.Encoding.PEM) + pem, key, cert,
                   "evil.test", flags, tmp_path)
    itself = _forge(private, x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
                                                           "evil.test")]), "evil.test")
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(itself.public_bytes(serialization.Encoding.PEM), key, cert, "evil.test",
                   flags, tmp_path)


# --- the folder: per user, not the working directory ---


def test_the_default_folder_is_per_user(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """``$XDG_STATE_HOME/aiosb/tls`` where set (absolute), else under the home folder."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    expected = {"win32": Path(os.environ.get("LOCALAPPDATA", "")) / "aiosb" / "tls"}
    assert _tls.default_dir() == expected.get(sys.platform, tmp_path / "state" / "aiosb" / "tls")
    if sys.platform in ("linux", "darwin"):
        monkeypatch.setenv("XDG_STATE_HOME", "relative/is/ignored")
        under = (".local/state" if sys.platform == "linux"
                 else "Library/Application Support")
        assert _tls.default_dir() == tmp_path / "home" / under / "aiosb" / "tls"


def test_aiosb_serve_keeps_its_certificate_per_user_not_in_the_working_directory(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Started with no --tls-dir in a repository's folder: nothing is written there
    (a key there gets committed); the certificate the banner names is the per-user
    one."""
    repository, state = tmp_path / "repository", tmp_path / "state"
    repository.mkdir()
    monkeypatch.chdir(repository)
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    # The aiosb under test, whatever the folder (an editable install may be another's).
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(Path(aiosb.__file__).parent.parent), os.environ.get("PYTHONPATH", "")]))
    with ServerProcess() as server:
        assert server.certificate == str(state / "aiosb" / "tls" / "aiosb-cert.pem")
    assert list(repository.iterdir()) == []
    assert _mode(state / "aiosb" / "tls") == 0o700
    assert _mode(state / "aiosb" / "tls" / "aiosb-key.pem") == 0o600


# --- a client the docs name, beside those other tests run: Qpid Proton ---


def test_qpid_proton_trusts_the_leaf_and_sends_over_amqp_over_tls(tmp_path: Path):
    """Proton (its own OpenSSL setup: a trusted CA database, the peer's name checked)
    takes the self-signed leaf as its trust anchor, as docs/server.md says: it opens a
    connection over AMQP over TLS to localhost and a message it sends is accepted."""
    proton = pytest.importorskip("proton", reason="needs python-qpid-proton (the dev extra)")
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    from aiosb.auth import DEV_KEY, DEV_KEY_NAME

    class SendOne(MessagingHandler):
        def __init__(self, url: str, cert: str) -> None:
            super().__init__()
            self.url, self.cert = url, cert
            self.accepted = False
            self.errors: list[str] = []

        def on_start(self, event: Any) -> None:
            domain = proton.SSLDomain(proton.SSLDomain.MODE_CLIENT)
            domain.set_trusted_ca_db(self.cert)
            domain.set_peer_authentication(proton.SSLDomain.VERIFY_PEER_NAME)
            self.timer = event.container.schedule(30, self)
            # Proton checks the peer's name against DNS names, not addresses: localhost.
            connection = event.container.connect(self.url, ssl_domain=domain,
                                                 reconnect=False, virtual_host="localhost")
            event.container.create_sender(connection, "q")

        def on_sendable(self, event: Any) -> None:
            if not self.accepted and event.sender.credit:
                event.sender.send(proton.Message(body="over TLS"))

        def on_accepted(self, event: Any) -> None:
            self.accepted = True
            self.timer.cancel()
            event.connection.close()

        def on_transport_error(self, event: Any) -> None:
            self.errors.append(str(event.transport.condition))
            self.timer.cancel()

        def on_timer_task(self, event: Any) -> None:
            self.errors.append("timed out")
            event.container.stop()

    with ServerProcess(args=["--tls-dir", str(tmp_path / "tls")]) as server:
        async def queue() -> None:
            async with aiosb.connect(f"{server.url}/sbemulatorns") as ns:
                await ns.create_queue("q")

        asyncio.run(queue())
        port = server.amqps_connection_string.split(";", 1)[0].rsplit(":", 1)[1].rstrip("/")
        login = f"{quote(DEV_KEY_NAME, safe='')}:{quote(DEV_KEY, safe='')}"
        client = SendOne(f"amqps://{login}@127.0.0.1:{port}", server.certificate)
        Container(client).run()
    assert client.errors == [] and client.accepted
