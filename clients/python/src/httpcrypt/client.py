"""The client's protocol logic, independent of any HTTP library.

:class:`~httpcrypt.exchange.PreparedRequest` is one exchange without IO
(credential, ``k``, cookie, sealing, opening). :class:`Engine` keeps per-host state (keys from
``OPTIONS {mount}/`` or an ``unknown-key`` problem, the client key pair when
reused, the last ticket, short ticket and token, the clock offset) and turns a caller's
request into an outer :class:`Attempt`; the httpx transports and the
requests adapter are thin drivers around it (spec §11.5 retry rules; §14.5:
the admission cookie a server under load issued is echoed, with a solved
puzzle, on fresh-key requests).

Profile 2 (spec §4.5) is used exactly when the chosen key's certificate has
version 2 (and ``ClientConfig.compact`` is on): the send time goes into
``n0``, the target segment is ``2{b64u(n0)}``, record 0 binds the outer
Host, the inner request carries neither Host nor Date, pads are 0-7
characters, and the response is ``r || stream`` labelled ``hc2-rsp``.

Suite 2 (spec/hybrid.md) is used as ``ClientConfig.pq`` says (``httpcrypt.pq``
holds the rules): discovery asks ``OPTIONS {mount}/pq`` first, a key with an
encapsulation key makes the request hybrid (X-Wing's combiner, ``ct_M``
before the stream), and a pinned origin refuses to fall back to suite 1.

Short tickets (spec §7.3) are asked for and presented as
``ClientConfig.short_tickets`` says (``httpcrypt.short`` holds the policy);
a held short ticket goes before a v1 one. Off, the client takes v1 tickets
exactly as before (spec §7.2, D29)."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import AsyncIterable, Iterable

from . import admission, b64, inner, outer, pq, short
from .attempt import Attempt, ExchangeInfo, HostState
from .cert import CERTS_TYPE, DiscoveredKey, KeyCert, choose, choose_key, parse_cert_list
from .config import ClientConfig
from .date import format_date, parse_date
from .errors import (
    ADMISSION,
    BAD_SIGNATURE,
    BUSY,
    MALFORMED,
    STALE,
    TOKEN_REQUIRED,
    UNKNOWN_KEY,
    ConfigError,
    EndpointError,
    HTTPCryptError,
    InnerProblem,
    ProtocolError,
    RefusedError,
    inner_problem,
)
from .exchange import PreparedRequest, ResponseReader, aseal_chunks, seal_chunks_exact
from .hybrid import parse_cert_lines
from .hybrid import parse_cert_list as parse_any_list
from .inner import RequestHead, ResponseHead
from .outer import Mount
from .short import HeldShort, ShortPolicy
from .stream import (
    RECORD_OVERHEAD,
    seal_all,
)
from .suite import NONCE_LEN, KexKey
from .ticket import ASK_SHORT, DECLINE, TICKET_FIELD, ShortTicket, parse_ticket_field
from .token import CLIENT_RANDOM_FIELD, RANDOM_FIELD

PROBLEM_LIMIT = 64 * 1024
CERTS_LIMIT = 64 * 1024
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
# Caller fields never copied into the inner request (the stream frames it).
_SKIP_FIELDS = inner.FORBIDDEN | {"content-length", "te", "trailer", "proxy-connection"}
# How long an admission cookie is echoed after the server issued it (spec
# §14.5: the server accepts it for at least one 30 s cookie period).
ADMIT_REUSE = 25.0


def _max_age(cache_control: str | None) -> int:
    if not cache_control:
        return 0
    m = re.search(r"(?:^|,)\s*max-age=(\d+)\s*(?:,|$)", cache_control)
    # max-age=0 means "ask again soon", not "keep forever" (no max-age).
    return max(int(m.group(1)), 1) if m else 0


def _identity_bytes(identity: bytes | str | None) -> bytes | None:
    if identity is None:
        return None
    if isinstance(identity, str):
        return b64.decode_exact(identity.strip(), 32)
    if len(identity) != 32:
        raise ConfigError("identity must be 32 bytes")
    return bytes(identity)


class Engine:
    """Per-host client state and the protocol decisions of spec §11.5.
    Thread-safe; one engine may serve several transports."""

    def __init__(self, config: ClientConfig | None = None, **kwargs: object):
        if config is None:
            config = ClientConfig(**kwargs)  # type: ignore[arg-type]
        elif kwargs:
            raise ConfigError("pass either a ClientConfig or keyword settings")
        self.config = config
        self.mount = Mount(config.mount)
        self.identity = _identity_bytes(config.identity)
        self.pq = pq.check_mode(config.pq)
        self.short_policy: ShortPolicy | None = (
            ShortPolicy(config.short_ticket_reuse, config.short_ticket_max_age)
            if config.tickets and config.short_tickets and not config.one_shot else None)
        self._lock = threading.Lock()
        self._hosts: dict[str, HostState] = {}
        self._kems = pq.KemCache()

    def _host(self, authority: str) -> HostState:
        h = self._hosts.get(authority)
        if h is None:
            h = self._hosts[authority] = HostState()
        return h

    def now(self) -> float:
        """The client's clock."""
        return self.config.clock()

    # ---- keys ----

    def cached_key(self, authority: str) -> DiscoveredKey | None:
        """The key to use if the cached certificates are fresh and one is valid."""
        now = self.now()
        with self._lock:
            h = self._host(authority)
            if h.max_age and now >= h.fetched + h.max_age:
                return None
            try:
                return choose_key(h.keys, now)
            except ProtocolError:
                return None

    def options_url(self, scheme: str, authority: str) -> str:
        """``{scheme}://{authority}{mount}/``."""
        return f"{scheme}://{authority}{self.mount.options_path()}"

    def discovery_url(self, scheme: str, authority: str) -> str:
        """Where to ask for keys next: ``{mount}/pq`` while suite 2 is wanted
        and not found missing in this discovery, else ``{mount}/``."""
        if self.pq != "off":
            with self._lock:
                skip = self._host(authority).skip_pq
            if not skip:
                return f"{scheme}://{authority}{self.mount.pq_path()}"
        return self.options_url(scheme, authority)

    def take_certs(self, authority: str, url: str, status: int, cache_control: str | None,
                   body: bytes, content_type: str | None = None) -> DiscoveredKey | None:
        """Takes the answer to ``OPTIONS url`` (a :meth:`discovery_url`):
        the key to use, or None when the server offers no suite 2 and the
        next discovery asks ``{mount}/`` (``prefer``)."""
        if url.endswith(self.mount.pq_path()) and self.pq != "off":
            return self.store_pq_certs(authority, status, cache_control, body, content_type)
        return self.store_certs(authority, status, cache_control, body, content_type)

    def _pinned(self, h: HostState) -> bool:
        return self.pq == "require" or (self.pq == "prefer" and self.now() <= h.pin_until)

    def store_pq_certs(self, authority: str, status: int, cache_control: str | None,
                       body: bytes, content_type: str | None = None) -> DiscoveredKey | None:
        """Takes an ``OPTIONS {mount}/pq`` answer (spec/hybrid.md H4): the
        suite-2 key to use, caching the answer and pinning the origin; None
        when there is none and ``prefer`` may fall back to v1;
        ``hybrid_downgrade`` when suite 2 is required or pinned."""
        with self._lock:
            pinned = self._pinned(self._host(authority))
        keys: list[DiscoveredKey] = []
        why = f"OPTIONS {self.mount.pq_path()} answered {status}"
        if status == 200:
            try:
                lst = parse_any_list(body)
            except ProtocolError:
                media = (content_type or "").split(";")[0].strip().lower()
                if media != CERTS_TYPE:
                    raise EndpointError(authority, self.mount.path, status) from None
                raise
            self._kems.add(lst.kems)
            now = self.now()
            keys, unsigned = pq.usable_keys(lst.hybrid, self._kems, now, self.identity)
            if unsigned:
                raise ProtocolError("bad_signature", BAD_SIGNATURE)
            why = "no usable suite-2 certificate"
        with self._lock:
            h = self._host(authority)
            if not keys:
                if pinned:
                    raise pq.downgrade(authority, why)
                h.skip_pq = True
                return None
            now = self.now()
            h.keys, h.fetched, h.max_age = keys, now, _max_age(cache_control)
            h.pin_until = pq.pin_until(keys, h.pin_until)
            h.skip_pq = False
            if h.ticket_suite != 2:
                h.ticket = None  # a classical session is not resumed once suite 2 is found
            if h.short is not None and h.short.suite != 2:
                h.short = None
        return choose_key(keys, now)

    def store_certs(self, authority: str, status: int, cache_control: str | None,
                    body: bytes, content_type: str | None = None) -> DiscoveredKey:
        """Takes an OPTIONS answer: checks it in authenticated mode, caches
        it for ``max-age`` and returns the key to use. An answer without a
        certificate list is :class:`EndpointError` (``no_endpoint`` for 404,
        ``not_httpcrypt`` otherwise)."""
        if status != 200:
            raise EndpointError(authority, self.mount.path, status)
        with self._lock:
            pinned = self.pq != "off" and self._pinned(self._host(authority))
        if pinned:
            raise pq.downgrade(authority, f"OPTIONS {self.mount.options_path()}")
        try:
            certs = parse_cert_list(body)
        except ProtocolError:
            media = (content_type or "").split(";")[0].strip().lower()
            if media != CERTS_TYPE:
                raise EndpointError(authority, self.mount.path, status) from None
            raise
        now = self.now()
        try:
            choose(certs, now, self.identity)  # bad_signature / not_valid
        except ProtocolError as e:
            if e.code == "bad_signature":
                raise ProtocolError("bad_signature", BAD_SIGNATURE) from None
            raise
        if self.identity is not None:
            certs = [c for c in certs if _verifies(c, self.identity)]
        keys = [c.discovered() for c in certs]
        with self._lock:
            h = self._host(authority)
            h.keys, h.fetched, h.max_age = keys, now, _max_age(cache_control)
            h.skip_pq = False  # the next discovery looks for suite 2 again
        return choose_key(keys, now)

    # ---- admission (spec §14.5) ----

    def _admit_cookie(self, h: HostState) -> bytes | None:
        if h.admit is None:
            return None
        cookie, at = h.admit
        if not at <= self.now() < at + ADMIT_REUSE:
            h.admit = None
            return None
        return cookie

    def admission_cookie(self, authority: str) -> bytes | None:
        """The admission cookie echoed on fresh-key requests to ``authority``
        (received less than 25 s ago), if any."""
        with self._lock:
            return self._admit_cookie(self._host(authority))

    def needs_puzzle(self, authority: str) -> bool:
        """Whether the next :meth:`build` for ``authority`` may solve a puzzle
        (the async transport then builds off the event loop)."""
        c = self.admission_cookie(authority)
        return c is not None and admission.cookie_difficulty(c) > 0

    # ---- requests ----

    def build(self, scheme: str, authority: str, server_key: DiscoveredKey, method: str,
              target: str, headers: Iterable[tuple[str, str]], body: bytes | None,
              body_stream: Iterable[bytes] | AsyncIterable[bytes] | None = None,
              body_len: int | None = None, own_date: bool = False) -> Attempt:
        """Seals (or prepares to seal) one request. ``body`` is the whole
        body, or None with ``body_stream`` (``body_len`` if known)."""
        if scheme != "http":
            raise ConfigError(f"HTTPCrypt runs over plain http, not {scheme}")
        cfg = self.config
        policy = self.short_policy
        clock = self.now()
        with self._lock:
            h = self._host(authority)
            # A short ticket first (spec §7.3), counted as used; then a v1 one.
            held = h.short if policy is not None else None
            ask = policy is not None and short.asks(held, policy, clock)
            if held is not None:
                held.use.used(clock)
                if ask:
                    held.use.asked(clock)
            short_ticket = held.ticket if held is not None else None
            ticket = h.ticket if cfg.tickets and not cfg.one_shot and held is None else None
            if held is not None:
                suite = held.suite
            else:
                suite = h.ticket_suite if ticket is not None else server_key.suite
            if cfg.reuse_key and h.secret is None:
                h.secret = KexKey()
            secret = h.secret
            offset = h.clock_offset
            token = h.token
            # Tickets never meet the defence: only fresh-key requests echo.
            resumed = ticket is not None or held is not None
            admit_cookie = self._admit_cookie(h) if not resumed else None
        # Profile 2 exactly when the chosen key announces it (spec §4.5).
        compact = cfg.compact and server_key.version == 2
        now = int(clock) + offset  # the clock corrected after a `stale` answer
        if compact:
            n0 = outer.compact_nonce(now)
            host: str | None = authority
            max_pad = outer.MAX_PAD2
        else:
            n0 = os.urandom(NONCE_LEN)
            host = None
            max_pad = outer.MAX_PAD
        pads = outer.random_pad(max_pad), outer.random_pad(max_pad)
        if short_ticket is not None:
            # A hybrid session's short ticket is presented as a hybrid ticket
            # request: no ciphertext, the tid it was issued under.
            prepared = PreparedRequest.for_key(server_key.kex_public, n0, *pads,
                                               short_ticket=short_ticket, host=host)
        elif ticket is not None:
            prepared = PreparedRequest.for_key(server_key.kex_public, n0, *pads,
                                               ticket=ticket[0], ticket_key=ticket[1], host=host)
        elif server_key.kem is not None:
            # spec/hybrid.md H3: a fresh X25519 key per request (ct_X).
            prepared = PreparedRequest.for_hybrid(server_key.kex_public, server_key.kem, n0,
                                                  *pads, client_secret=KexKey(), host=host)
        else:
            prepared = PreparedRequest.for_key(server_key.kex_public, n0, *pads,
                                               client_secret=secret or KexKey(), host=host)
        if body is not None:
            body_len = len(body)
        # Inner head: the caller's fields, Host, a (corrected) Date, framing.
        # Profile 2 sends neither Host (the outer one is bound) nor Date (the
        # time is in n0); a caller's Host that differs from the outer one stays.
        head = RequestHead(method, target or "/")
        has_host = has_date = False
        for name, value in headers:
            lname = name.lower()
            if lname in _SKIP_FIELDS or (own_date and lname == "date" and not compact):
                continue
            if compact and lname == "host" and value.strip().lower() == authority.lower():
                continue
            has_host |= lname == "host"
            has_date |= lname == "date"
            head.fields.append((name, value))
        if not has_host and not compact:
            head.fields.insert(0, ("Host", authority))
        if not has_date and not compact:
            head.fields.append(("Date", format_date(now)))
        if body_len is not None and (body_len > 0 or method in ("POST", "PUT")):
            head.fields.append(("Content-Length", str(body_len)))
        if ask:
            head.fields.append((TICKET_FIELD, ASK_SHORT))
        elif cfg.one_shot and method.upper() in SAFE_METHODS:
            # An unsafe request's token-required retry presents the ticket
            # that came with the refusal (spec §8.4), so it does not decline.
            head.fields.append((TICKET_FIELD, DECLINE))
        if method.upper() not in SAFE_METHODS:
            if token is not None and token[1] == prepared.session_key:
                head.fields.append((RANDOM_FIELD, token[0]))
            head.fields.append((CLIENT_RANDOM_FIELD, b64.encode(os.urandom(24))))
        head_bytes = head.format()
        cookie = prepared.cookie
        difficulty = None
        if admit_cookie is not None:
            # A new solution for this request's own n0 (bad_admission above 24).
            cookie += "; " + admission.echo_pair(admit_cookie, n0)
            difficulty = admission.cookie_difficulty(admit_cookie)
        out_headers = [("Host", authority), ("Cookie", cookie)]
        base = f"{scheme}://{authority}"
        ct_m = prepared.ct_m  # a fresh hybrid request's ML-KEM ciphertext leads
        if (cfg.get_form and body is not None
                and outer.fits_get_form(self.mount,
                                        len(ct_m) + len(head_bytes) + len(body) + 64,
                                        prepared.profile)):
            plain = head_bytes + body
            stream = seal_all(prepared.sealer(), plain, max(len(plain), 1))
            return Attempt(scheme, authority, prepared, "GET",
                           base + prepared.get_target(self.mount, stream), out_headers, None,
                           None, method, difficulty, suite)
        out_headers += [("Content-Type", outer.OCTET_STREAM)]
        rs = max(cfg.record_size, 1)
        sealed: bytes | Iterable[bytes] | AsyncIterable[bytes]
        if body is not None:
            sealed = ct_m + seal_all(prepared.sealer(), head_bytes + body, rs)
            length: int | None = len(sealed)
        else:
            assert body_stream is not None
            if isinstance(body_stream, AsyncIterable):
                sealed = aseal_chunks(prepared.sealer(), body_stream, rs, head_bytes, ct_m)
            else:
                sealed = seal_chunks_exact(prepared.sealer(), body_stream, rs, head_bytes, ct_m)
            length = None
            if body_len is not None:
                plain_len = len(head_bytes) + body_len
                length = len(ct_m) + plain_len + max(1, -(-plain_len // rs)) * RECORD_OVERHEAD
        if length is not None:
            out_headers.append(("Content-Length", str(length)))
        return Attempt(scheme, authority, prepared, "POST", base + prepared.nonce_path(self.mount),
                       out_headers, sealed, length, method, difficulty, suite)

    def refused(self, attempt: Attempt, status: int, body: bytes) -> RefusedError:
        """A non-200 outer answer. For ``unknown-key`` takes the problem's
        certificates and returns the error (retry once, else raise it). For
        a 429 ``admission`` challenge stores the cookie for the host and
        returns the error (``admission_required``; a difficulty above 24
        raises ``bad_admission``); for a 429 ``busy`` returns the error with
        its ``retry_after``. A 400 ``malformed`` answer to a request that
        presented a short ticket says its ticket key is gone (spec §7.3: the
        server's ``no_cookie``): the ticket is dropped and the error, code
        ``no_cookie``, returned (retry once with a key). Raises for every
        other answer."""
        problem = outer.parse_problem(body)
        if (attempt.prepared.credential == "short_ticket" and status == 400
                and problem is not None and problem.type == MALFORMED):
            with self._lock:
                h = self._host(attempt.authority)
                # Its ticket key is gone, and with it every ticket under its tid.
                tid = b64.encode(h.short.ticket.tid) if h.short is not None else None
                if tid is not None and attempt.prepared.cookie.startswith(tid):
                    h.short = None
            err = RefusedError(status, MALFORMED)
            err.code = "no_cookie"
            return err
        if status == 429 and problem is not None and problem.type in (ADMISSION, BUSY):
            refusal = admission.parse_refusal(body)
            if isinstance(refusal, admission.Challenge):
                if refusal.difficulty > admission.MAX_DIFFICULTY:
                    raise ProtocolError(
                        "bad_admission",
                        f"admission puzzle of difficulty {refusal.difficulty} "
                        f"(above {admission.MAX_DIFFICULTY})")
                with self._lock:
                    self._host(attempt.authority).admit = (refusal.cookie, self.now())
                return RefusedError(status, ADMISSION)
            if isinstance(refusal, admission.Busy):
                return RefusedError(status, BUSY, refusal.retry_after)
        if problem is None or problem.type != UNKNOWN_KEY:
            raise RefusedError(status, problem.type if problem else None)
        if self.pq != "off" and self._hybrid_refused(attempt, problem.hybrid_certs):
            return RefusedError(status, UNKNOWN_KEY)
        certs = []
        for line in problem.certs:
            try:
                certs.append(KeyCert.from_text(line))
            except ProtocolError:
                continue
        if self.identity is not None:
            certs = [c for c in certs if _verifies(c, self.identity)]
        now = self.now()
        try:
            choose_key(certs, now)
            usable = True
        except ProtocolError:
            usable = False
        with self._lock:
            h = self._host(attempt.authority)
            h.ticket = None
            h.short = None
            if usable:
                h.keys = [c.discovered() for c in certs]
                h.fetched = now
            else:
                h.keys = []  # the retry fetches OPTIONS again
        return RefusedError(status, UNKNOWN_KEY)

    def _hybrid_refused(self, attempt: Attempt, lines: list[str]) -> bool:
        """An ``unknown-key`` problem's suite-2 certificates (``hybrid_certs``,
        spec/hybrid.md H3): True when they settle the retry (usable keys
        taken, or none while suite 2 is required or pinned: the retry then
        discovers again); False to take the v1 ``certs`` instead."""
        certs = []
        for line in lines:  # each on its own, as the v1 certs are
            try:
                one = parse_cert_lines([line])
            except ProtocolError:
                continue
            self._kems.add(one.kems)  # key texts, should a server add them
            certs += one.hybrid
        now = self.now()
        keys, _ = pq.usable_keys(certs, self._kems, now, self.identity)
        with self._lock:
            h = self._host(attempt.authority)
            if not keys and not self._pinned(h):
                return False
            h.ticket = None
            h.short = None
            h.keys, h.fetched = keys, now
            h.pin_until = pq.pin_until(keys, h.pin_until)
        return True

    def reader(self, attempt: Attempt) -> ResponseReader:
        """A reader for the 200 outer response of ``attempt``."""
        cfg = self.config
        return ResponseReader(attempt.prepared, cfg.max_record, cfg.max_inner_head,
                              cfg.max_inner_fields, attempt.inner_method)

    def took_head(self, attempt: Attempt, head: ResponseHead) -> None:
        """Keeps the ticket (v1 or short, told apart by its length) and the
        token an authenticated inner head carries. A token that comes with a
        short ticket is bound to the ticket's key ``k'`` (spec §7.3, §8.4):
        the next request presents that ticket; any other token is bound to
        the key of the request it answers."""
        t = inner.field_value(head.fields, TICKET_FIELD)
        r = inner.field_value(head.fields, RANDOM_FIELD)
        k = attempt.prepared.session_key
        token_key = k
        with self._lock:
            h = self._host(attempt.authority)
            if t is not None:
                try:
                    ticket = parse_ticket_field(t.strip())
                except ProtocolError:
                    pass
                else:
                    if isinstance(ticket, ShortTicket):
                        # A new short ticket starts its count afresh.
                        h.short = HeldShort(ticket, attempt.suite)
                        token_key = ticket.key
                    else:
                        h.ticket = (ticket, k)
                        h.ticket_suite = attempt.suite
            if r is not None:
                h.token = (r.strip(), token_key)

    def is_problem(self, head: ResponseHead) -> bool:
        """Whether an inner head may be a protocol problem (then its small
        body must be read to tell)."""
        ctype = inner.field_value(head.fields, "content-type") or ""
        return ctype.split(";")[0].strip().lower() == outer.PROBLEM_TYPE

    def judge_problem(self, attempt: Attempt, head: ResponseHead,
                      body: bytes) -> InnerProblem | None:
        """For an inner problem document: returns the ``stale`` (clock
        corrected) or ``token-required`` problem, which may be retried once;
        raises :class:`InnerProblem` for other protocol problems; None for
        an application's own problem document."""
        p = outer.parse_problem(body)
        if p is None or not p.type.startswith("urn:httpcrypt:"):
            return None
        if p.type == STALE:
            date = inner.field_value(head.fields, "date")
            if date is not None:
                try:
                    server = parse_date(date)
                except ProtocolError:
                    pass
                else:
                    with self._lock:
                        self._host(attempt.authority).clock_offset = server - int(self.now())
        problem = inner_problem(p.type, head.status, p.title)
        if p.type in (STALE, TOKEN_REQUIRED):
            return problem
        raise problem


def _verifies(cert: KeyCert, identity: bytes) -> bool:
    try:
        cert.verify(identity)
    except ProtocolError:
        return False
    return True


__all__ = [
    "Attempt", "ClientConfig", "Engine", "ExchangeInfo", "HTTPCryptError", "InnerProblem",
    "PreparedRequest", "ResponseReader", "seal_chunks_exact",
]
