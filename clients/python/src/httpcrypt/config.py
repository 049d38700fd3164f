"""The client's settings (:class:`ClientConfig`), shared by the engine and
every transport."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from . import inner, pq, short
from .stream import DEFAULT_MAX_RECORD

# Record size for request bodies.
DEFAULT_RECORD = 16 * 1024


@dataclass
class ClientConfig:
    """Client settings.

    - ``mount``: the server's mount path.
    - ``identity``: pinned identity key (base64url text or 32 bytes):
      authenticated mode; certificates must verify under it.
    - ``get_form``: use the GET form when the whole request fits the request
      line (the Rust client's default).
    - ``tickets``: present tickets the server issued.
    - ``reuse_key``: one key pair per host (the server's session cache applies).
    - ``clock``: unix time source (tests shift it to provoke ``stale``).
    - ``compact``: use profile 2 (spec §4.5) with keys whose certificate
      announces it (version 2); off: always v1.
    - ``pq``: suite 2, the hybrid X25519 + ML-KEM-768 agreement
      (spec/hybrid.md H5): ``off`` (v1 only), ``prefer`` (suite 2 when the
      server offers it; an origin seen with it is pinned to it), ``require``.
    - ``short_tickets``: ask for short tickets and present them (spec §7.3)
      while ``tickets`` is on; off: v1 tickets only, as before.
      ``short_ticket_reuse`` (R) requests per ticket and
      ``short_ticket_max_age`` (T) seconds after its first use bound how
      long one is presented before the client asks for a new one.
    - ``one_shot``: the client sends one request and keeps nothing (a
      command-line fetch): it presents and asks for no ticket, and a safe
      request declines one (``Ticket: none``, spec §7.3). ``hcfetch``
      without ``--repeat``.
    """

    mount: str = ""
    identity: bytes | str | None = None
    get_form: bool = True
    tickets: bool = True
    reuse_key: bool = False
    record_size: int = DEFAULT_RECORD
    max_record: int = DEFAULT_MAX_RECORD
    max_inner_head: int = inner.DEFAULT_MAX_INNER_HEAD
    max_inner_fields: int = inner.DEFAULT_MAX_INNER_FIELDS
    clock: Callable[[], float] = time.time
    compact: bool = True
    pq: pq.PqMode = "off"
    short_tickets: bool = True
    short_ticket_reuse: int = short.SHORT_TICKET_REUSE
    short_ticket_max_age: float = short.SHORT_TICKET_MAX_AGE
    one_shot: bool = False
