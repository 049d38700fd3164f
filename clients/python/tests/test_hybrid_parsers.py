"""Property and fuzz tests of the suite-2 parsers (spec/hybrid.md H2-H4):
certificates of both suites, ``hck1 `` key texts, lists, the eleven-address
AAAA form and the server's hybrid accept path. Inputs are random but seeded
(the project's other tests use no property-testing library), so a failure
reproduces; each parser must either give a value that encodes back to its
input or fail with one of its documented codes, never anything else."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from typing import Any

import pytest

from httpcrypt import b64, hybrid, outer, server
from httpcrypt.cert import KeyCert
from httpcrypt.errors import HTTPCryptError, ProtocolError
from httpcrypt.exchange import PreparedRequest
from httpcrypt.stream import seal_all
from httpcrypt.suite import ed25519_public, x25519_public

SEED = 0x5EC2
ROUNDS = 300
KEM = hybrid.KemSecret(bytes(range(64)))


def _rng(salt: int) -> random.Random:
    return random.Random(SEED * 1000 + salt)


def _cert(r: random.Random, version: int = 1) -> hybrid.HybridCert:
    return hybrid.HybridCert.sign(r.randbytes(32), r.getrandbits(32), r.getrandbits(32),
                                  r.getrandbits(32), r.randbytes(32), r.randbytes(32), version)


def _mutate(r: random.Random, data: str, alphabet: str) -> str:
    """One random edit: a replaced, dropped or inserted character, or a cut."""
    i = r.randrange(len(data) + 1)
    kind = r.randrange(4)
    if kind == 0 and i < len(data):
        return data[:i] + r.choice(alphabet) + data[i + 1:]
    if kind == 1 and i < len(data):
        return data[:i] + data[i + 1:]
    if kind == 2:
        return data[:i] + r.choice(alphabet) + data[i:]
    return data[:i]


ALPHABET = b64.ALPHABET.decode() + "=+/ \r\n\0é"


def _only_codes(fn: Callable[[], Any], codes: set[str]) -> Any:
    try:
        return fn()
    except HTTPCryptError as e:
        assert e.code in codes, f"unexpected code {e.code!r}"
        return None


def test_certificate_round_trips() -> None:
    r = _rng(1)
    for _ in range(ROUNDS):
        c = _cert(r, r.choice((1, 2)))
        assert len(c.to_text()) == 204
        assert hybrid.HybridCert.decode(c.encode()) == c
        assert hybrid.parse_any_cert(c.to_text()) == c
        addrs = hybrid.encode_aaaa(c)
        r.shuffle(addrs)
        assert hybrid.read_aaaa(addrs) == c


def test_stripping_is_detected() -> None:
    """A suite-2 certificate turned into a suite-1 one never verifies."""
    r = _rng(2)
    for _ in range(20):
        seed = r.randbytes(32)
        c = hybrid.HybridCert.sign(seed, 1, 2, 3, r.randbytes(32), r.randbytes(32))
        b = c.encode()
        v1 = bytearray(b[:46] + b[78:])
        v1[1] = 1
        with pytest.raises(ProtocolError) as err:
            KeyCert.decode(bytes(v1)).verify(ed25519_public(seed))
        assert err.value.code == "bad_signature"


def test_certificate_text_fuzz() -> None:
    r = _rng(3)
    for _ in range(ROUNDS * 3):
        text = _cert(r).to_text() if r.random() < 0.8 else KeyCert.sign(
            r.randbytes(32), 1, 2, 3, r.randbytes(32)).to_text()
        for _ in range(r.randrange(1, 4)):
            text = _mutate(r, text, ALPHABET)
        got = _only_codes(lambda t=text: hybrid.parse_any_cert(t),  # type: ignore[misc]
                          {"bad_certificate", "bad_base64"})
        if got is not None:
            assert got.to_text() == text


def test_key_text_fuzz() -> None:
    r = _rng(4)
    good = KEM.public.to_text()
    assert len(good) == 1584 and hybrid.KemPublic.from_text(good) == KEM.public
    for _ in range(ROUNDS):
        text = good
        for _ in range(r.randrange(1, 3)):
            text = _mutate(r, text, ALPHABET)
        got = _only_codes(lambda t=text: hybrid.KemPublic.from_text(t),  # type: ignore[misc]
                          {"bad_certificate", "bad_base64"})
        if got is not None:
            assert got.to_text() == text
    # Random 1,184 bytes: most fail the modulus check (FIPS 203 §7.2).
    for _ in range(50):
        raw = r.randbytes(hybrid.ENCAPSULATION_KEY_LEN)
        _only_codes(lambda raw=raw: hybrid.KemPublic(raw), {"bad_certificate"})  # type: ignore[misc]


def test_list_fuzz() -> None:
    r = _rng(5)
    c = _cert(r)
    v1 = KeyCert.sign(r.randbytes(32), 1, 2, 3, r.randbytes(32))
    lines = [c.to_text(), v1.to_text(), KEM.public.to_text(), ""]
    for _ in range(ROUNDS):
        chosen = [r.choice(lines) for _ in range(r.randrange(6))]
        body = "".join(line + r.choice(("\n", "\r\n")) for line in chosen)
        lst = hybrid.parse_cert_list(body.encode())
        assert [x.to_text() for x in lst.certs] == [x for x in chosen if x.startswith("hc1 ")]
        assert len(lst.kems) == chosen.count(lines[2])
        bad = _mutate(r, body, ALPHABET)
        _only_codes(lambda b=bad: hybrid.parse_cert_list(b.encode()),  # type: ignore[misc]
                    {"bad_certificate", "bad_base64"})
    assert _only_codes(lambda: hybrid.parse_cert_list(b"\xff\n"), {"bad_certificate"}) is None


def test_aaaa_fuzz() -> None:
    r = _rng(6)
    for _ in range(ROUNDS):
        addrs = hybrid.encode_aaaa(_cert(r))
        k = r.randrange(5)
        if k == 0:
            addrs.pop(r.randrange(len(addrs)))
        elif k == 1:
            addrs.append(r.choice(addrs))
        else:
            i = r.randrange(len(addrs))
            a = bytearray(addrs[i])
            a[r.randrange(16)] ^= 1 << r.randrange(8)
            addrs[i] = bytes(a)
        got = _only_codes(lambda a=addrs: hybrid.read_aaaa(a),  # type: ignore[misc]
                          {"bad_record", "bad_certificate"})
        if got is not None:
            assert sorted(hybrid.encode_aaaa(got)) == sorted(addrs)


def test_hybrid_accept_fuzz() -> None:
    """Mutated hybrid requests: the server side fails with a code, or opens
    a request (a mutation that kept the request intact)."""
    r = _rng(7)
    seed, secret, now = r.randbytes(32), r.randbytes(32), 1_700_000_000
    cert = hybrid.HybridCert.sign(seed, 1, now - 60, now + 3600, x25519_public(secret),
                                  KEM.public.hash)
    keys = server.ServerKeys([], [], [server.HybridKey(secret, KEM, cert)])
    mount = outer.Mount("/hc")
    raws = []
    for form in ("post", "get"):
        p = PreparedRequest.for_hybrid(cert.kex_public, KEM.public, os.urandom(24),
                                       client_secret=os.urandom(32))
        stream = seal_all(p.sealer(), b"GET / HTTP/1.1\r\nHost: h\r\n\r\n", 16384)
        raws.append(p.encode_outer(form, mount, "h", stream))  # type: ignore[arg-type]
    for raw in raws:
        server.serve_bytes(keys, mount, server.Limits(), now, raw)
    for _ in range(ROUNDS):
        raw = bytearray(r.choice(raws))
        end = raw.index(b"\r\n\r\n") + 4
        i = r.randrange(len(raw))
        if r.random() < 0.5:
            raw[i] ^= 1 << r.randrange(8)
        else:
            del raw[max(i, end):]
        try:
            server.serve_bytes(keys, mount, server.Limits(), now, bytes(raw))
        except HTTPCryptError as e:
            assert isinstance(e, ProtocolError), repr(e)
