/**
 * HTTP-date (RFC 9110 §5.6.7) for the inner `Date` field and the freshness
 * check of spec §8.1. All three forms parse; IMF-fixdate is written.
 */
import { fail } from './errors.js';

const DAYS = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'];
const LONG_DAYS = ['Sunday', 'Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday'];
const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];

const two = (n: number): string => String(n).padStart(2, '0');

/** Unix seconds as an IMF-fixdate, e.g. `Tue, 14 Nov 2023 22:13:20 GMT`. */
export function formatHttpDate(unix: number): string {
  const d = new Date(Math.floor(unix) * 1000);
  return (
    `${DAYS[d.getUTCDay()]!}, ${two(d.getUTCDate())} ${MONTHS[d.getUTCMonth()]!} ${String(d.getUTCFullYear()).padStart(4, '0')} ` +
    `${two(d.getUTCHours())}:${two(d.getUTCMinutes())}:${two(d.getUTCSeconds())} GMT`
  );
}

function build(wday: number, day: number, mon: number, year: number, h: number, m: number, s: number): number | null {
  if (mon < 0 || day < 1 || day > 31 || h > 23 || m > 59 || s > 60 || year < 1970 || year > 9999) return null;
  const ms = Date.UTC(year, mon, day, h, m, s === 60 ? 59 : s);
  const d = new Date(ms);
  // Reject dates that rolled over (31 Feb) and a weekday that does not match.
  if (d.getUTCDate() !== day || d.getUTCMonth() !== mon || d.getUTCDay() !== wday) return null;
  return ms / 1000 + (s === 60 ? 1 : 0);
}

/** Parses an HTTP-date (surrounding whitespace ignored); `null` if it is not one. */
export function parseHttpDate(text: string): number | null {
  const t = text.trim();
  let m = /^([A-Z][a-z]{2}), (\d{2}) ([A-Z][a-z]{2}) (\d{4}) (\d{2}):(\d{2}):(\d{2}) GMT$/.exec(t);
  if (m) {
    return build(DAYS.indexOf(m[1]!), +m[2]!, MONTHS.indexOf(m[3]!), +m[4]!, +m[5]!, +m[6]!, +m[7]!);
  }
  m = /^([A-Z][a-z]+), (\d{2})-([A-Z][a-z]{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2}) GMT$/.exec(t);
  if (m) {
    const yy = +m[4]!;
    const year = yy < 70 ? 2000 + yy : 1900 + yy;
    return build(LONG_DAYS.indexOf(m[1]!), +m[2]!, MONTHS.indexOf(m[3]!), year, +m[5]!, +m[6]!, +m[7]!);
  }
  m = /^([A-Z][a-z]{2}) ([A-Z][a-z]{2}) ([ \d]\d) (\d{2}):(\d{2}):(\d{2}) (\d{4})$/.exec(t);
  if (m) {
    return build(DAYS.indexOf(m[1]!), +m[3]!.trim(), MONTHS.indexOf(m[2]!), +m[7]!, +m[4]!, +m[5]!, +m[6]!);
  }
  return null;
}

/**
 * The freshness check (spec §8.1): missing → `stale`, unparseable →
 * `bad_date`, `|date − now| > window` → `stale`. Returns the date.
 */
export function checkDate(value: string | null | undefined, now: number, window: number): number {
  if (value === null || value === undefined) fail('stale', 'missing Date');
  const d = parseHttpDate(value);
  if (d === null) fail('bad_date');
  if (Math.abs(d - now) > window) fail('stale');
  return d;
}
