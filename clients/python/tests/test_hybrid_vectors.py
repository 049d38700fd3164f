"""Runs every file of ../../vectors/hybrid/ (suite 2, spec/hybrid.md; kinds
in vectors/README.md), or of $HTTPCRYPT_VECTORS/hybrid when set, and checks
that a deliberately corrupted copy of a case fails.

``cryptography``'s ML-KEM draws its encapsulation randomness itself, so the
client side takes ``ct_m``/``ss_m`` from ``encapsulation`` as given (as
vectors/README.md allows) and checks them by decapsulating with the server's
key; the X-Wing cases check key expansion and decapsulation."""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from httpcrypt import hybrid, inner, outer, server
from httpcrypt.client import PreparedRequest
from httpcrypt.errors import ProtocolError
from httpcrypt.stream import seal_all
from httpcrypt.suite import ed25519_public, x25519_public
from httpcrypt.ticket import Ticket, TicketKey

from .vector_cases import run_case as run_shared_case

VECTORS = Path(os.environ.get("HTTPCRYPT_VECTORS")
               or Path(__file__).resolve().parents[3] / "vectors") / "hybrid"
FILES = sorted(VECTORS.glob("*.json"))

H = bytes.fromhex


def test_hybrid_vectors_present() -> None:
    assert len(FILES) >= 40, f"expected the suite-2 vectors in {VECTORS}"


def k_xwing(i: dict[str, Any]) -> dict[str, Any]:
    kem, x_secret = hybrid.xwing_expand_seed(H(i["seed"]))
    pk_x = x25519_public(x_secret)
    return {"pk": (kem.public.raw + pk_x).hex()}


def xwing_ss(i: dict[str, Any], ct: bytes) -> bytes:
    kem, x_secret = hybrid.xwing_expand_seed(H(i["seed"]))
    return hybrid.decapsulate(x_secret, kem, ct[hybrid.CIPHERTEXT_LEN:],
                              ct[:hybrid.CIPHERTEXT_LEN])


def k_hybrid_cert(i: dict[str, Any]) -> dict[str, Any]:
    seed = H(i["identity_seed"])
    kem = hybrid.KemSecret(H(i["kem_seed"])).public
    c = hybrid.HybridCert.sign(seed, i["serial"], i["not_before"], i["not_after"],
                               H(i["kex_public"]), kem.hash, i["version"])
    c.verify(ed25519_public(seed))
    assert hybrid.HybridCert.from_text(c.to_text()) == c
    assert hybrid.read_aaaa(hybrid.encode_aaaa(c)) == c
    assert hybrid.KemPublic.from_text(kem.to_text()) == kem
    return {"cert": c.encode().hex(), "text": c.to_text(), "kid": c.kid.hex(),
            "kem_hash": kem.hash.hex(), "kem_text": kem.to_text(),
            "aaaa": [a.hex() for a in hybrid.encode_aaaa(c)]}


def k_hybrid_cert_verify(i: dict[str, Any]) -> dict[str, Any]:
    c = hybrid.parse_any_cert(i["text"])
    c.verify(H(i["identity_public"]))
    if not isinstance(c, hybrid.HybridCert):
        raise ProtocolError("bad_certificate", "a suite-1 certificate")
    if "kem_text" in i:
        hybrid.KemPublic.from_text(i["kem_text"]).check(c)
    return {"version": c.version, "serial": c.serial, "not_before": c.not_before,
            "not_after": c.not_after, "kex_public": c.kex_public.hex(),
            "kem_hash": c.kem_hash.hex(), "kid": c.kid.hex()}


def k_hybrid_aaaa(i: dict[str, Any]) -> dict[str, Any]:
    return {"cert": hybrid.read_aaaa([H(a) for a in i["addrs"]]).encode().hex()}


def k_hybrid_cert_list(i: dict[str, Any]) -> dict[str, Any]:
    lst = hybrid.parse_cert_list(i["body"].encode())
    return {"certs": [{"suite": 2 if isinstance(c, hybrid.HybridCert) else 1,
                       "kid": c.kid.hex()} for c in lst.certs],
            "kem_hashes": [k.hash.hex() for k in lst.kems]}


def _server(i: dict[str, Any]) -> tuple[server.ServerKeys, hybrid.HybridCert, hybrid.KemSecret]:
    """The case's server: only the suite-2 key (and the ticket key)."""
    seed, secret = H(i["identity_seed"]), H(i["server_secret"])
    kem = hybrid.KemSecret(H(i["kem_seed"]))
    c = i["cert"]
    cert = hybrid.HybridCert.sign(seed, c["serial"], c["not_before"], c["not_after"],
                                  x25519_public(secret), kem.public.hash, c.get("version", 1))
    tk = i["ticket_key"]
    keys = server.ServerKeys([], [(TicketKey(H(tk["tid"]), H(tk["key"])), tk["expires"])],
                             [server.HybridKey(secret, kem, cert)])
    return keys, cert, kem


