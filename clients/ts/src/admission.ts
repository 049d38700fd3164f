/**
 * Load-aware admission (spec §14): the admission cookie a server under load
 * hands out, the puzzle bound to a request's `n0`, the client's solver and
 * the server's check of an echo (for the vectors and the in-memory server).
 *
 * ```
 * cookie = u32 step || u8 d || SHA3-256("hc1-admit" || secret || u32 step || u8 d || addr16)[0..16]
 * echo   = cookie || solution (8 bytes)
 * puzzle = SHA3-256("hc1-puzzle" || cookie || n0 || solution) has ≥ d leading zero bits
 * ```
 */
import { b64uDecodeExact, b64uEncode } from './b64u.js';
import { HttpCryptError, fail } from './errors.js';
import { NONCE_LEN, bytesEqual, concat, sha3, utf8 } from './suite.js';
import { sha3_256 } from '@noble/hashes/sha3.js';

export const ADMIT_COOKIE_LEN = 21;
export const ADMIT_SOLUTION_LEN = 8;
export const ADMIT_ECHO_LEN = ADMIT_COOKIE_LEN + ADMIT_SOLUTION_LEN;
/** The echo's text form: 39 base64url characters. */
export const ADMIT_ECHO_B64_LEN = 39;
/** Name of the echo's cookie pair (9 characters: never a §11.3 candidate). */
export const ADMIT_COOKIE_NAME = 'hc1-admit';
/** The most work a client does (spec §14.5): above this it gives up with `bad_admission`. */
export const MAX_CLIENT_DIFFICULTY = 24;
/** How long a client keeps echoing a cookie (spec §14.5). */
export const ADMIT_ECHO_SECONDS = 25;

const ADMIT_LABEL = utf8('hc1-admit');
const PUZZLE_LABEL = utf8('hc1-puzzle');

function u32be(n: number): Uint8Array {
  const b = new Uint8Array(4);
  new DataView(b.buffer).setUint32(0, n >>> 0, false);
  return b;
}

/** The 16-byte form of an IP address: IPv6 as is, IPv4 as IPv4-mapped IPv6 (`::ffff:a.b.c.d`). */
export function addr16(text: string): Uint8Array {
  const out = new Uint8Array(16);
  const v4 = (s: string): Uint8Array | null => {
    const parts = s.split('.');
    if (parts.length !== 4) return null;
    const b = new Uint8Array(4);
    for (let i = 0; i < 4; i++) {
      const p = parts[i]!;
      if (!/^\d{1,3}$/.test(p) || Number(p) > 255 || (p.length > 1 && p.startsWith('0'))) return null;
      b[i] = Number(p);
    }
    return b;
  };
  let s = text.trim();
  if (s.startsWith('[') && s.endsWith(']')) s = s.slice(1, -1);
  const four = v4(s);
  if (four) {
    out[10] = 0xff;
    out[11] = 0xff;
    out.set(four, 12);
    return out;
  }
  const bad = (): never => fail('config', `not an IP address: ${text}`);
  const halves = s.split('::');
  if (halves.length > 2) bad();
  const groups = (part: string): number[] => {
    if (part === '') return [];
    const words: number[] = [];
    const items = part.split(':');
    items.forEach((g, i) => {
      if (i === items.length - 1 && g.includes('.')) {
        const b = v4(g) ?? bad();
        words.push((b[0]! << 8) | b[1]!, (b[2]! << 8) | b[3]!);
      } else {
        if (!/^[0-9a-fA-F]{1,4}$/.test(g)) bad();
        words.push(parseInt(g, 16));
      }
    });
    return words;
  };
  const head = groups(halves[0]!);
  const tail = halves.length === 2 ? groups(halves[1]!) : [];
  if (halves.length === 1 ? head.length !== 8 : head.length + tail.length > 7) bad();
  const words = [...head, ...new Array<number>(8 - head.length - tail.length).fill(0), ...tail];
  words.forEach((w, i) => {
    out[2 * i] = w >> 8;
    out[2 * i + 1] = w & 0xff;
  });
  return out;
}

/** The admission cookie (21 bytes) for `step`, difficulty `d` and the peer's 16-byte address. */
export function admitCookie(secret: Uint8Array, step: number, d: number, addr: Uint8Array): Uint8Array {
  if (addr.length !== 16) fail('config', 'addr16 must have 16 bytes');
  const head = concat(u32be(step), Uint8Array.of(d));
  const mac = sha3(ADMIT_LABEL, secret, head, addr).subarray(0, 16);
  return concat(head, mac);
}

/** The step a cookie was issued in. */
export function cookieStep(cookie: Uint8Array): number {
  return new DataView(cookie.buffer, cookie.byteOffset, cookie.byteLength).getUint32(0, false);
}

/** The difficulty a cookie carries (covered by its MAC). */
export function cookieDifficulty(cookie: Uint8Array): number {
  return cookie[4]!;
}

/** `SHA3-256("hc1-puzzle" || cookie || n0 || solution)`. */
export function puzzleHash(cookie: Uint8Array, n0: Uint8Array, solution: Uint8Array): Uint8Array {
  return sha3(PUZZLE_LABEL, cookie, n0, solution);
}

/** Number of leading zero bits of `h`. */
export function leadingZeroBits(h: Uint8Array): number {
  let n = 0;
  for (const b of h) {
    if (b === 0) {
      n += 8;
      continue;
    }
    return n + Math.clz32(b) - 24;
  }
  return n;
}

