"""A loopback TCP proxy in front of the lab's API server that a test drives to make the
network misbehave the way real ones do: a load balancer or NAT that silently drops its
flows, a reset, a response cut in the middle, an API server that accepts connections and
never answers, a man in the middle with the wrong certificate.

It forwards bytes and never looks inside TLS (the client still verifies the API server's
certificate and authenticates with its own), so what the client sees is what it would see
on a real network. Faults apply per connection: "open" ones are those accepted before the
switch, "new" ones those accepted after it.

    proxy = FaultProxy(upstream_port).start()
    kubeconfig = proxy.kubeconfig(lab.kubeconfig, directory)   # the lab's, pointed at the proxy
    proxy.stall()           # every open connection goes silent: no byte, no FIN, no RST
    proxy.pass_through()    # new connections pass again (stalled ones stay stalled)

Switches: pass_through, stall, reset, cut, lose_reply, hold, wrong_certificate. Besides them,
``throttle(bytes_per_second)`` limits what the server sends to every connection, open and new
(an overloaded API server, a thin link: a body that trickles); ``throttle(None)`` lifts it.

Only 127.0.0.1, only for tests; one thread per connection.
"""

import datetime
import ipaddress
import os
import select
import socket
import ssl
import struct
import threading
import time

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

LOOPBACK = "127.0.0.1"
# How often a connection's thread looks at the switches when no byte moves: the proxy
# reacts to a switch within this.
_TICK = 0.05
_CHUNK = 65536

PASS = "pass"
STALL = "stall"
CUT = "cut"
LOSE_REPLIES = "lose-reply"
HOLD = "hold"
WRONG_CERTIFICATE = "wrong-certificate"
MODES = (PASS, STALL, CUT, LOSE_REPLIES, HOLD, WRONG_CERTIFICATE)


def _rst(sock):
    """Close with a TCP RST instead of a FIN (SO_LINGER with a zero timeout)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


def self_signed_certificate(directory, common_name="not-the-api-server"):
    """(cert path, key path) of a certificate for 127.0.0.1 no lab CA signed."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(LOOPBACK))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    cert_path = os.path.join(directory, "wrong.crt")
    key_path = os.path.join(directory, "wrong.key")
    with open(cert_path, "wb") as handle:
        handle.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as handle:
        handle.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    os.chmod(key_path, 0o600)
    return cert_path, key_path


class _Connection(object):
    """One client connection and its upstream twin."""

    def __init__(self, number, client, mode, setting):
        self.number = number
        self.client = client
        self.upstream = None
        self.mode = mode  # the mode it was accepted under; stall() and reset() change open ones
        self.setting = setting
        self.opened = time.monotonic()
        self.up = 0  # bytes client -> server
        self.down = 0  # bytes server -> client
        self.requests = 0  # client bursts: what the client sent between two server answers
        self.request = 0  # bytes of the current burst
        self.last_from = None
        self.last_down = None
        self.stalled = False
        self.closed = False
        self.reset = False

    def info(self):
        return {"number": self.number, "mode": self.mode, "up": self.up, "down": self.down,
                "opened": self.opened, "last_down": self.last_down, "stalled": self.stalled, "closed": self.closed,
                # Past the TLS handshake: the server's first flight came and the client sent
                # its second (its request follows at once; the API server may not answer a
                # watch before its first event).
                "answered": self.requests >= 2 and self.down > 0}


