"""The lab fault proxy's bandwidth throttle (issue 36): what the server sends reaches the
client no faster than the limit, on connections open before the switch too; lifted, the
bytes pass as before. The lower bound on time is the behaviour under test (a throttle that
did nothing would pass everything at once); no upper bound is asserted."""

import socket
import threading
import time

import pytest

from tests.lab.fault_proxy import FaultProxy

PAYLOAD = bytes(range(256)) * 3  # 768 bytes


class _Sender(object):
    """A TCP server on 127.0.0.1 that answers every line it reads with PAYLOAD."""

    def __init__(self):
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _address = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    @staticmethod
    def _answer(conn):
        with conn:
            reader = conn.makefile("rb")
            for _line in reader:
                conn.sendall(PAYLOAD)

    def close(self):
        self.listener.close()


@pytest.fixture
def proxy():
    sender = _Sender()
    fault_proxy = FaultProxy(sender.port).start()
    yield fault_proxy
    fault_proxy.stop()
    sender.close()


def _fetch(client):
    """Ask for PAYLOAD on an open connection; (bytes, seconds it took)."""
    started = time.monotonic()
    client.sendall(b"go\n")
    data = b""
    while len(data) < len(PAYLOAD):
        piece = client.recv(65536)
        assert piece, "the proxy closed the connection"
        data += piece
    return data, time.monotonic() - started


def test_a_throttled_answer_takes_its_size_over_the_rate_and_arrives_whole(proxy):
    client = socket.create_connection(("127.0.0.1", proxy.port), timeout=30)
    with client:
        assert _fetch(client)[0] == PAYLOAD
        # Switched on a connection already open: it applies there too.
        proxy.throttle(400)
        data, took = _fetch(client)
        assert data == PAYLOAD
        # 768 bytes at 400 B/s: about 1.9 s; the last piece's pause comes after it.
        assert took >= 1.5
        proxy.throttle(None)
        assert _fetch(client)[0] == PAYLOAD
    assert proxy.mode == "pass"


@pytest.mark.parametrize("rate", [0, -5])
def test_a_throttle_must_be_a_positive_rate(proxy, rate):
    with pytest.raises(ValueError, match="bytes_per_second must be above 0 or None, got %d" % rate):
        proxy.throttle(rate)
