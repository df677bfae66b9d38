"""Hypothesis strategies for the front door (#48): :class:`~.front_door.Plan` s that
reach the listener's first-byte router, TLS, the HTTP hand-off and AMQP over
WebSockets, each carrying what :mod:`.strategies` draws for AMQP.

- The way in: the AMQP port in the clear, TLS sniffed on the AMQP port, the AMQPS port
  with TLS, or the AMQPS port in the clear; the TLS handshake whole (its ClientHello in
  pieces, the first of one byte), or a ClientHello cut short or with bytes changed.
- What goes through it: an AMQP client's input (an SDK-like script, mutated); an HTTP
  request on the AMQP port (methods, paths, versions, headers and bodies changed); a
  WebSocket upgrade to ``/$servicebus/websocket`` (its headers changed, dropped or
  doubled) followed by WebSocket frames carrying AMQP (split, fragmented, unmasked,
  with reserved bits or opcodes, control frames, a length claimed and not sent, and
  now and then a message of megabytes); or any bytes.
- Around it: garbage outside TLS after the handshake, a close_notify, short pauses;
  then a half-close (the server must close), a close or a reset.
"""

from __future__ import annotations

import base64
import struct
from typing import Any

from hypothesis import strategies as st

from .client import Plan
from .harness import corpus_files
from .strategies import client_inputs, mutated_corpus

WS_PATH = "/$servicebus/websocket"
#: Sizes of the WebSocket messages sent whole that are larger than AMQP frames allow.
OVERSIZED = (70_000, 1 << 20, 4 << 20)
HTTP_PATHS = ["/", "/q1", "/q1/messages", "/q1/messages/head", "/$Resources/queues",
              "/fuzzns/q1", "/t1/subscriptions/s1", WS_PATH, "/health", "/explorer/",
              "/metrics", "/%00", "/" + "a" * 300]
HTTP_METHODS = ["GET", "PUT", "POST", "DELETE", "HEAD", "OPTIONS", "PATCH", "PROPFIND", "G",
                "GE", "GETT", "DEL", "P"]
#: What the official SDK sent (``corpus/``), for AMQP inputs cheaper to draw than scripts.
SDK = [p.read_bytes() for p in corpus_files() if p.name.startswith("sdk-")]
ascii_line = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40)


def ws_frame(payload: bytes, *, opcode: int = 2, fin: bool = True, rsv: int = 0,
             masked: bool = True, claimed: int | None = None, key: bytes = b"\x11\x22\x33\x44"
             ) -> bytes:
    """A client's WebSocket frame (RFC 6455, 5.2); ``claimed`` a length other than the
    payload's."""
    size = len(payload) if claimed is None else claimed
    head = bytearray([(0x80 if fin else 0) | (rsv & 7) << 4 | (opcode & 15)])
    mask = 0x80 if masked else 0
    if size < 126:
        head.append(mask | size)
    elif size < 1 << 16:
        head.append(mask | 126)
        head += struct.pack(">H", size)
    else:
        head.append(mask | 127)
        head += struct.pack(">Q", size)
    if masked:
        head += key
        payload = bytes(b ^ key[i % 4] for i, b in enumerate(payload)) \
            if len(payload) < 1 << 16 else _mask_long(payload, key)
    return bytes(head) + payload


