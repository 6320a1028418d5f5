"""A WSGI application for sluice's end-to-end tests (see e2e/gunicorn.go).

Every request is recorded before it is answered: one line appended to the
file named by SLUICE_E2E_RECORD,

    <X-Request-Id or -> <method> <worker pid> <request body length>

written with a single os.write on a file opened with O_APPEND, so that the
lines of concurrent threads and worker processes never interleave. A line
in the file means the application processed the request: that is the side
effect a proxy must not repeat for a request that is not idempotent.

The answer is 200 with a short text body and the request's X-Request-Id.
Each request takes SLUICE_E2E_DELAY seconds (default 0.002) so that
requests overlap. GET /-/ready answers "sluice-e2e app" for readiness
probes; it is recorded with the id "-". GET /-/scheme answers the scheme
gunicorn made of the request (wsgi.url_scheme, from X-Forwarded-Proto,
which it takes from 127.0.0.1) and the X-Forwarded-For it got, as
"<scheme> <X-Forwarded-For>"; it is recorded too.
"""

import os
import time

RECORD = os.environ["SLUICE_E2E_RECORD"]
DELAY = float(os.environ.get("SLUICE_E2E_DELAY", "0.002"))
READY = b"sluice-e2e app\n"


def _token(value):
    """Returns value if it is a printable token that fits on a record line."""
    if not value or len(value) > 200:
        return "-"
    if any(c <= " " or c > "~" for c in value):
        return "-"
    return value


def application(environ, start_response):
    rid = _token(environ.get("HTTP_X_REQUEST_ID", ""))
    method = _token(environ.get("REQUEST_METHOD", ""))
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    body = environ["wsgi.input"].read(length) if length > 0 else b""

    line = "%s %s %d %d\n" % (rid, method, os.getpid(), len(body))
    fd = os.open(RECORD, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode("ascii"))
    finally:
        os.close(fd)

    if environ.get("PATH_INFO") == "/-/ready":
        out = READY
    elif environ.get("PATH_INFO") == "/-/scheme":
        out = ("%s %s\n" % (environ["wsgi.url_scheme"], environ.get("HTTP_X_FORWARDED_FOR", "-"))).encode("ascii")
    else:
        time.sleep(DELAY)
        out = ("ok %s %d\n" % (rid, os.getpid())).encode("ascii")
    headers = [
        ("Content-Type", "text/plain; charset=utf-8"),
        ("Content-Length", str(len(out))),
    ]
    if rid != "-":
        headers.append(("X-Request-Id", rid))
    start_response("200 OK", headers)
    return [out]
