/**
 * The rspamd compatibility profile (spec/rspamd-profile.md): rspamd's
 * base32, key IDs (BLAKE2b-512), the `Key` header, `rspamadm keypair`
 * files and the cryptobox (XChaCha20 + Poly1305 over the bare
 * ciphertext). Shares only the primitives with v1; here for the shared
 * vectors and for tools that talk to rspamd workers.
 */
import { poly1305 } from '@noble/ciphers/_poly1305.js';
import { xchacha20 } from '@noble/ciphers/chacha.js';
import { blake2b } from '@noble/hashes/blake2.js';
import { fail } from './errors.js';
import { latin1 } from './inner.js';
import { concat, sessionKey, x25519Public } from './suite.js';

const ALPHABET = 'ybndrfg8ejkmcpqxot1uwisza345h769';

/** rspamd base32: least significant bits first, no padding. */
export function rspamdBase32Encode(bytes: Uint8Array): string {
  let out = '';
  let acc = 0;
  let bits = 0;
  for (const b of bytes) {
    acc |= b << bits;
    bits += 8;
    while (bits >= 5) {
      out += ALPHABET[acc & 31]!;
      acc >>>= 5;
      bits -= 5;
    }
  }
  if (bits > 0) out += ALPHABET[acc & 31]!;
  return out;
}

/** Strict decoding (`bad_base32`): lower-case alphabet, length `ceil(8n/5)`, zero unused bits. */
export function rspamdBase32Decode(text: string): Uint8Array {
  const n = Math.floor((text.length * 5) / 8);
  if (Math.ceil((n * 8) / 5) !== text.length) fail('bad_base32', 'length');
  const out = new Uint8Array(n);
  let acc = 0;
  let bits = 0;
  let o = 0;
  for (const ch of text) {
    const v = ALPHABET.indexOf(ch);
    if (v < 0) fail('bad_base32', 'character');
    acc |= v << bits;
    bits += 5;
    if (bits >= 8) {
      out[o++] = acc & 0xff;
      acc >>>= 8;
      bits -= 8;
    }
  }
  if (acc !== 0) fail('bad_base32', 'non-zero unused bits');
  return out;
}

/** A 32-byte key: 52 characters, or the 51 rspamd also accepts (top bit taken as zero). */
export function rspamdDecodeKey(text: string): Uint8Array {
  if (text.length === 52) {
    const b = rspamdBase32Decode(text);
    if (b.length !== 32) fail('bad_base32');
    return b;
  }
  if (text.length === 51) {
    // 255 bits: decode as if one more zero bit followed.
    let acc = 0n;
    for (let i = text.length - 1; i >= 0; i--) {
      const v = ALPHABET.indexOf(text[i]!);
      if (v < 0) fail('bad_base32', 'character');
      acc = (acc << 5n) | BigInt(v);
    }
    const out = new Uint8Array(32);
    for (let i = 0; i < 32; i++) out[i] = Number((acc >> BigInt(8 * i)) & 0xffn);
    return out;
  }
  fail('bad_base32', 'key length');
}

/** `BLAKE2b-512(public)` and its 5-byte short ID. */
export function rspamdKeyId(publicKey: Uint8Array): { id: Uint8Array; shortId: Uint8Array } {
  const id = blake2b(publicKey, { dkLen: 64 });
  return { id, shortId: id.slice(0, 5) };
}

/** The parsed `Key` field: without `=` the request is plaintext (not an error). */
export type RspamdKeyHeader = { encrypted: false } | { encrypted: true; shortId: Uint8Array; clientPublic: Uint8Array };

export function parseRspamdKeyHeader(value: string): RspamdKeyHeader {
  const v = value.replace(/^[ \t]+|[ \t]+$/g, '');
  const eq = v.indexOf('=');
  if (eq < 0) return { encrypted: false };
  let id: Uint8Array;
  let pub: Uint8Array;
  try {
    id = rspamdBase32Decode(v.slice(0, eq));
    pub = rspamdDecodeKey(v.slice(eq + 1));
  } catch {
    fail('bad_key_header');
  }
  if (id.length < 5) fail('bad_key_header', 'short ID');
  return { encrypted: true, shortId: id.slice(0, 5), clientPublic: pub };
}

export function formatRspamdKeyHeader(shortId: Uint8Array, clientPublic: Uint8Array): string {
  return `${rspamdBase32Encode(shortId)}=${rspamdBase32Encode(clientPublic)}`;
}