def _mask_long(payload: bytes, key: bytes) -> bytes:
    whole = (key * (len(payload) // 4 + 1))[:len(payload)]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(whole, "big")).to_bytes(
        len(payload), "big")


def one_in(n: int, draw: Any) -> bool:
    """True one time in ``n``, and never in the simplest input (hypothesis starts from
    it, and shrinks toward it): the well-behaved path first, the odd one now and then."""
    return bool(draw(st.integers(0, n - 1)) == n - 1)


def _headers(draw: Any, wanted: list[tuple[str, str]], odd: bool) -> bytes:
    """Headers a client would send; if ``odd``, one or two of them dropped, doubled,
    changed or shouted, and now and then an odd one added."""
    out = list(wanted)
    if odd:
        for _ in range(draw(st.integers(1, 2))):
            at = draw(st.integers(0, len(out) - 1))
            name, value = out[at]
            how = draw(st.sampled_from(["drop", "double", "change", "case"]))
            if how == "drop":
                del out[at]
            elif how == "double":
                out.insert(at, (name, value))
            elif how == "change":
                out[at] = (name, draw(st.one_of(ascii_line, st.just(""), st.just("x" * 9000),
                                                st.just(value + ", " + value))))
            else:
                out[at] = (name.upper(), value.swapcase())
        for _ in range(draw(st.integers(0, 2))):
            out.append((draw(st.sampled_from(["Content-Length", "Transfer-Encoding", "Expect",
                                              "Authorization", "X-" + "y" * 20, "Origin"])),
                        draw(st.one_of(ascii_line, st.sampled_from(
                            ["chunked", "-1", "99999999999999999999", "100-continue",
                             "SharedAccessSignature sr=x&sig=y&se=1&skn=z"])))))
    return b"".join(f"{n}: {v}\r\n".encode("latin-1") for n, v in out)


def amqp_inputs() -> st.SearchStrategy[bytes]:
    """An AMQP client's input: an SDK-like script mutated, or a recorded SDK session
    with bytes changed (its tokens expired: refused at ``$cbs``, the way in still taken)."""
    return st.one_of(client_inputs(), mutated_corpus(SDK))


@st.composite
def upgrade_request(draw: Any) -> bytes:
    """An upgrade to AMQP over WebSockets, as the SDKs send it; one time in three, its
    request line or headers changed."""
    odd = one_in(3, draw)
    path, method, version, protocol = WS_PATH, "GET", "HTTP/1.1", "AMQPWSB10"
    if odd:
        path = draw(st.sampled_from([WS_PATH, WS_PATH + "?x=1", WS_PATH.upper(), "/",
                                     WS_PATH + "/"]))
        method = draw(st.sampled_from(["GET", "POST", "HEAD"]))
        version = draw(st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/2.0"]))
        protocol = draw(st.sampled_from(["AMQPWSB10", "AMQPWebSockets", "amqp",
                                         "AMQPWSB10, other", ""]))
    key = base64.b64encode(draw(st.binary(min_size=16, max_size=16))).decode()
    head = f"{method} {path} {version}\r\n".encode() + _headers(draw, [
        ("Host", "localhost"), ("Upgrade", "websocket"), ("Connection", "Upgrade"),
        ("Sec-WebSocket-Key", key), ("Sec-WebSocket-Version", "13"),
        ("Sec-WebSocket-Protocol", protocol)], odd)
    return head + b"\r\n"


@st.composite
def ws_frames(draw: Any) -> list[bytes]:
    """WebSocket frames carrying a client's AMQP input, some of them odd."""
    data = draw(amqp_inputs())
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=3)))
    chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    frames = []
    for i, chunk in enumerate(chunks):
        how = draw(st.sampled_from(["binary"] * 10 + [
            "fragment", "text", "unmasked", "rsv", "opcode", "claim", "ping", "close"]))
        if how == "binary":
            frames.append(ws_frame(chunk))
        elif how == "fragment" and len(chunk) > 1:
            half = len(chunk) // 2
            frames.append(ws_frame(chunk[:half], fin=False))
            frames.append(ws_frame(chunk[half:], opcode=0))
        elif how == "text":
            frames.append(ws_frame(chunk, opcode=1))
        elif how == "unmasked":
            frames.append(ws_frame(chunk, masked=False))
        elif how == "rsv":
            frames.append(ws_frame(chunk, rsv=draw(st.integers(1, 7))))
        elif how == "opcode":
            frames.append(ws_frame(chunk, opcode=draw(st.sampled_from(
                [0, 3, 4, 5, 6, 7, 11, 12, 13, 14, 15]))))
        elif how == "claim":  # a length claimed, and fewer bytes sent
            frames.append(ws_frame(chunk, claimed=draw(st.sampled_from(
                [len(chunk) + 1, 1 << 16, 1 << 24, 1 << 31, (1 << 63) - 1]))))
        elif how == "ping":
            frames.append(ws_frame(draw(st.binary(max_size=140)), opcode=9))
            frames.append(ws_frame(chunk))
        else:
            frames.append(ws_frame(draw(st.binary(max_size=8)), opcode=8))
            if i + 1 < len(chunks):
                frames.append(ws_frame(chunk))
    if one_in(25, draw):  # a message larger than any AMQP frame
        size = draw(st.sampled_from(OVERSIZED))
        frames.append(ws_frame(b"AMQP\x00\x01\x00\x00" + struct.pack(">I", size)
                               + b"\x02\x00\x00\x00" + bytes(size - 16)))
    return frames


