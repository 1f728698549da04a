"""Checking that a Dask scheduler answers at an address before Dask's client connects to it.

Dask's client trusts its peer: the first 8 bytes it reads are the length of the message to come,
and it allocates that much at once (a service that answers with other bytes made it try 3 EiB),
while a peer that says nothing (an HTTP server waits for a request) kept it waiting past a
minute. A Dask scheduler speaks first: on a new connection it sends a short handshake, framed as
`total bytes` (8, little-endian) + `number of frames` + each frame's length + the frames. This
probe reads at most MAX_HANDSHAKE_BYTES of that, each step under a timeout, and refuses any
address where it does not find that shape. Only plain `tcp://` addresses are probed; TLS and
other transports are left to Dask's own connect timeout.
"""

from __future__ import annotations

import socket
import struct

from capsim.errors import CapsimError, quote

TIMEOUT_S = 10.0  # each step: connecting, and each read of the handshake
MAX_HANDSHAKE_BYTES = 1 << 20  # a scheduler's handshake is a few hundred bytes
DEFAULT_PORT = 8786


def probe(address: str, timeout_s: float = TIMEOUT_S) -> None:
    """Return when a Dask scheduler's handshake comes from `address`; otherwise a CapsimError
    that says what was found. Never waits longer than timeout_s for one step."""
    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = "tcp", address
    if scheme != "tcp":
        return
    host, port = _host_port(address, rest)
    where = f"--dask-scheduler {quote(address)}"
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            (total,) = struct.unpack("<Q", _read(sock, 8))
            if not 16 <= total <= MAX_HANDSHAKE_BYTES:
                raise _NotDask(f"its first bytes announce a {total:,}-byte message")
            body = _read(sock, total)
            (frames,) = struct.unpack_from("<Q", body)
            if not 1 <= frames <= 64 or 8 + 8 * frames > total:
                raise _NotDask("its first message is not framed as Dask frames its messages")
    except _NotDask as exc:
        raise CapsimError(f"{where}: something answers there, but not a Dask scheduler ({exc}). Give the address "
                          "`dask scheduler` prints, e.g. tcp://10.0.0.5:8786.") from None
    except TimeoutError:
        raise CapsimError(f"{where}: no Dask scheduler answered within {timeout_s:g} s (a scheduler greets every "
                          "new connection at once; is this another service, such as a web server?).") from None
    except OSError as exc:
        raise CapsimError(f"{where}: cannot connect ({exc.strerror or exc}). Give the address `dask scheduler` "
                          "prints, e.g. tcp://10.0.0.5:8786.") from None


class _NotDask(Exception):
    """The peer answered with bytes that are not a Dask handshake (args[0]: what was seen)."""


def _host_port(address: str, rest: str) -> tuple[str, int]:
    host, sep, port = rest.rstrip("/").rpartition(":")
    if not sep:
        return rest.rstrip("/"), DEFAULT_PORT
    try:
        number = int(port)
    except ValueError:
        number = -1
    if not 0 < number < 65536 or not host:
        raise CapsimError(f"--dask-scheduler {quote(address)}: expected tcp://HOST:PORT, e.g. tcp://10.0.0.5:8786.")
    return host.strip("[]"), number


def _read(sock: socket.socket, n: int) -> bytes:
    """Exactly n bytes (the caller has bounded n), or _NotDask when the peer closes first."""
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 65536))
        if not chunk:
            raise _NotDask(f"it closed the connection after {got} bytes")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)
