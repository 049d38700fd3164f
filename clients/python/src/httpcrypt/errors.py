"""The exception hierarchy (spec §4.4, §12).

Every exception carries ``code``: the snake_case error code of spec §12, the
same strings the Rust core and the shared vectors use. Problems a server
reported carry ``problem_type`` (the RFC 9457 ``type`` URN) and ``status``.

- :class:`ProtocolError`: a local check failed (parsing, verification).
  :class:`IntegrityError` is the subclass for failed or truncated sealed
  streams; such bytes are never handed to the caller.
- :class:`InnerProblem`: the server reported a protocol problem inside the
  sealed response, so it is authenticated (stale, replay, integrity, ...).
- :class:`RefusedError`: the outer response was not 200. It is plaintext and
  unauthenticated: an on-path attacker can forge it.
- :class:`ConfigError`: the client was configured or called wrongly.
- :class:`TransportError`: no answer at all (``connect_failed``, ``timeout``)
  and :class:`EndpointError`: the host answered, but not as an HTTPCrypt
  endpoint (``not_httpcrypt``, ``no_endpoint``); their messages are the
  client diagnoses of spec §12, worded as in every client.
"""

from __future__ import annotations

import os
import re

# Problem type URNs (spec §4.4).
MALFORMED = "urn:httpcrypt:malformed"
UNKNOWN_KEY = "urn:httpcrypt:unknown-key"
TOO_LARGE = "urn:httpcrypt:too-large"
INTEGRITY = "urn:httpcrypt:integrity"
STALE = "urn:httpcrypt:stale"
REPLAY = "urn:httpcrypt:replay"
TOKEN_REQUIRED = "urn:httpcrypt:token-required"
OVERLOADED = "urn:httpcrypt:overloaded"
# Outer 429 answers of the load-aware defence (spec §14.4).
ADMISSION = "urn:httpcrypt:admission"
BUSY = "urn:httpcrypt:busy"
# Outer 400 of a server that takes hybrid requests only (spec/hybrid.md H6).
HYBRID_REQUIRED = "urn:httpcrypt:hybrid-required"

_INTEGRITY_CODES = frozenset(
    {"integrity", "clear_in_request", "truncated", "trailing_data", "too_many_records"}
)

# Where the fine-grained code does not travel, the code a client reports for
# an inner problem type (spec §4.4: the type decides, not the title).
_INNER_CODES = {
    INTEGRITY: "integrity",
    MALFORMED: "malformed_inner",
    TOO_LARGE: "record_too_large",
    STALE: "stale",
    REPLAY: "replay",
    TOKEN_REQUIRED: "token_required",
    OVERLOADED: "overloaded",
}
_OUTER_CODES = {UNKNOWN_KEY: "unknown_key", TOO_LARGE: "body_too_large",
                ADMISSION: "admission_required", BUSY: "busy",
                HYBRID_REQUIRED: "hybrid_required"}


class HTTPCryptError(Exception):
    """Base class: ``code`` is the spec §12 code (or a client-side one)."""

    code: str
    problem_type: str | None

    def __init__(self, code: str, message: str | None = None, problem_type: str | None = None):
        super().__init__(message or code)
        self.code = code
        self.problem_type = problem_type


class ProtocolError(HTTPCryptError):
    """A local protocol check failed; ``code`` says which (spec §12)."""

    def __init__(self, code: str, message: str | None = None):
        super().__init__(code, message)


class IntegrityError(ProtocolError):
    """A sealed stream failed to verify, was truncated or had trailing bytes."""


def protocol_error(code: str, message: str | None = None) -> ProtocolError:
    """The right ProtocolError subclass for ``code``."""
    if code in _INTEGRITY_CODES:
        return IntegrityError(code, message)
    return ProtocolError(code, message)


class InnerProblem(HTTPCryptError):
    """A protocol problem the server reported inside the sealed response
    (authenticated). ``status`` is the inner status."""

    status: int
    title: str

    def __init__(self, problem_type: str, status: int, title: str = ""):
        code = _INNER_CODES.get(problem_type, "inner_problem")
        super().__init__(code, f"server reported {status} {problem_type}: {title}".rstrip(": "),
                         problem_type)
        self.status = status
        self.title = title


class StaleError(InnerProblem):
    """Inner 425 ``urn:httpcrypt:stale`` (after the one retry)."""


