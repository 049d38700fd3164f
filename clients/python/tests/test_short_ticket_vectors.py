"""Runs every file of ../../vectors/short-ticket/ (short tickets, spec §7.3;
kinds in vectors/README.md "Short tickets"), or of
$HTTPCRYPT_VECTORS/short-ticket when set, and checks that a deliberately
corrupted copy of a case fails. ``short_ticket_accept`` is the server's
side, run with the package's server side as ``server_request`` is."""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from httpcrypt import outer, server
from httpcrypt.cert import KeyCert
from httpcrypt.errors import HTTPCryptError
from httpcrypt.suite import x25519_public
from httpcrypt.ticket import ShortTicket, TicketKey, parse_ticket_field

from .vector_cases import run_case as run_shared_case

VECTORS = Path(os.environ.get("HTTPCRYPT_VECTORS")
               or Path(__file__).resolve().parents[3] / "vectors") / "short-ticket"
FILES = sorted(VECTORS.glob("*.json"))

H = bytes.fromhex


def test_short_ticket_vectors_present() -> None:
    assert len(FILES) >= 18, f"expected the short-ticket vectors in {VECTORS}"


def _ticket_key(tk: dict[str, Any]) -> TicketKey:
    return TicketKey(H(tk["tid"]), H(tk["key"]))


def k_issue(i: dict[str, Any]) -> dict[str, Any]:
    t = _ticket_key(i["ticket_key"]).issue_short(H(i["kid"]), H(i["h"]))
    assert ShortTicket.from_field(t.to_field()) == t
    assert parse_ticket_field(t.to_field()) == t
    return {"key": t.key.hex(), "field": t.to_field(),
            "cookie": outer.format_cookie(t.tid, t.h, i["name_pad"], i["value_pad"])}


def k_field(i: dict[str, Any]) -> dict[str, Any]:
    t = ShortTicket.from_field(i["field"])
    return {"tid": t.tid.hex(), "h": t.h.hex(), "key": t.key.hex()}


def k_accept(i: dict[str, Any]) -> dict[str, Any]:
    """The server's side: its one kex key, the ticket key (paired with the
    kex key it came with, or with none), the cookie scanned and the short
    ticket opened at ``now``."""
    secret = H(i["server_secret"])
    c = i["cert"]
    cert = KeyCert.sign(H(i["identity_seed"]), c["serial"], c["not_before"], c["not_after"],
                        x25519_public(secret))
    tk = i["ticket_key"]
    keys = server.ServerKeys([(secret, cert)], [(_ticket_key(tk), tk["expires"])])
    if tk["kid"] is not None:
        keys.ticket_kids[H(tk["tid"])] = H(tk["kid"])
    now = i["now"]
    cred = outer.scan_cookies([i["cookie"]], keys.lookup(now))
    assert cred.kind == "short_ticket", f"not a short ticket: {cred!r}"
    kid, k = keys.open_short_ticket(cred.id, cred.value, now)
    return {"kid": kid.hex(), "session_key": k.hex()}


KINDS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "short_ticket_issue": k_issue, "short_ticket_field": k_field,
    "short_ticket_accept": k_accept,
}


def run_case(case: dict[str, Any]) -> None:
    run_shared_case(KINDS, case)


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_short_ticket_vector(path: Path) -> None:
    run_case(json.loads(path.read_text()))


def test_negative_cases_outnumber_positive_ones() -> None:
    expects = [json.loads(p.read_text())["expect"] for p in FILES]
    positive = expects.count("ok")
    assert positive >= 3 and len(expects) - positive > positive


def _flip_hex(text: str) -> str:
    return ("1" if text[0] == "0" else "0") + text[1:]


CORRUPTIONS: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
    ("short-ticket-issue", lambda c: c["output"].update(key=_flip_hex(c["output"]["key"]))),
    ("short-ticket-issue-padded", lambda c: c["input"].update(kid=_flip_hex(c["input"]["kid"]))),
    ("short-ticket-field", lambda c: c["output"].update(h=_flip_hex(c["output"]["h"]))),
    ("short-ticket-field-short", lambda c: c.update(expect="bad_cookie")),
    ("short-ticket-accept", lambda c: c["input"]["ticket_key"].update(
        key=_flip_hex(c["input"]["ticket_key"]["key"]))),
    ("short-ticket-accept-last-second", lambda c: c["input"].update(now=c["input"]["now"] + 1)),
    ("short-ticket-accept-expired", lambda c: c.update(expect="unknown_key")),
    ("short-ticket-accept-no-kid", lambda c: c["input"]["ticket_key"].update(
        kid="444b24ff0f01988ff6ed")),
]


@pytest.mark.parametrize(("name", "corrupt"), CORRUPTIONS, ids=[n for n, _ in CORRUPTIONS])
def test_corrupted_copy_fails(name: str, corrupt: Callable[[dict[str, Any]], None]) -> None:
    """The runner is not vacuous: a changed case fails (a wrong output, a
    positive case that raises, or a negative one with another code or none)."""
    case = json.loads((VECTORS / f"{name}.json").read_text())
    run_case(copy.deepcopy(case))
    corrupt(case)
    with pytest.raises((AssertionError, HTTPCryptError, pytest.fail.Exception)):
        run_case(case)
