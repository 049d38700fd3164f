/**
 * DNS record forms of certificates (spec §6): the TXT text form, the AAAA
 * chunk set and the identity TXT record. Pure format/parse; lookups are
 * the application's (browsers have no DNS API).
 */
import { b64uDecodeExact, b64uEncode } from './b64u.js';
import { CERT_LEN, type KeyCert, certFromText, decodeCert, encodeCert } from './cert.js';
import { fail } from './errors.js';
import { concat, isIdentityKey } from './suite.js';

export const AAAA_CHUNKS = 9;
const CHUNK = 14;
const PADDED = AAAA_CHUNKS * CHUNK;
export const IDENTITY_PREFIX = 'hc1-id ';

/** Parses one TXT record given its character-strings (joined before parsing, spec §6.1). */
export function parseTxt(strings: readonly Uint8Array[]): KeyCert {
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(concat(...strings));
  } catch {
    fail('bad_record', 'TXT is not UTF-8');
  }
  return certFromText(text);
}

/** The nine AAAA addresses of a certificate (spec §6.2). */
export function formatAaaa(c: KeyCert): Uint8Array[] {
  const padded = new Uint8Array(PADDED);
  padded.set(encodeCert(c));
  const out: Uint8Array[] = [];
  for (let j = 0; j < AAAA_CHUNKS; j++) {
    const a = new Uint8Array(16);
    a[0] = 0xfd;
    a[1] = j;
    a.set(padded.subarray(j * CHUNK, (j + 1) * CHUNK), 2);
    out.push(a);
  }
  return out;
}

/** Reassembles a certificate from an AAAA RRset in any order (exactly nine, each order once, zero padding). */
export function parseAaaa(addrs: readonly Uint8Array[]): KeyCert {
  if (addrs.length !== AAAA_CHUNKS) fail('bad_record', 'AAAA count');
  const padded = new Uint8Array(PADDED);
  const seen = new Array<boolean>(AAAA_CHUNKS).fill(false);
  for (const a of addrs) {
    if (a.length !== 16) fail('bad_record');
    const order = a[1]! & 0x0f;
    if (a[0] !== 0xfd || a[1]! >> 4 !== 0 || order >= AAAA_CHUNKS || seen[order]) fail('bad_record', 'AAAA prefix or order');
    seen[order] = true;
    padded.set(a.subarray(2), order * CHUNK);
  }
  for (let i = CERT_LEN; i < PADDED; i++) if (padded[i] !== 0) fail('bad_record', 'AAAA padding');
  return decodeCert(padded.subarray(0, CERT_LEN));
}

/** `hc1-id {b64u(identity_public)}`. */
export function formatIdentityTxt(identityPublic: Uint8Array): string {
  return IDENTITY_PREFIX + b64uEncode(identityPublic);
}

/** Parses the identity TXT record: prefix `bad_record`, key text `bad_base64`, not a point `bad_signature`. */
export function parseIdentityTxt(text: string): Uint8Array {
  if (!text.startsWith(IDENTITY_PREFIX)) fail('bad_record', 'identity prefix');
  const key = b64uDecodeExact(text.slice(IDENTITY_PREFIX.length), 32);
  if (!isIdentityKey(key)) fail('bad_signature', 'identity key is not a valid point');
  return key;
}
