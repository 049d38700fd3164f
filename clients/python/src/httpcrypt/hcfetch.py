"""``python -m httpcrypt.hcfetch``: the interop driver every client of the
project implements with the same contract.

    hcfetch [--mount PATH] [--identity B64U] [--pq off|prefer|require]
            [-X METHOD] [-H 'Name: value']... [-d DATA | --data-file FILE]
            [--repeat N] [--v1-tickets] URL

The URL's path and query are the inner target. The request is sent N times
(default 1) through one client; for each, stderr gets
``request I: status S, credential key|ticket|ticket (short)``: what the outer
cookie carried (a public key, a v1 ticket, a short ticket; spec §7.3). The
client asks for short tickets and presents them unless ``--v1-tickets`` is
given. The last response body goes
raw to stdout. Exit 0 when every request got an authenticated inner response
(any inner status); exit 1 on a protocol error, with ``error: CODE`` on
stderr (the spec §12 code, or the problem type of an outer refusal).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator, Sequence

import httpx

from .errors import HTTPCryptError
from .httpx_transport import HTTPCryptTransport
from .outer import cookie_credential


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hcfetch", description=__doc__.split("\n\n")[0])
    p.add_argument("--mount", default="", help="the server's mount path")
    p.add_argument("--identity", help="pinned identity key (base64url): authenticated mode")
    p.add_argument("--pq", choices=("off", "prefer", "require"), default="off",
                   help="suite 2, the hybrid X25519 + ML-KEM-768 agreement (spec/hybrid.md)")
    p.add_argument("-X", "--request", dest="method", default="GET", help="request method")
    p.add_argument("-H", "--header", dest="headers", action="append", default=[],
                   help="extra request field 'Name: value' (repeatable)")
    data = p.add_mutually_exclusive_group()
    data.add_argument("-d", "--data", help="request body")
    data.add_argument("--data-file", help="request body from a file (streamed)")
    p.add_argument("--repeat", type=int, default=1, help="send the request N times")
    p.add_argument("--v1-tickets", action="store_true",
                   help="never ask for short tickets (spec §7.3): present the server's v1 "
                        "tickets (§7.2)")
    p.add_argument("url", help="http://host[:port]/path?query")
    return p


# What the hcfetch contract calls each credential an outer cookie carries.
_CREDENTIAL_NAMES = {"key": "key", "ticket": "ticket", "short_ticket": "ticket (short)",
                     "none": "none"}


def _file_chunks(path: str) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while chunk := f.read(64 * 1024):
            yield chunk


def _error_code(e: HTTPCryptError) -> str:
    if e.code in ("refused", "inner_problem") and e.problem_type:
        return e.problem_type
    return e.code


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the driver; returns the exit code."""
    a = _parser().parse_args(argv)
    if a.repeat < 1:
        print("error: --repeat must be at least 1", file=sys.stderr)
        return 2
    headers = []
    for h in a.headers:
        name, sep, value = h.partition(":")
        if not sep:
            print(f"error: header {h!r} is not 'Name: value'", file=sys.stderr)
            return 2
        headers.append((name.strip(), value.strip()))
    method = a.method
    if method == "GET" and (a.data is not None or a.data_file is not None):
        method = "POST"
    transport = HTTPCryptTransport(mount=a.mount, identity=a.identity, pq=a.pq,
                                   short_tickets=not a.v1_tickets,
                                   # One request per process (no --repeat): a ticket
                                   # could never be presented, so it declines one.
                                   one_shot=a.repeat <= 1)
    out = sys.stdout.buffer
    try:
        with httpx.Client(transport=transport, timeout=60.0) as client:
            for i in range(1, a.repeat + 1):
                content: bytes | Iterator[bytes] | None = None
                req_headers = list(headers)
                if a.data is not None:
                    content = a.data.encode()
                elif a.data_file is not None:
                    content = _file_chunks(a.data_file)
                    req_headers.append(("Content-Length", str(os.path.getsize(a.data_file))))
                req = client.build_request(method, a.url, headers=req_headers, content=content)
                rsp = client.send(req, stream=True)
                try:
                    info = rsp.extensions["httpcrypt"]
                    cookie = next((v for n, v in info.request_headers if n == "Cookie"), "")
                    credential = _CREDENTIAL_NAMES[cookie_credential(cookie)]
                    print(f"request {i}: status {rsp.status_code}, credential {credential}",
                          file=sys.stderr, flush=True)
                    for chunk in rsp.iter_raw():
                        if i == a.repeat:
                            out.write(chunk)
                finally:
                    rsp.close()
            out.flush()
    except HTTPCryptError as e:
        print(f"error: {_error_code(e)}", file=sys.stderr)
        return 1
    except httpx.HTTPError as e:
        print(f"error: transport: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
