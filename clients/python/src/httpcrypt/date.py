"""HTTP-dates for the inner ``Date`` field (spec §8.1): all three RFC 9110
forms parse (surrounding whitespace ignored), IMF-fixdate is written; and
the freshness checks, on the inner ``Date`` (v1) or on the time a profile-2
request carries in its nonce (spec §4.5)."""

from __future__ import annotations

import calendar
import re
import time

from .errors import ProtocolError

_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_LONG_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_MON = "(" + "|".join(_MONTHS) + ")"
_IMF = re.compile(r"(\w{3}), (\d\d) " + _MON + r" (\d{4}) (\d\d):(\d\d):(\d\d) GMT")
_RFC850 = re.compile(r"(\w+), (\d\d)-" + _MON + r"-(\d\d) (\d\d):(\d\d):(\d\d) GMT")
_ASCTIME = re.compile(r"(\w{3}) " + _MON + r" ([ \d]\d) (\d\d):(\d\d):(\d\d) (\d{4})")

DEFAULT_WINDOW = 60


def format_date(unix: int) -> str:
    """IMF-fixdate of unix seconds."""
    t = time.gmtime(unix)
    return (f"{_DAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon - 1]} {t.tm_year:04d} "
            f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} GMT")


def parse_date(text: str) -> int:
    """Unix seconds of an HTTP-date; ``bad_date`` if it is none."""
    s = text.strip()
    if m := _IMF.fullmatch(s):
        wday, day, mon, year, hh, mm, ss = m.groups()
        days = _DAYS
    elif m := _RFC850.fullmatch(s):
        wday, day, mon, yy, hh, mm, ss = m.groups()
        year = str(2000 + int(yy) if int(yy) < 70 else 1900 + int(yy))
        days = _LONG_DAYS
    elif m := _ASCTIME.fullmatch(s):
        wday, mon, day, hh, mm, ss, year = m.groups()
        days = _DAYS
    else:
        raise ProtocolError("bad_date", "not an HTTP-date")
    y, mo, d = int(year), _MONTHS.index(mon) + 1, int(day)
    h, mi, se = int(hh), int(mm), int(ss)
    if not (1970 <= y <= 9999 and 1 <= d <= calendar.monthrange(y, mo)[1]
            and h < 24 and mi < 60 and se < 61):
        raise ProtocolError("bad_date", "HTTP-date out of range")
    if wday not in days or days.index(wday) != calendar.weekday(y, mo, d):
        raise ProtocolError("bad_date", "HTTP-date weekday does not match")
    return calendar.timegm((y, mo, d, h, mi, se, 0, 0, 0))


def check_date(value: str | None, now: int, window: int = DEFAULT_WINDOW) -> int:
    """The server's freshness check (spec §8.1): missing or outside the
    window is ``stale``, unparseable ``bad_date``; returns the date."""
    if value is None:
        raise ProtocolError("stale", "no inner Date")
    date = parse_date(value)
    if abs(date - now) > window:
        raise ProtocolError("stale", "inner Date outside the window")
    return date


def check_nonce_time(n0: bytes, now: int, window: int = DEFAULT_WINDOW) -> int:
    """The server's freshness check for a profile-2 request (spec §4.5):
    the unix seconds in ``n0[0..5]``, ``stale`` when more than ``window``
    from ``now``; returns the time."""
    if len(n0) < 5:
        raise ProtocolError("stale", "nonce too short to carry a time")
    sent = int.from_bytes(n0[:5], "big")
    if abs(sent - now) > window:
        raise ProtocolError("stale", "request time outside the window")
    return sent
