/**
 * The application token of spec §8.4: `Client-Random: b64u(cr)` asks for
 * `Random: b64u(cr || sr)`, `sr = SHA3-256("hc1-token" || secret || k || cr)[0..16]`.
 */
import { b64uDecodeExact, b64uEncode } from './b64u.js';
import { fail } from './errors.js';
import { concat, sha3, utf8 } from './suite.js';

export const CLIENT_RANDOM_FIELD = 'Client-Random';
export const RANDOM_FIELD = 'Random';
const LABEL = utf8('hc1-token');

export function serverRandom(secret: Uint8Array, k: Uint8Array, clientRandom: Uint8Array): Uint8Array {
  return sha3(LABEL, secret, k, clientRandom).slice(0, 16);
}

export function formatClientRandom(cr: Uint8Array): string {
  return b64uEncode(cr);
}

export function formatRandom(secret: Uint8Array, k: Uint8Array, cr: Uint8Array): string {
  return b64uEncode(concat(cr, serverRandom(secret, k, cr)));
}

/** Rechecks a `Random` value (server side); `bad_token` unless it verifies. */
export function verifyRandom(secret: Uint8Array, k: Uint8Array, value: string): Uint8Array {
  let raw: Uint8Array;
  try {
    raw = b64uDecodeExact(value, 40);
  } catch {
    fail('bad_token');
  }
  const cr = raw.slice(0, 24);
  const expected = serverRandom(secret, k, cr);
  let diff = 0;
  for (let i = 0; i < 16; i++) diff |= expected[i]! ^ raw[24 + i]!;
  if (diff !== 0) fail('bad_token');
  return cr;
}