@st.composite
def http_request(draw: Any) -> bytes:
    """An HTTP request as a client of the management API sends one to the AMQP port,
    its method, path, version, headers and body changed."""
    method = draw(st.sampled_from(HTTP_METHODS))
    path = draw(st.sampled_from(HTTP_PATHS))
    version = draw(st.sampled_from(["HTTP/1.1"] * 6 + ["HTTP/1.0", "HTTP/2.0", "HTTP/9",
                                                       "http/1.1", ""]))
    body = draw(st.binary(max_size=64))
    length = draw(st.sampled_from([str(len(body))] * 4 + ["0", "-1", "1" * 30, "abc"]))
    head = f"{method} {path} {version}\r\n".encode() + _headers(draw, [
        ("Host", "localhost"), ("Content-Type", "application/atom+xml"),
        ("Content-Length", length)], one_in(3, draw))
    out = bytearray(head + b"\r\n" + body)
    if one_in(4, draw):
        for _ in range(draw(st.integers(1, 4))):
            out[draw(st.integers(1, len(out) - 1))] = draw(st.integers(0, 255))
    if one_in(5, draw):
        del out[draw(st.integers(1, len(out))):]
    if one_in(5, draw):  # a second request on the same connection
        out += b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"
    return bytes(out)


#: The ways in: the AMQP port in the clear, TLS sniffed on it, the AMQPS port with TLS,
#: and the AMQPS port in the clear.
WAYS_IN = ("clear", "sniffed", "amqps", "amqps-clear")
#: What goes through a way in.
CONTENTS = ("amqp", "websocket", "http", "bytes", "nothing")


@st.composite
def hello(draw: Any) -> tuple[Any, ...]:
    """A TLS handshake: whole, its ClientHello in pieces; or the hello cut or changed."""
    if not one_in(5, draw):
        return ("hello", None, (), draw(st.integers(1, 4)))
    if draw(st.booleans()):
        return ("hello", draw(st.integers(1, 300)), (), 1)
    flips = tuple(draw(st.lists(st.tuples(st.integers(0, 600), st.integers(0, 255)),
                                min_size=1, max_size=4)))
    return ("hello", None, flips, 1)


