/**
 * Profile 2, the compact request profile (spec §4.5): the request nonce
 * `n0 = u40(t) || r` that carries the client's time, the freshness check a
 * server runs on it, the `Host` binding of record 0, the 16-byte response
 * random, and the shorter cookie pads. The stream side (associated data,
 * response nonce) is in `stream.ts`, the `2…` nonce segment in `outer.ts`.
 */
import { fail } from './errors.js';
import { NONCE_LEN, randomBytes } from './suite.js';

/** The request profile: 1 (v1, spec §4.1) or 2 (compact, spec §4.5). */
export type Profile = 1 | 2;

/** Bytes of unix time at the start of a profile-2 request nonce. */
export const NONCE_TIME_LEN = 5;
/** Random bytes after the time. */
export const NONCE_RANDOM_LEN = NONCE_LEN - NONCE_TIME_LEN;
/** The random `r` that opens a profile-2 response body (its stream nonce is `0xff^8 || r`). */
export const RESPONSE_RANDOM_LEN = 16;
/** Cookie pads of a profile-2 request are 0–7 characters (v1: 0–16). */
export const COMPACT_MAX_PAD = 7;
/** The longest `Host` value record 0 can bind (`u16` length). */
export const MAX_BOUND_HOST = 0xffff;
/** The character that starts a profile-2 nonce segment. */
export const COMPACT_SEGMENT_PREFIX = '2';

const TIME_LIMIT = 2 ** 40;

/** `u40(time) || random` (spec §4.5); `random` defaults to 19 fresh CSPRNG bytes. */
export function compactNonce(time: number, random: Uint8Array = randomBytes(NONCE_RANDOM_LEN)): Uint8Array {
  const t = Math.floor(time);
  if (!Number.isFinite(t) || t < 0 || t >= TIME_LIMIT) fail('config', `time ${time} does not fit 40 bits`);
  if (random.length !== NONCE_RANDOM_LEN) fail('config', `a profile-2 nonce takes ${NONCE_RANDOM_LEN} random bytes`);
  const n0 = new Uint8Array(NONCE_LEN);
  const hi = Math.floor(t / 2 ** 32);
  const lo = t % 2 ** 32;
  n0[0] = hi & 0xff;
  n0[1] = (lo >>> 24) & 0xff;
  n0[2] = (lo >>> 16) & 0xff;
  n0[3] = (lo >>> 8) & 0xff;
  n0[4] = lo & 0xff;
  n0.set(random, NONCE_TIME_LEN);
  return n0;
}

/** The unix seconds in `n0[0..5]`. */
export function nonceTime(n0: Uint8Array): number {
  if (n0.length !== NONCE_LEN) fail('bad_nonce_path');
  return n0[0]! * 2 ** 32 + (((n0[1]! << 24) | (n0[2]! << 16) | (n0[3]! << 8) | n0[4]!) >>> 0);
}

/**
 * The freshness check of a profile-2 request (spec §4.5, §8.1): the time in
 * `n0` must be within `window` seconds of `now` (both ends pass), else
 * `stale`. Returns the time.
 */
export function checkNonceTime(n0: Uint8Array, now: number, window: number): number {
  const t = nonceTime(n0);
  if (Math.abs(t - now) > window) fail('stale', 'request time outside the window');
  return t;
}

/**
 * The outer `Host` value as record 0 binds it: its bytes exactly as sent
 * (one byte per character; a character above U+00FF cannot be sent and is
 * `bad_host`, so is a value above 65535 bytes).
 */
export function hostBytes(host: string): Uint8Array {
  if (host.length > MAX_BOUND_HOST) fail('bad_host', 'Host above 65535 bytes cannot be bound');
  const b = new Uint8Array(host.length);
  for (let i = 0; i < host.length; i++) {
    const c = host.charCodeAt(i);
    if (c > 0xff) fail('bad_host', 'Host with a character that is not one byte');
    b[i] = c;
  }
  return b;
}
