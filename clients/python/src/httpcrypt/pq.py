"""The client's suite-2 decisions (spec/hybrid.md H4, H5), without IO or
locks: which keys of a suite-2 answer a client may use, the encapsulation
keys it has learnt (by ``kem_hash``), and when a missing suite 2 is a
downgrade. :class:`~httpcrypt.client.Engine` holds the state and calls
these.

- ``off``: v1 only (the default; nothing here runs).
- ``prefer``: ask ``OPTIONS {mount}/pq`` first and use suite 2 when found,
  else v1. A verified suite-2 certificate pins the origin to suite 2 until
  its ``not_after``: a later discovery offering only suite 1 is
  ``hybrid_downgrade``.
- ``require``: suite 2 or ``hybrid_downgrade``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from .cert import DiscoveredKey
from .errors import ConfigError, ProtocolError
from .hybrid import HybridCert, KemPublic, supported

PqMode = Literal["off", "prefer", "require"]
PQ_MODES: tuple[PqMode, ...] = ("off", "prefer", "require")
# Encapsulation keys remembered per engine; each is 1,184 bytes, and a
# server makes a new one every day or so (spec/hybrid.md H4).
KEM_CACHE_LIMIT = 64


def check_mode(mode: str) -> PqMode:
    """``mode`` if it is one of ``off``, ``prefer``, ``require``, else
    :class:`ConfigError`; also when suite 2 is asked for but the installed
    ``cryptography`` has no ML-KEM-768."""
    for m in PQ_MODES:
        if mode == m:
            if m != "off" and not supported():
                raise ConfigError("pq needs ML-KEM-768, which this build of cryptography "
                                  "lacks (it needs OpenSSL 3.5 or later, or AWS-LC)")
            return m
    raise ConfigError(f"pq must be one of off, prefer, require (not {mode!r})")


def downgrade(authority: str, why: str) -> ProtocolError:
    """``hybrid_downgrade``: suite 2 was required or pinned and discovery offered none."""
    return ProtocolError("hybrid_downgrade",
                         f"{authority} offered no suite-2 key ({why}), but suite 2 is "
                         "required or pinned for it")


class KemCache:
    """Encapsulation keys by ``SHA3-256(ek_M)``. The hash a certificate signs
    is what makes a key trustworthy, so keys from any answer may be kept."""

    def __init__(self, limit: int = KEM_CACHE_LIMIT):
        self._keys: dict[bytes, KemPublic] = {}
        self._limit = limit

    def add(self, kems: Iterable[KemPublic]) -> None:
        """Remembers ``kems`` (the oldest are forgotten past the limit)."""
        for k in kems:
            self._keys.pop(k.hash, None)
            self._keys[k.hash] = k
            while len(self._keys) > self._limit:
                del self._keys[next(iter(self._keys))]

    def get(self, kem_hash: bytes) -> KemPublic | None:
        """The key whose hash is ``kem_hash``, if known."""
        return self._keys.get(kem_hash)


def usable_keys(certs: Iterable[HybridCert], kems: KemCache, now: float,
                identity: bytes | None) -> tuple[list[DiscoveredKey], bool]:
    """The suite-2 keys a client may use among ``certs``: valid at ``now``,
    verifying under ``identity`` (authenticated mode), with a known
    encapsulation key whose hash the certificate signs. Also returns
    whether valid certificates were refused for their signature (then the
    answer is ``bad_signature`` rather than a missing suite 2)."""
    keys = []
    unsigned = False
    for c in certs:
        if not c.is_valid_at(now):
            continue
        if identity is not None:
            try:
                c.verify(identity)
            except ProtocolError:
                unsigned = True
                continue
        kem = kems.get(c.kem_hash)
        if kem is not None:
            keys.append(c.discovered(kem))
    return keys, unsigned and not keys


def pin_until(keys: Iterable[DiscoveredKey], current: int) -> int:
    """The pin after seeing ``keys``: the latest ``not_after`` of a suite-2
    key seen (spec/hybrid.md H5)."""
    return max([current, *(k.not_after for k in keys if k.suite == 2)])


__all__ = ["PQ_MODES", "KemCache", "PqMode", "check_mode", "downgrade", "pin_until",
           "usable_keys"]
