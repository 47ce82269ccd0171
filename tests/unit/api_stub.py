"""What the unit tests' small HTTP API servers share: a quiet HTTP/1.1 handler and the way
they answer, so each test's server says only how it misbehaves."""

import json
from http.server import BaseHTTPRequestHandler


class QuietHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 (keep-alive, as kube-apiserver speaks it), no access log on stderr."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass


def send_json(handler, status, body, headers=None):
    """Answer ``status`` with ``body`` as JSON, its length given, plus ``headers``."""
    data = json.dumps(body).encode()
    send_head(handler, status, headers, length=len(data))
    handler.wfile.write(data)


def send_head(handler, status, headers=None, length=None, chunked=False):
    """The status line and headers of a JSON answer: with its ``length``, ``chunked`` (a
    watch), or neither (the body ends with the connection)."""
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    if length is not None:
        handler.send_header("Content-Length", str(length))
    if chunked:
        handler.send_header("Transfer-Encoding", "chunked")
    for key, value in (headers or {}).items():
        handler.send_header(key, value)
    handler.end_headers()


def send_chunk(handler, data):
    """One chunk of a chunked body, flushed."""
    handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
    handler.wfile.flush()
