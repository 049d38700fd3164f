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

/** `data` zero-padded to `count` chunks of 14 bytes, each behind `fd 0j` (spec §6.2; suite 2 uses eleven, spec/hybrid.md H4). */
export function aaaaAddresses(data: Uint8Array, count: number): Uint8Array[] {
  const padded = new Uint8Array(count * CHUNK);
  padded.set(data);
  const out: Uint8Array[] = [];
  for (let j = 0; j < count; j++) {
    const a = new Uint8Array(16);
    a[0] = 0xfd;
    a[1] = j;
    a.set(padded.subarray(j * CHUNK, (j + 1) * CHUNK), 2);
    out.push(a);
  }
  return out;
}

/** The first `length` bytes an AAAA RRset carries, in any order: exactly `count` addresses, the `fd0` prefix, each order below `count` once, zero padding; else `bad_record`. */
export function aaaaPayload(addrs: readonly Uint8Array[], count: number, length: number): Uint8Array {
  if (addrs.length !== count) fail('bad_record', 'AAAA count');
  const padded = new Uint8Array(count * CHUNK);
  const seen = new Array<boolean>(count).fill(false);
  for (const a of addrs) {
    if (a.length !== 16) fail('bad_record');
    const order = a[1]! & 0x0f;
    if (a[0] !== 0xfd || a[1]! >> 4 !== 0 || order >= count || seen[order]) fail('bad_record', 'AAAA prefix or order');
    seen[order] = true;
    padded.set(a.subarray(2), order * CHUNK);
  }
  for (let i = length; i < padded.length; i++) if (padded[i] !== 0) fail('bad_record', 'AAAA padding');
  return padded.subarray(0, length);
}

/** The nine AAAA addresses of a certificate (spec §6.2). */
export function formatAaaa(c: KeyCert): Uint8Array[] {
  return aaaaAddresses(encodeCert(c), AAAA_CHUNKS);
}

/** Reassembles a certificate from an AAAA RRset in any order (exactly nine, each order once, zero padding). */
export function parseAaaa(addrs: readonly Uint8Array[]): KeyCert {
  return decodeCert(aaaaPayload(addrs, AAAA_CHUNKS, CERT_LEN));
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