@st.composite
def plans(draw: Any, way: str | None = None, content: str | None = None) -> Plan:
    """One connection through the front door: a way in (one of :data:`WAYS_IN`), what
    goes through (one of :data:`CONTENTS`), an ending; the way and the content drawn
    unless given."""
    if way is None:
        way = draw(st.sampled_from(["clear"] * 3 + ["sniffed"] * 3 + ["amqps"] * 3
                                   + ["amqps-clear"]))
    port = "amqps" if way.startswith("amqps") else "amqp"
    if content is None:
        content = draw(st.sampled_from(["amqp"] * 4 + ["websocket"] * 3 + ["http"] * 2
                                       + ["bytes", "nothing"]))
    steps: list[tuple[Any, ...]] = []
    if way in ("sniffed", "amqps"):
        steps.append(draw(hello()))
    if content == "amqp":
        steps += [("send", draw(amqp_inputs())), ("quiet",)]
    elif content == "http":
        steps += [("send", draw(http_request())), ("quiet",)]
    elif content == "websocket":
        steps += [("send", draw(upgrade_request())), ("headers",)]
        for frame in draw(ws_frames()):
            steps.append(("send", frame))
        steps.append(("quiet",))
    elif content == "bytes":
        steps += [("send", draw(st.binary(min_size=1, max_size=64))), ("quiet",)]
    if steps and steps[0][0] == "hello" and one_in(6, draw):
        at = draw(st.integers(1, len(steps)))  # garbage outside TLS after the handshake
        steps.insert(at, ("raw", draw(st.binary(min_size=1, max_size=40))))
    if one_in(10, draw):
        steps.insert(draw(st.integers(0, len(steps))), ("pause", 0.05))
    if port == "amqps" or way == "sniffed":
        if one_in(3, draw):
            steps.append(("close_notify",))
    end = draw(st.sampled_from(["shut"] * 6 + ["close", "reset"]))
    first = next((s[1][:1] for s in steps if s[0] == "send" and s[1]), b"")
    kind = content if content in ("websocket", "http") else (
        "http" if first and first[0] in b"GPDHO" else "amqp")
    if way == "amqps-clear" or (way == "clear" and first == b"\x16"):
        kind = "bytes"  # TLS's port in the clear, or a TLS record that is none: no protocol
    return Plan(port, tuple(steps), end, kind)




def _warm_up() -> tuple[Plan, ...]:
    """One well-formed connection through each way in, before the server's footprint is
    taken: what a first use allocates is not counted as the run's."""
    sdk = SDK[0]
    upgrade = (b"GET " + WS_PATH.encode() + b" HTTP/1.1\r\nHost: localhost\r\n"
               b"Upgrade: websocket\r\nConnection: Upgrade\r\n"
               b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
               b"Sec-WebSocket-Protocol: AMQPWSB10\r\n\r\n")
    request = b"GET /q1 HTTP/1.1\r\nHost: localhost\r\n\r\n"
    tls = ("hello", None, (), 1)
    websocket = (("send", upgrade), ("headers",), ("send", ws_frame(sdk)), ("quiet",))
    return (
        Plan("amqp", (("send", sdk), ("quiet",))),
        Plan("amqp", (tls, ("send", sdk), ("quiet",))),
        Plan("amqps", (tls, ("send", sdk), ("quiet",), ("close_notify",))),
        Plan("amqp", (("send", request), ("quiet",)), content="http"),
        Plan("amqp", (tls, ("send", request), ("quiet",)), content="http"),
        Plan("amqp", websocket, content="websocket"),
        Plan("amqps", (tls, *websocket), content="websocket"),
        Plan("amqp", (("hello", 40, (), 1),), content="bytes"),
    )


#: A connection through each way in, well-formed, before the footprint is taken.
WARM_UP = _warm_up()
#: What the front door's fuzzing found, each replayed by every short run for good: an
#: input that once made a finding, by what it found.
FOUND = {
    # Bytes outside TLS after a handshake, while AMQP reads its header: the TLS error
    # reached the connection as a bug's ("AMQP connection failed unexpectedly", an ERROR
    # and its traceback for any client that sends them).
    "garbage after a TLS handshake, on the AMQPS port": Plan(
        "amqps", (("hello", None, (), 1), ("send", b"AM"), ("quiet",), ("raw", b"garbage!"))),
    "garbage after a TLS handshake sniffed on the AMQP port": Plan(
        "amqp", (("hello", None, (), 1), ("send", b"AM"), ("quiet",), ("raw", b"garbage!"))),
}


__all__ = ["CONTENTS", "FOUND", "WARM_UP", "WAYS_IN", "amqp_inputs", "http_request", "plans",
           "upgrade_request", "ws_frame", "ws_frames"]