def k_hybrid_exchange(i: dict[str, Any]) -> dict[str, Any]:
    keys, cert, kem = _server(i)
    n0 = H(i["n0"])
    if "client_secret" in i:
        e = i["encapsulation"]
        ct_m, ss_m = H(e["ct_m"]), H(e["ss_m"])
        # No deterministic encapsulation here: check the given pair by decapsulating.
        assert kem.decapsulate(ct_m) == ss_m
        prep = PreparedRequest.for_hybrid(cert.kex_public, kem.public, n0, i["name_pad"],
                                          i["value_pad"], client_secret=H(i["client_secret"]),
                                          encapsulation=(ct_m, ss_m))
    else:
        prep = PreparedRequest.for_key(cert.kex_public, n0, i["name_pad"], i["value_pad"],
                                       ticket=Ticket(H(i["ticket"])),
                                       ticket_key=H(i["ticket_session_key"]))
    inner_req = H(i["inner_request"])
    stream = seal_all(prep.sealer(), inner_req, i["record_size"])
    mount = outer.Mount(i["mount"])
    outer_req = prep.encode_outer(i["form"], mount, i["host"], stream)
    acc, head, body = server.serve_bytes(keys, mount, server.Limits(), i["now"], outer_req)
    assert head.format() + body == inner_req
    assert acc.session_key == prep.session_key
    if "ticket" in i:
        assert TicketKey(H(i["ticket_key"]["tid"]), H(i["ticket_key"]["key"])).open(
            Ticket(H(i["ticket"])).sealed, i["now"]).kid == cert.kid
    rsp_head, rsp_body = inner.decode_response(H(i["inner_response"]))
    response = server.seal_response(acc, H(i["response_n0"]), rsp_head, rsp_body, i["now"],
                                    i["response_record_size"])
    h2, b2 = prep.open_response(response)
    assert h2.format() + b2 == H(i["inner_response"])
    return {"cert_text": cert.to_text(), "kem_text": kem.public.to_text(),
            "kid": cert.kid.hex(), "session_key": prep.session_key.hex(),
            "cookie": prep.cookie, "outer_request": outer_req.hex(),
            "response_body": response.hex()}


def k_hybrid_server_request(i: dict[str, Any]) -> dict[str, Any]:
    keys, _, _ = _server(i)
    _, head, body = server.serve_bytes(keys, outer.Mount(i["mount"]), server.Limits(),
                                       i["now"], H(i["outer_request"]))
    return {"method": head.method, "target": head.target, "body": body.hex()}


KINDS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "xwing": k_xwing, "hybrid_cert": k_hybrid_cert, "hybrid_cert_verify": k_hybrid_cert_verify,
    "hybrid_aaaa": k_hybrid_aaaa, "hybrid_cert_list": k_hybrid_cert_list,
    "hybrid_exchange": k_hybrid_exchange, "hybrid_server_request": k_hybrid_server_request,
}


def _want(case: dict[str, Any]) -> dict[str, Any]:
    want: dict[str, Any] = case["output"]
    if case["kind"] == "xwing":
        # Decapsulation must give ss; pk is compared by the runner.
        assert xwing_ss(case["input"], H(want["ct"])).hex() == want["ss"], f"{case['name']}: ss"
        want = {"pk": want["pk"]}
    return want


def run_case(case: dict[str, Any]) -> None:
    run_shared_case(KINDS, case, _want)


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_hybrid_vector(path: Path) -> None:
    run_case(json.loads(path.read_text()))


def _flip_hex(text: str) -> str:
    return ("1" if text[0] == "0" else "0") + text[1:]


CORRUPTIONS: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
    ("hybrid-exchange-post", lambda c: c["output"].update(
        session_key=_flip_hex(c["output"]["session_key"]))),
    ("hybrid-exchange-get", lambda c: c["input"]["encapsulation"].update(
        ss_m=_flip_hex(c["input"]["encapsulation"]["ss_m"]))),
    ("hybrid-cert-sign-0", lambda c: c["output"].update(kid=_flip_hex(c["output"]["kid"]))),
    ("hybrid-refuse-short-ciphertext", lambda c: c.update(expect="integrity")),
    ("hybrid-cert-kem-mismatch", lambda c: c.update(expect="bad_certificate")),
    ("xwing-kat-0", lambda c: c["output"].update(ss=_flip_hex(c["output"]["ss"]))),
    ("hybrid-cert-list-both-suites", lambda c: c["output"].update(
        kem_hashes=[_flip_hex(h) for h in c["output"]["kem_hashes"]])),
]


@pytest.mark.parametrize(("name", "corrupt"), CORRUPTIONS, ids=[n for n, _ in CORRUPTIONS])
def test_corrupted_copy_fails(name: str, corrupt: Callable[[dict[str, Any]], None]) -> None:
    """The runner is not vacuous: a changed expectation makes the case fail."""
    case = json.loads((VECTORS / f"{name}.json").read_text())
    run_case(copy.deepcopy(case))
    corrupt(case)
    with pytest.raises((AssertionError, pytest.fail.Exception)):
        run_case(case)