/** Reads an `rspamadm keypair` block (a UCL subset) and returns the secret; `bad_keypair` on any fault. */
export function parseRspamdKeypair(text: string): { secret: Uint8Array; publicKey: Uint8Array } {
  let t = text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|\n)\s*(#|\/\/)[^\n]*/g, '$1');
  t = t.trim();
  const wrapped = /^\{([\s\S]*)\}$/.exec(t);
  if (wrapped) t = wrapped[1]!.trim();
  const kp = /^"?keypair"?\s*[=:]?\s*\{([\s\S]*)\}\s*[;,]?$/.exec(t);
  if (kp) t = kp[1]!;
  const fields = new Map<string, string>();
  const re = /\s*"?([A-Za-z_][A-Za-z0-9_]*)"?\s*[=:]?\s*(?:"([^"\\\n\r]*)"|'([^'\\\n\r]*)'|([^\s;,{}"']+))\s*[;,]?/y;
  let pos = 0;
  while (pos < t.length) {
    if (/^\s*$/.test(t.slice(pos))) break;
    re.lastIndex = pos;
    const m = re.exec(t);
    if (!m) fail('bad_keypair', 'syntax');
    const name = m[1]!;
    const value = m[2] ?? m[3] ?? m[4]!;
    if (fields.has(name)) fail('bad_keypair', `repeated ${name}`);
    fields.set(name, value);
    pos = re.lastIndex;
  }
  const pick = (names: string[]): string | undefined => {
    const hits = names.filter((n) => fields.has(n));
    if (hits.length > 1) fail('bad_keypair', 'repeated field');
    return hits.length ? fields.get(hits[0]!) : undefined;
  };
  const priv = pick(['privkey', 'private', 'private_key', 'secret', 'secret_key']);
  const pub = pick(['pubkey', 'public', 'public_key']);
  const id = pick(['id']);
  for (const [name, want] of [['encoding', 'base32'], ['algorithm', 'curve25519'], ['type', 'kex']] as const) {
    const v = pick([name]);
    if (v !== undefined && v.toLowerCase() !== want) fail('bad_keypair', `${name} ${v}`);
  }
  if (priv === undefined || pub === undefined) fail('bad_keypair', 'privkey and pubkey required');
  let secret: Uint8Array;
  let publicKey: Uint8Array;
  try {
    secret = rspamdDecodeKey(priv);
    publicKey = rspamdDecodeKey(pub);
  } catch {
    fail('bad_keypair', 'key text');
  }
  const derived = x25519Public(secret);
  if (!derived.every((b, i) => b === publicKey[i])) fail('bad_keypair', 'pubkey does not match privkey');
  if (id !== undefined) {
    let idBytes: Uint8Array;
    try {
      idBytes = rspamdBase32Decode(id);
    } catch {
      fail('bad_keypair', 'id');
    }
    const want = rspamdKeyId(publicKey).id;
    if (idBytes.length !== 64 || !idBytes.every((b, i) => b === want[i])) fail('bad_keypair', 'id does not match pubkey');
  }
  return { secret, publicKey };
}

/** `nm = HChaCha20(X25519(secret, peer), 0^16)` (small-order peers refused). */
export function rspamdNm(secret: Uint8Array, peerPublic: Uint8Array): Uint8Array {
  return sessionKey(secret, peerPublic);
}

/** The cryptobox: `nonce || Poly1305(polykey, ct) || ct`, ct = plaintext XOR XChaCha20 from block 1. */
export function rspamdSeal(nm: Uint8Array, nonce: Uint8Array, plaintext: Uint8Array): Uint8Array {
  const polyKey = xchacha20(nm, nonce, new Uint8Array(32), undefined, 0);
  const ct = xchacha20(nm, nonce, plaintext, undefined, 1);
  return concat(nonce, poly1305(ct, polyKey), ct);
}

/** Opens a cryptobox body: under 40 bytes `truncated`, a bad tag `integrity`; the tag is checked first. */
export function rspamdOpen(nm: Uint8Array, body: Uint8Array): Uint8Array {
  if (body.length < 40) fail('truncated');
  const nonce = body.subarray(0, 24);
  const tag = body.subarray(24, 40);
  const ct = body.subarray(40);
  const polyKey = xchacha20(nm, nonce, new Uint8Array(32), undefined, 0);
  const want = poly1305(ct, polyKey);
  let diff = 0;
  for (let i = 0; i < 16; i++) diff |= want[i]! ^ tag[i]!;
  if (diff !== 0) fail('integrity');
  return xchacha20(nm, nonce, ct, undefined, 1);
}

/** The outer request the Rust rspamd client writes, in its field order. */
export function formatRspamdRequest(host: string, keyHeader: string, body: Uint8Array): Uint8Array {
  if (!/^[\x21-\x7e]+$/.test(host)) fail('bad_host');
  const head = `POST /post HTTP/1.1\r\nHost: ${host}\r\nContent-Length: ${body.length}\r\nContent-Type: application/octet-stream\r\nConnection: close\r\nKey: ${keyHeader}\r\n\r\n`;
  return concat(latin1(head), body);
}

/** The outer response head and body. */
export function formatRspamdResponse(body: Uint8Array): Uint8Array {
  const head = `HTTP/1.1 200 OK\r\nContent-Length: ${body.length}\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n`;
  return concat(latin1(head), body);
}
