/**
 * Strict base64url without padding (spec §1.2): every byte string has
 * exactly one accepted text form.
 */
import { fail } from './errors.js';

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
const DECODE = new Int16Array(128).fill(-1);
for (let i = 0; i < 64; i++) DECODE[ALPHABET.charCodeAt(i)] = i;

/** Whether `c` (a char code) belongs to the base64url alphabet. */
export function isB64uChar(c: number): boolean {
  return c < 128 && DECODE[c]! >= 0;
}

/** Whether every character of `s` is in the alphabet. */
export function isB64uText(s: string): boolean {
  for (let i = 0; i < s.length; i++) if (!isB64uChar(s.charCodeAt(i))) return false;
  return true;
}

/** Length of the unpadded form of `n` bytes. */
export function encodedLen(n: number): number {
  return Math.ceil((n * 4) / 3);
}

/** Encodes bytes as unpadded base64url. */
export function b64uEncode(bytes: Uint8Array): string {
  let out = '';
  let i = 0;
  for (; i + 3 <= bytes.length; i += 3) {
    const v = (bytes[i]! << 16) | (bytes[i + 1]! << 8) | bytes[i + 2]!;
    out += ALPHABET[v >> 18]! + ALPHABET[(v >> 12) & 63]! + ALPHABET[(v >> 6) & 63]! + ALPHABET[v & 63]!;
  }
  const rest = bytes.length - i;
  if (rest === 1) {
    const v = bytes[i]!;
    out += ALPHABET[v >> 2]! + ALPHABET[(v & 3) << 4]!;
  } else if (rest === 2) {
    const v = (bytes[i]! << 8) | bytes[i + 1]!;
    out += ALPHABET[v >> 10]! + ALPHABET[(v >> 4) & 63]! + ALPHABET[(v & 15) << 2]!;
  }
  return out;
}

/** Decodes canonical unpadded base64url; anything else is `bad_base64`. */
export function b64uDecode(text: string): Uint8Array {
  const n = text.length;
  if (n % 4 === 1) fail('bad_base64', 'base64url length');
  const out = new Uint8Array(Math.floor((n * 3) / 4));
  let o = 0;
  let acc = 0;
  let bits = 0;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    const v = c < 128 ? DECODE[c]! : -1;
    if (v < 0) fail('bad_base64', 'base64url character');
    acc = (acc << 6) | v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = (acc >> bits) & 0xff;
      acc &= (1 << bits) - 1;
    }
  }
  if (acc !== 0) fail('bad_base64', 'non-zero trailing bits');
  return out;
}

/** Decodes text that must hold exactly `n` bytes. */
export function b64uDecodeExact(text: string, n: number): Uint8Array {
  if (text.length !== encodedLen(n)) fail('bad_base64', `expected ${n} bytes`);
  return b64uDecode(text);
}