/** Whether `h` starts with at least `d` zero bits (no early exit on the byte value; public data anyway). */
export function hasZeroBits(h: Uint8Array, d: number): boolean {
  return leadingZeroBits(h) >= d;
}

/** Options of `solvePuzzle`. */
export interface SolveOptions {
  /** Hashes between two yields to the event loop (default 2048: about 13 ms of work in Node). */
  yieldEvery?: number;
  /** Most hashes tried (default `16 · 2^d`, at least 2^16): a search fails with probability about e^-16. */
  maxTries?: number;
  /** Aborts the search (checked at each yield). */
  signal?: AbortSignal | undefined;
}

/** Lets the event loop run: `setImmediate` in Node, a `MessageChannel` task in browsers (no 4 ms clamp). */
function yieldToEventLoop(): Promise<void> {
  const g = globalThis as { setImmediate?: (f: () => void) => unknown };
  if (typeof g.setImmediate === 'function') {
    const si = g.setImmediate;
    return new Promise((resolve) => si(resolve));
  }
  if (typeof MessageChannel === 'function') {
    return new Promise((resolve) => {
      const ch = new MessageChannel();
      ch.port1.onmessage = () => {
        ch.port1.close();
        resolve();
      };
      ch.port2.postMessage(null);
    });
  }
  return new Promise((resolve) => setTimeout(resolve, 0));
}

/**
 * Finds 8 solution bytes (a big-endian counter from 0) for the puzzle of
 * `cookie` under `n0`, yielding to the event loop every `yieldEvery`
 * hashes so a page stays responsive. The search is bounded (`maxTries`);
 * running out is `bad_admission`. A difficulty above 24 is refused at once.
 */
export async function solvePuzzle(cookie: Uint8Array, n0: Uint8Array, d: number, options: SolveOptions = {}): Promise<Uint8Array> {
  if (cookie.length !== ADMIT_COOKIE_LEN || n0.length !== NONCE_LEN) fail('bad_admission', 'admission cookie or nonce of the wrong length');
  if (!Number.isInteger(d) || d < 0 || d > MAX_CLIENT_DIFFICULTY) fail('bad_admission', `puzzle difficulty ${d} is above ${MAX_CLIENT_DIFFICULTY}`);
  const yieldEvery = Math.max(1, options.yieldEvery ?? 2048);
  const maxTries = options.maxTries ?? Math.max(1 << 16, 16 * 2 ** d);
  const solution = new Uint8Array(ADMIT_SOLUTION_LEN);
  if (d === 0) return solution;
  // The fixed prefix is absorbed once; each try copies that state (noble's `_cloneInto`, no
  // allocation) and absorbs the 8 solution bytes: about 1.5 times the rate of hashing afresh.
  const base = sha3_256.create().update(concat(PUZZLE_LABEL, cookie, n0));
  const tmp = sha3_256.create();
  const out = new Uint8Array(32);
  const view = new DataView(solution.buffer);
  try {
    for (let i = 0; i < maxTries; i++) {
      if (i > 0 && i % yieldEvery === 0) {
        await yieldToEventLoop();
        if (options.signal?.aborted) throw new HttpCryptError('transport', 'aborted while solving the admission puzzle', undefined, { cause: options.signal.reason });
      }
      view.setUint32(0, Math.floor(i / 2 ** 32), false);
      view.setUint32(4, i >>> 0, false);
      base._cloneInto(tmp);
      tmp.update(solution);
      tmp.digestInto(out);
      if (hasZeroBits(out, d)) return solution;
    }
  } finally {
    base.destroy();
    tmp.destroy();
  }
  fail('bad_admission', `no puzzle solution of difficulty ${d} in ${maxTries} tries`);
}

/** `b64u(cookie || solution)`: the value of the `hc1-admit` pair. */
export function formatEcho(cookie: Uint8Array, solution: Uint8Array): string {
  return b64uEncode(concat(cookie, solution));
}

/** What a server learns from an accepted echo. */
export interface AdmissionCheck {
  difficulty: number;
  puzzleHash: Uint8Array;
  step: number;
}

/**
 * The server's check of an echo (spec §14.3): exactly 39 canonical
 * base64url characters; the cookie's step is the current one or the one
 * before; its MAC matches under one of `secrets` for the peer address;
 * the puzzle holds for this request's `n0`. Any failure is `bad_admission`.
 */
export function verifyEcho(echo: string, n0: Uint8Array, addr: Uint8Array, secrets: readonly Uint8Array[], stepNow: number): AdmissionCheck {
  if (echo.length !== ADMIT_ECHO_B64_LEN) fail('bad_admission', 'echo length');
  let bytes: Uint8Array;
  try {
    bytes = b64uDecodeExact(echo, ADMIT_ECHO_LEN);
  } catch {
    fail('bad_admission', 'echo encoding');
  }
  const cookie = bytes.subarray(0, ADMIT_COOKIE_LEN);
  const solution = bytes.subarray(ADMIT_COOKIE_LEN);
  const step = cookieStep(cookie);
  if (step !== stepNow && step + 1 !== stepNow) fail('bad_admission', 'cookie step');
  const d = cookieDifficulty(cookie);
  if (!secrets.some((s) => bytesEqual(admitCookie(s, step, d, addr), cookie))) fail('bad_admission', 'cookie MAC');
  const h = puzzleHash(cookie, n0, solution);
  if (!hasZeroBits(h, d)) fail('bad_admission', 'puzzle');
  return { difficulty: d, puzzleHash: h, step };
}
