/**
 * Suite 1 (spec §1.3): X25519, HChaCha20, XChaCha20-Poly1305, SHA3-256 and
 * Ed25519, all from the audited noble libraries. WebCrypto supplies only
 * randomness. Nothing here implements a primitive itself.
 */
import { hchacha, xchacha20poly1305 } from '@noble/ciphers/chacha.js';
import { x25519, ed25519 } from '@noble/curves/ed25519.js';
import { sha3_256 } from '@noble/hashes/sha3.js';
import { fail } from './errors.js';

export const NONCE_LEN = 24;
export const TAG_LEN = 16;
export const KEY_LEN = 32;
export const KID_LEN = 10;

const enc = new TextEncoder();
/** ASCII/UTF-8 bytes of a string. */
export function utf8(s: string): Uint8Array {
  return enc.encode(s);
}

/** Concatenates byte strings. */
export function concat(...parts: Uint8Array[]): Uint8Array {
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Uint8Array(n);
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

/** Byte-wise equality (not constant time; for public values only). */
export function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** Lower-case hex. */
export function toHex(b: Uint8Array): string {
  let s = '';
  for (const x of b) s += x.toString(16).padStart(2, '0');
  return s;
}

/** Parses hex (tests, configuration). */
export function fromHex(h: string): Uint8Array {
  if (h.length % 2 !== 0 || !/^[0-9a-fA-F]*$/.test(h)) throw new TypeError('bad hex');
  const out = new Uint8Array(h.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(h.slice(2 * i, 2 * i + 2), 16);
  return out;
}

/** `n` bytes from the platform CSPRNG (WebCrypto, in browsers and Node alike). */
export function randomBytes(n: number): Uint8Array {
  const out = new Uint8Array(n);
  // getRandomValues fills at most 65536 bytes per call.
  for (let i = 0; i < n; i += 65536) globalThis.crypto.getRandomValues(out.subarray(i, Math.min(n, i + 65536)));
  return out;
}

/** SHA3-256 of the concatenated parts. */
export function sha3(...parts: Uint8Array[]): Uint8Array {
  const h = sha3_256.create();
  for (const p of parts) h.update(p);
  return h.digest();
}

/** `kid = SHA3-256(kex_public)[0..10]` (spec §2). */
export function keyId(kexPublic: Uint8Array): Uint8Array {
  return sha3(kexPublic).slice(0, KID_LEN);
}

/** `SHA3-256(identity_public)[0..8]` (spec §5). */
export function signerId(identityPublic: Uint8Array): Uint8Array {
  return sha3(identityPublic).slice(0, 8);
}

/** The X25519 public key of a 32-byte secret (any 32 bytes: X25519 clamps). */
export function x25519Public(secret: Uint8Array): Uint8Array {
  return x25519.getPublicKey(secret);
}

// "expand 32-byte k" as little-endian words.
const SIGMA = new Uint32Array([0x61707865, 0x3320646e, 0x79622d32, 0x6b206574]);

function leWords(b: Uint8Array): Uint32Array {
  const w = new Uint32Array(b.length / 4);
  for (let i = 0; i < w.length; i++) {
    w[i] = (b[4 * i]! | (b[4 * i + 1]! << 8) | (b[4 * i + 2]! << 16) | (b[4 * i + 3]! << 24)) >>> 0;
  }
  return w;
}

/** `HChaCha20(key, input16)`, 32 bytes out. */
export function hchacha20(key: Uint8Array, input: Uint8Array): Uint8Array {
  const out = new Uint32Array(8);
  hchacha(SIGMA, leWords(key), leWords(input), out);
  const b = new Uint8Array(32);
  for (let i = 0; i < 8; i++) {
    const v = out[i]!;
    b[4 * i] = v & 0xff;
    b[4 * i + 1] = (v >>> 8) & 0xff;
    b[4 * i + 2] = (v >>> 16) & 0xff;
    b[4 * i + 3] = (v >>> 24) & 0xff;
  }
  return b;
}

/** Raw X25519; an all-zero result (small-order peer) is `small_order` (spec §2). */
export function x25519Shared(secret: Uint8Array, peerPublic: Uint8Array): Uint8Array {
  if (secret.length !== 32 || peerPublic.length !== 32) fail('small_order', 'X25519 key length');
  let shared: Uint8Array;
  try {
    shared = x25519.getSharedSecret(secret, peerPublic);
  } catch {
    // noble refuses the all-zero output itself.
    fail('small_order', 'small-order public key');
  }
  let acc = 0;
  for (const b of shared) acc |= b;
  if (acc === 0) fail('small_order', 'small-order public key');
  return shared;
}

/** `k = HChaCha20(X25519(own_secret, peer_public), 0^16)` (spec §2). */
export function sessionKey(secret: Uint8Array, peerPublic: Uint8Array): Uint8Array {
  return hchacha20(x25519Shared(secret, peerPublic), new Uint8Array(16));
}

/** XChaCha20-Poly1305 seal: returns `ciphertext || tag`. */
export function aeadSeal(key: Uint8Array, nonce: Uint8Array, plaintext: Uint8Array, ad: Uint8Array): Uint8Array {
  return xchacha20poly1305(key, nonce, ad).encrypt(plaintext);
}

/**
 * XChaCha20-Poly1305 seal writing `ciphertext || tag` into `output`
 * (exactly `plaintext.length + 16` bytes, not overlapping the plaintext).
 */
export function aeadSealInto(key: Uint8Array, nonce: Uint8Array, plaintext: Uint8Array, ad: Uint8Array, output: Uint8Array): void {
  xchacha20poly1305(key, nonce, ad).encrypt(plaintext, output);
}

/**
 * XChaCha20-Poly1305 open in place: `sealed` is `ciphertext || tag`; on
 * success the plaintext is `sealed[0..len-16]`. Returns false when the tag fails.
 */
export function aeadOpenInPlace(key: Uint8Array, nonce: Uint8Array, sealed: Uint8Array, ad: Uint8Array): boolean {
  try {
    xchacha20poly1305(key, nonce, ad).decrypt(sealed, sealed.subarray(0, sealed.length - TAG_LEN));
    return true;
  } catch {
    return false;
  }
}

/** XChaCha20-Poly1305 open of `ciphertext || tag`; `null` when the tag fails. */
export function aeadOpen(key: Uint8Array, nonce: Uint8Array, sealed: Uint8Array, ad: Uint8Array): Uint8Array | null {
  try {
    return xchacha20poly1305(key, nonce, ad).decrypt(sealed);
  } catch {
    return null;
  }
}

/** `(n + i) mod 2^192`, big-endian (spec §3.2). */
export function nonceAdd(n0: Uint8Array, i: number): Uint8Array {
  const out = n0.slice();
  let carry = i;
  for (let j = NONCE_LEN - 1; j >= 0 && carry > 0; j--) {
    const v = out[j]! + (carry % 256);
    out[j] = v & 0xff;
    carry = Math.floor(carry / 256) + (v >> 8);
  }
  return out;
}

/** Ed25519 public key of a 32-byte seed. */
export function ed25519Public(seed: Uint8Array): Uint8Array {
  return ed25519.getPublicKey(seed);
}

/** Ed25519 signature (deterministic). */
export function ed25519Sign(seed: Uint8Array, msg: Uint8Array): Uint8Array {
  return ed25519.sign(msg, seed);
}

/** Whether 32 bytes decode to an Ed25519 point usable as an identity (not small order). */
export function isIdentityKey(pub: Uint8Array): boolean {
  if (pub.length !== 32) return false;
  try {
    const p = ed25519.Point.fromBytes(pub);
    return !p.isSmallOrder();
  } catch {
    return false;
  }
}

/**
 * Strict Ed25519 verification, as `verify_strict` (spec D14): canonical
 * encodings, reduced `s`, no small-order public key or `R`.
 */
export function ed25519VerifyStrict(sig: Uint8Array, msg: Uint8Array, pub: Uint8Array): boolean {
  if (sig.length !== 64 || !isIdentityKey(pub)) return false;
  try {
    const r = ed25519.Point.fromBytes(sig.subarray(0, 32));
    if (r.isSmallOrder()) return false;
    return ed25519.verify(sig, msg, pub, { zip215: false });
  } catch {
    return false;
  }
}