class ReplayError(InnerProblem):
    """Inner 425 ``urn:httpcrypt:replay`` (never retried)."""


class TokenRequiredError(InnerProblem):
    """Inner 425 ``urn:httpcrypt:token-required`` (after the one retry)."""


class ServerIntegrityError(InnerProblem):
    """Inner 500 ``urn:httpcrypt:integrity``: the server could not verify our request."""


def inner_problem(problem_type: str, status: int, title: str = "") -> InnerProblem:
    """The InnerProblem subclass for ``problem_type``."""
    cls: type[InnerProblem] = {
        STALE: StaleError,
        REPLAY: ReplayError,
        TOKEN_REQUIRED: TokenRequiredError,
        INTEGRITY: ServerIntegrityError,
    }.get(problem_type, InnerProblem)
    return cls(problem_type, status, title)


class RefusedError(HTTPCryptError):
    """A non-200 outer response: unauthenticated, never data. ``code`` is
    ``unknown_key`` / ``body_too_large`` / ``admission_required`` / ``busy`` /
    ``hybrid_required`` where the problem type fixes it, otherwise ``refused``; ``problem_type``
    is the type URN if a problem document came, else None. ``retry_after``:
    the seconds a ``busy`` answer asks to wait (capped), else None."""

    status: int
    retry_after: float | None

    def __init__(self, status: int, problem_type: str | None,
                 retry_after: float | None = None):
        code = _OUTER_CODES.get(problem_type or "", "refused")
        super().__init__(
            code, f"server refused the request: {status} {problem_type or ''}".rstrip(),
            problem_type,
        )
        self.status = status
        self.retry_after = retry_after


class ConfigError(HTTPCryptError):
    """Bad configuration or call (not a protocol failure)."""

    def __init__(self, message: str):
        super().__init__("config", message)


# The wording of bad_signature when no certificate verifies under the
# pinned identity (spec §12, client diagnoses).
BAD_SIGNATURE = "the certificates are not signed by the pinned identity"


def host_port(authority: str) -> str:
    """``host:port``, the port made explicit (80 for http)."""
    if re.search(r":[0-9]+$", authority) and not authority.endswith("]"):
        return authority
    return f"{authority}:80"


class TransportError(HTTPCryptError):
    """No HTTPCrypt answer: the connection failed (``connect_failed``) or
    the request's time ran out (``timeout``)."""

    def __init__(self, code: str, message: str):
        super().__init__(code, message)


def _reason(exc: BaseException) -> str:
    """The operating system's reason behind a failed connection."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and (seen.errno or seen.strerror):
            text = os.strerror(seen.errno) if seen.errno else str(seen.strerror)
            return text[:1].lower() + text[1:]
        seen = seen.__cause__ or seen.__context__
    text = re.sub(r"^.*\[Errno -?[0-9]+\] ", "", str(exc)) or type(exc).__name__
    return text[:1].lower() + text[1:]


def connect_failed(authority: str, exc: BaseException) -> TransportError:
    """``connect_failed``: "cannot connect to HOST:PORT: REASON"."""
    return TransportError("connect_failed",
                          f"cannot connect to {host_port(authority)}: {_reason(exc)}")


def timed_out(seconds: float | None, phase: str) -> TransportError:
    """``timeout``: "timed out after N s while PHASE" (PHASE: ``connecting``,
    ``sending the request``, ``waiting for the answer``, ``reading the
    answer``)."""
    n = "?" if seconds is None else f"{round(seconds, 1):g}"
    return TransportError("timeout", f"timed out after {n} s while {phase}")


class EndpointError(RefusedError):
    """``OPTIONS {mount}/`` answered without certificates: ``no_endpoint``
    for 404 (a wrong mount), ``not_httpcrypt`` otherwise."""

    def __init__(self, authority: str, mount: str, status: int):
        super().__init__(status, None)
        where = host_port(authority)
        if status == 404:
            self.code = "no_endpoint"
            message = f"no HTTPCrypt endpoint at {mount or '/'} on {where}: wrong mount?"
        else:
            self.code = "not_httpcrypt"
            message = (f"{where} is not an HTTPCrypt server "
                       f"(OPTIONS {mount}/ answered {status})")
        self.args = (message,)
