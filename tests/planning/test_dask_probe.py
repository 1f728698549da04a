"""The Dask address probe: a peer that is not a Dask scheduler is named within the timeout, and
nothing it sends decides how much is read."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest
from capsim.planning.dask_probe import probe
from capsim.errors import CapsimError


def _server(reply: bytes | None, hold_s: float = 3.0):
    """A one-connection TCP server on a free port: sends `reply` (None: says nothing), keeps the
    connection open for hold_s. Returns its address."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)

    def serve():
        conn, _ = sock.accept()
        if reply is not None:
            conn.sendall(reply)
        time.sleep(hold_s)
        conn.close()
        sock.close()

    threading.Thread(target=serve, daemon=True).start()
    return f"tcp://127.0.0.1:{sock.getsockname()[1]}"


def _handshake() -> bytes:
    frame = b"\x83\xa1a\x01"  # any small msgpack body
    prelude = struct.pack("<QQ", 1, len(frame))
    return struct.pack("<Q", len(prelude) + len(frame)) + prelude + frame


def test_a_peer_announcing_exabytes_is_refused_without_reading_them():
    address = _server(b"\xff" * 8 + b"junk")
    with pytest.raises(CapsimError, match="something answers there, but not a Dask scheduler"):
        probe(address, timeout_s=2)


def test_a_silent_peer_such_as_a_web_server_times_out_on_the_first_read():
    address = _server(None)
    with pytest.raises(CapsimError, match="no Dask scheduler answered within 0.5 s"):
        probe(address, timeout_s=0.5)


def test_a_peer_that_closes_mid_message_is_refused():
    address = _server(struct.pack("<Q", 100) + b"short", hold_s=0)
    with pytest.raises(CapsimError, match="closed the connection after 5 bytes"):
        probe(address, timeout_s=2)


def test_a_dask_shaped_handshake_passes_and_other_transports_are_left_to_dask():
    probe(_server(_handshake()), timeout_s=2)
    probe("tls://127.0.0.1:1", timeout_s=0.1)  # not probed: TLS speaks first from the client


@pytest.mark.parametrize("address", ["tcp://host:notaport", "tcp://:8786", "tcp://h:99999"])
def test_malformed_addresses_are_named(address):
    with pytest.raises(CapsimError, match="expected tcp://HOST:PORT"):
        probe(address, timeout_s=0.1)
