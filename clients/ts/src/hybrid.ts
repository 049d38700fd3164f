/**
 * Suite 2, the hybrid key agreement (spec/hybrid.md H1): ML-KEM-768 from
 * `@noble/post-quantum` beside the X25519 of suite 1, and X-Wing's
 * combiner over both shared secrets. Only the glue is here: key generation
 * from the 64-byte seed `d || z`, encapsulation (with caller randomness for
 * tests), decapsulation, the combiner, the draft's seed expansion (for its
 * test vectors only: this protocol keeps the two private keys apart), and
 * the suite-2 key ID.
 */
import { ml_kem768 } from '@noble/post-quantum/ml-kem.js';
import { shake256 } from '@noble/hashes/sha3.js';
import { fail } from './errors.js';
import { KID_LEN, concat, sha3, x25519Public, x25519Shared } from './suite.js';

/** ML-KEM-768 encapsulation key (`ek_M`) length. */
export const KEM_PUBLIC_LEN = 1184;
/** ML-KEM-768 ciphertext (`ct_M`) length: the first bytes of a hybrid request's body. */
export const KEM_CIPHERTEXT_LEN = 1088;
/** The server's ML-KEM seed `d || z` (FIPS 203 `KeyGen_internal`). */
export const KEM_SEED_LEN = 64;
/** The ML-KEM encapsulation randomness `m` (FIPS 203 `Encaps_internal`). */
export const KEM_MESSAGE_LEN = 32;

/** X-Wing's domain label `\.//^\` (spec/hybrid.md H1). */
const XWING_LABEL = new Uint8Array([0x5c, 0x2e, 0x2f, 0x2f, 0x5e, 0x5c]);

/** An ML-KEM-768 key pair: `ek` (public, 1,184 bytes) and the expanded decapsulation key `dk`. */
export interface KemKeyPair {
  ek: Uint8Array;
  dk: Uint8Array;
}

/** The ML-KEM-768 key pair of a 64-byte seed `d || z`. */
export function kemKeyPair(seed: Uint8Array): KemKeyPair {
  if (seed.length !== KEM_SEED_LEN) fail('config', 'an ML-KEM seed is 64 bytes');
  const { publicKey, secretKey } = ml_kem768.keygen(seed);
  return { ek: publicKey, dk: secretKey };
}

/** `SHA3-256(ek_M)`, the hash a suite-2 certificate signs. */
export function kemHash(ek: Uint8Array): Uint8Array {
  return sha3(ek);
}

/**
 * Whether `ek` passes FIPS 203's encapsulation key check (length, and every
 * coefficient below q). The library's own check decides.
 */
export function isKemPublicKey(ek: Uint8Array): boolean {
  if (ek.length !== KEM_PUBLIC_LEN) return false;
  try {
    ml_kem768.prepare(ek).clean();
    return true;
  } catch {
    return false;
  }
}

/**
 * ML-KEM-768 encapsulation to `ek`: `(ct_M, ss_M)`. `m`, the 32-byte
 * randomness, is for deterministic tests only; by default the library
 * draws it from the platform's CSPRNG. A key that fails the modulus check
 * is `bad_certificate`.
 */
export function kemEncapsulate(ek: Uint8Array, m?: Uint8Array): { ct: Uint8Array; ss: Uint8Array } {
  if (ek.length !== KEM_PUBLIC_LEN) fail('bad_certificate', 'ML-KEM key length');
  let r: { cipherText: Uint8Array; sharedSecret: Uint8Array };
  try {
    r = m === undefined ? ml_kem768.encapsulate(ek) : ml_kem768.encapsulate(ek, m);
  } catch {
    fail('bad_certificate', 'ML-KEM key fails the modulus check');
  }
  // The library wipes its randomness after use: copy what is kept.
  return { ct: r.cipherText.slice(), ss: r.sharedSecret.slice() };
}

/**
 * ML-KEM-768 decapsulation. A ciphertext for another key gives an
 * unrelated secret (implicit rejection); a wrong length is `bad_ciphertext`.
 */
export function kemDecapsulate(ct: Uint8Array, dk: Uint8Array): Uint8Array {
  if (ct.length !== KEM_CIPHERTEXT_LEN) fail('bad_ciphertext');
  return ml_kem768.decapsulate(ct, dk).slice();
}

/** X-Wing's combiner: `SHA3-256(ss_M || ss_X || ct_X || pk_X || XWingLabel)` (spec/hybrid.md H1). */
export function xwingCombine(ssM: Uint8Array, ssX: Uint8Array, ctX: Uint8Array, pkX: Uint8Array): Uint8Array {
  return sha3(ssM, ssX, ctX, pkX, XWING_LABEL);
}

/**
 * X-Wing's seed expansion, used only to check the draft's test vectors:
 * `SHAKE-256(seed)` read for 96 bytes gives the ML-KEM seed (64) and the
 * X25519 secret (32). This protocol keeps the two keys separate (H1).
 */
export function xwingExpandSeed(seed: Uint8Array): { kemSeed: Uint8Array; x25519Secret: Uint8Array } {
  const out = shake256(seed, { dkLen: 96 });
  return { kemSeed: out.slice(0, 64), x25519Secret: out.slice(64, 96) };
}

/** `kid = SHA3-256(kex_public || kem_hash)[0..10]`, the key ID of a suite-2 certificate (H2). */
export function hybridKeyId(kexPublic: Uint8Array, kemHashBytes: Uint8Array): Uint8Array {
  return sha3(kexPublic, kemHashBytes).slice(0, KID_LEN);
}

/**
 * The client's hybrid agreement (H1): `ct_X` (its X25519 public key, the
 * cookie value), `ct_M` and the session key. `m`: deterministic
 * encapsulation for tests.
 */
export function hybridEncapsulate(
  clientSecret: Uint8Array,
  kexPublic: Uint8Array,
  ek: Uint8Array,
  m?: Uint8Array,
): { ctX: Uint8Array; ctM: Uint8Array; sessionKey: Uint8Array } {
  const ssX = x25519Shared(clientSecret, kexPublic);
  const ctX = x25519Public(clientSecret);
  const { ct, ss } = kemEncapsulate(ek, m);
  return { ctX, ctM: ct, sessionKey: xwingCombine(ss, ssX, ctX, kexPublic) };
}

/** The server's hybrid agreement (H3 step 3): all-zero X25519 is `small_order`. */
export function hybridDecapsulate(kexSecret: Uint8Array, kexPublic: Uint8Array, dk: Uint8Array, ctX: Uint8Array, ctM: Uint8Array): Uint8Array {
  const ssX = x25519Shared(kexSecret, ctX);
  const ssM = kemDecapsulate(ctM, dk);
  return xwingCombine(ssM, ssX, ctX, kexPublic);
}

/** `ct_M || stream`: the body (or decoded query) of a hybrid request. */
export function hybridBody(ctM: Uint8Array, stream: Uint8Array): Uint8Array {
  return concat(ctM, stream);
}