class FaultProxy(object):
    def __init__(self, upstream_port, upstream_host=LOOPBACK):
        self.upstream = (upstream_host, upstream_port)
        self._listener = None
        self._lock = threading.Lock()
        self._connections = []
        self._mode = PASS
        self._setting = None
        self._released = threading.Event()
        self._stopping = threading.Event()
        self._threads = []
        self._rate = None  # bytes per second from the server to each client; None: no limit
        self.port = None

    # ------------------------------------------------------------ life

    def start(self):
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((LOOPBACK, 0))
        listener.listen(128)
        listener.settimeout(_TICK * 4)
        self._listener = listener
        self.port = listener.getsockname()[1]
        self._spawn(self._accept_loop, "fault-proxy-accept")
        return self

    def stop(self):
        self._stopping.set()
        self._released.set()
        for thread in list(self._threads):
            thread.join(5)
        if self._listener is not None:
            self._listener.close()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            self._close(conn)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def mode(self):
        """The switch new connections see now (``lose_reply`` is back to pass once spent)."""
        with self._lock:
            return self._mode

    @property
    def url(self):
        return "https://%s:%d" % (LOOPBACK, self.port)

    def kubeconfig(self, source, directory):
        """A copy of the kubeconfig ``source`` with every cluster's server pointed at the
        proxy; the API server's certificate names 127.0.0.1, so TLS verifies as before."""
        with open(source) as handle:
            config = yaml.safe_load(handle)
        for cluster in config.get("clusters") or ():
            cluster["cluster"]["server"] = self.url
        path = os.path.join(directory, "kubeconfig-via-proxy-%d" % self.port)
        with open(path, "w") as handle:
            yaml.safe_dump(config, handle, default_flow_style=False)
        os.chmod(path, 0o600)
        return path

    # ------------------------------------------------------------ switches

    def _switch(self, mode, setting=None):
        with self._lock:
            self._mode, self._setting = mode, setting
            if mode != HOLD:
                self._released.set()
            else:
                self._released.clear()

    def pass_through(self):
        """New connections pass untouched; held ones are let through."""
        self._switch(PASS)

    def stall(self, numbers=None):
        """Every open connection (or those ``numbers``) goes silent both ways: nothing is
        forwarded, nothing closed. The sockets stay open, so the kernel still acknowledges
        TCP keep-alive probes: only the application can tell. New connections pass."""
        with self._lock:
            for conn in self._connections:
                if not conn.closed and (numbers is None or conn.number in numbers):
                    conn.stalled = True

    def reset(self):
        """Every open connection is closed with a TCP RST on the client side (and closed
        upstream)."""
        with self._lock:
            connections = [c for c in self._connections if not c.closed]
        for conn in connections:
            conn.reset = True

    def cut(self, after_bytes):
        """Each new connection forwards the first ``after_bytes`` bytes from the server
        (the TLS handshake and the start of the response) and is then closed: a response
        body that ends in the middle."""
        self._switch(CUT, int(after_bytes))

    def lose_reply(self, request_bytes):
        """The next request larger than ``request_bytes`` (an upload such as a create; a GET
        is a few hundred bytes) reaches the API server, and its reply is lost: the proxy
        swallows it and resets the client's side. Once; then pass-through. A request is
        what the client sends between two pieces of the server's answer, after the TLS
        handshake's two client flights (TLS 1.3 with a client certificate)."""
        self._switch(LOSE_REPLIES, int(request_bytes))

    def throttle(self, bytes_per_second):
        """Every connection, open and new, gets the server's bytes at most this fast (each
        connection on its own), in pieces of a tick's worth: ``throttle(1)`` sends a byte a
        second. None lifts the limit. Independent of the switches above."""
        if bytes_per_second is not None and not bytes_per_second > 0:
            raise ValueError("throttle: bytes_per_second must be above 0 or None, got %r" % (bytes_per_second,))
        with self._lock:
            self._rate = bytes_per_second

    def hold(self):
        """New connections are accepted and then left waiting, never forwarded, until the
        next switch: an API server that accepts and does not answer (its TLS handshake
        never completes)."""
        self._switch(HOLD)

    def wrong_certificate(self, cert_path, key_path):
        """New connections are answered by the proxy itself with this certificate."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert_path, key_path)
        self._switch(WRONG_CERTIFICATE, context)

    # ------------------------------------------------------------ what happened

    def connections(self):
        with self._lock:
            return [c.info() for c in self._connections]

    def open_connections(self):
        """Connections whose client is still connected."""
        return [c for c in self.connections() if not c["closed"]]

    def wait_open(self, count, timeout=60, since=0, answered=False):
        """Waits until ``count`` connections numbered ``since`` or later are open (and, with
        ``answered``, each past its handshake with an answer begun); the list."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [c for c in self.open_connections() if c["number"] >= since and (c["answered"] or not answered)]
            if len(found) >= count:
                return found
            time.sleep(_TICK)
        raise AssertionError("fewer than %d open proxy connections after %ss: %s"
                             % (count, timeout, self.connections()))

    def next_number(self):
        with self._lock:
            return len(self._connections)

    # ------------------------------------------------------------ plumbing

    def _spawn(self, target, name, *args):
        thread = threading.Thread(target=target, args=args, name=name)
        thread.daemon = True
        thread.start()
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]

    def _accept_loop(self):
        while not self._stopping.is_set():
            try:
                client, _address = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with self._lock:
                conn = _Connection(len(self._connections), client, self._mode, self._setting)
                self._connections.append(conn)
            self._spawn(self._serve, "fault-proxy-%d" % conn.number, conn)

    def _close(self, conn, rst=False):
        with self._lock:
            if conn.closed:
                return
            conn.closed = True
        if rst:
            _rst(conn.client)
        else:
            conn.client.close()
        if conn.upstream is not None:
            conn.upstream.close()

    def _serve(self, conn):
        try:
            if conn.mode == HOLD:
                while not self._released.wait(_TICK):
                    if self._stopping.is_set() or conn.stalled or conn.reset:
                        break
                if self._stopping.is_set() or conn.reset:
                    self._close(conn, rst=conn.reset)
                    return
            if conn.mode == WRONG_CERTIFICATE:
                self._answer_with_wrong_certificate(conn)
                return
            conn.upstream = socket.create_connection(self.upstream, timeout=10)
            conn.upstream.settimeout(None)
            # Each piece is passed on as it comes, on both sides: with Nagle's algorithm a
            # response's second small write waited for the ACK of its first, which the other
            # end delays (40 ms on Linux): 0.13 s more per wait in pass-through mode, measured.
            for sock in (conn.client, conn.upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._pump(conn)
        except OSError:
            self._close(conn)

    def _loses(self, conn):
        """Whether this piece of the server's answer replies to the upload whose reply is
        to be lost (and, if so, the switch is spent)."""
        with self._lock:
            if self._mode != LOSE_REPLIES or conn.requests < 3 or conn.request <= self._setting:
                return False
            self._mode, self._setting = PASS, None
            return True

    def _answer_with_wrong_certificate(self, conn):
        conn.client.settimeout(10)
        try:
            tls = conn.setting.wrap_socket(conn.client, server_side=True)
        except (ssl.SSLError, OSError):
            # The client refused the certificate, as it must.
            self._close(conn)
            return
        tls.close()
        self._close(conn)

    def _pump(self, conn):
        client, upstream = conn.client, conn.upstream
        while not self._stopping.is_set():
            if conn.reset:
                self._close(conn, rst=True)
                return
            if conn.stalled:
                time.sleep(_TICK)
                continue
            try:
                readable, _w, _x = select.select([client, upstream], [], [], _TICK)
            except (OSError, ValueError):
                self._close(conn)
                return
            # A switch may have come while waiting: nothing moves on a stalled connection.
            if conn.stalled or conn.reset:
                continue
            with self._lock:
                rate = self._rate
            for sock in readable:
                # Throttled, the server's side is read a tick's worth at a time, so a switch
                # still takes effect within about a tick.
                data = sock.recv(_CHUNK if rate is None or sock is client else max(1, int(rate * _TICK)))
                if not data:
                    self._close(conn)
                    return
                if sock is client:
                    if conn.last_from is not client:
                        conn.requests += 1
                        conn.request = 0
                    conn.last_from = client
                    conn.request += len(data)
                    upstream.sendall(data)
                    conn.up += len(data)
                    continue
                conn.last_from = upstream
                if self._loses(conn):
                    # The reply to the upload: swallowed, and the client hears only a reset.
                    self._close(conn, rst=True)
                    return
                if conn.mode == CUT and conn.down + len(data) > conn.setting:
                    keep = max(conn.setting - conn.down, 0)
                    client.sendall(data[:keep])
                    conn.down += keep
                    self._close(conn)
                    return
                client.sendall(data)
                conn.down += len(data)
                conn.last_down = time.monotonic()
                if rate is not None:
                    time.sleep(len(data) / float(rate))
