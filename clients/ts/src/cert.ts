/**
 * Key certificates (spec §5): the 118-byte statement "this X25519 key is
 * mine from not_before to not_after", its text form `hc1 …`, strict
 * verification under a pinned identity, the choice rule, and the
 * `application/httpcrypt-certs` list.
 */
import { b64uDecode, b64uEncode } from './b64u.js';
import { fail } from './errors.js';
import { bytesEqual, concat, ed25519Public, ed25519Sign, ed25519VerifyStrict, keyId, signerId, utf8 } from './suite.js';

export const CERT_LEN = 118;
const SIGNED_LEN = 54;
const CONTEXT = utf8('httpcrypt-cert-v1');
export const TEXT_PREFIX = 'hc1 ';

/**
 * The certificate's version byte (spec §5): 1, or 2 for a key that also
 * takes profile-2 (compact) requests (spec §4.5).
 */
export type CertVersion = 1 | 2;

/** A decoded key certificate. */
export interface KeyCert {
  /** Absent means 1 (certificates made before profile 2 existed). */
  version?: CertVersion;
  serial: number;
  notBefore: number;
  notAfter: number;
  kexPublic: Uint8Array;
  signer: Uint8Array;
  signature: Uint8Array;
}

const u32 = (b: Uint8Array, i: number): number => ((b[i]! << 24) | (b[i + 1]! << 16) | (b[i + 2]! << 8) | b[i + 3]!) >>> 0;
function putU32(b: Uint8Array, i: number, v: number): void {
  b[i] = (v >>> 24) & 0xff;
  b[i + 1] = (v >>> 16) & 0xff;
  b[i + 2] = (v >>> 8) & 0xff;
  b[i + 3] = v & 0xff;
}

/** The 118-byte wire form. */
export function encodeCert(c: KeyCert): Uint8Array {
  const b = new Uint8Array(CERT_LEN);
  b[0] = certVersion(c);
  b[1] = 1;
  putU32(b, 2, c.serial);
  putU32(b, 6, c.notBefore);
  putU32(b, 10, c.notAfter);
  b.set(c.kexPublic, 14);
  b.set(c.signer, 46);
  b.set(c.signature, 54);
  return b;
}

/** The version byte of `c` (1 when the field is absent). */
export function certVersion(c: { version?: CertVersion }): CertVersion {
  return c.version ?? 1;
}

/** Decodes the wire form: length, version 1 or 2 and suite (`bad_certificate`); not the signature. */
export function decodeCert(b: Uint8Array): KeyCert {
  const version = b[0];
  if (b.length !== CERT_LEN || (version !== 1 && version !== 2) || b[1] !== 1) fail('bad_certificate');
  return {
    version,
    serial: u32(b, 2),
    notBefore: u32(b, 6),
    notAfter: u32(b, 10),
    kexPublic: b.slice(14, 46),
    signer: b.slice(46, 54),
    signature: b.slice(54, 118),
  };
}

/** Signs a certificate (server side; the vectors and tests use it). Version 2 announces profile 2 (spec §4.5). */
export function signCert(
  identitySeed: Uint8Array,
  serial: number,
  notBefore: number,
  notAfter: number,
  kexPublic: Uint8Array,
  version: CertVersion = 1,
): KeyCert {
  if (version !== 1 && version !== 2) fail('bad_certificate', `certificate version ${String(version)}`);
  const c: KeyCert = {
    version,
    serial,
    notBefore,
    notAfter,
    kexPublic,
    signer: signerId(ed25519Public(identitySeed)),
    signature: new Uint8Array(64),
  };
  c.signature = ed25519Sign(identitySeed, signedMessage(encodeCert(c)));
  return c;
}

function signedMessage(bytes: Uint8Array): Uint8Array {
  return concat(CONTEXT, bytes.subarray(0, SIGNED_LEN));
}

/** Checks the signer ID and the strict Ed25519 signature; else `bad_signature`. */
export function verifyCert(c: KeyCert, identityPublic: Uint8Array): void {
  if (!bytesEqual(c.signer, signerId(identityPublic))) fail('bad_signature', 'signer ID');
  if (!ed25519VerifyStrict(c.signature, signedMessage(encodeCert(c)), identityPublic)) fail('bad_signature');
}

/** The key ID of the certified key. */
export function certKid(c: KeyCert): Uint8Array {
  return keyId(c.kexPublic);
}

/** `not_before <= now <= not_after` (both ends included). */
export function isValidAt(c: { notBefore: number; notAfter: number }, now: number): boolean {
  return c.notBefore <= now && now <= c.notAfter;
}

/** `hc1 {b64u(cert)}`. */
export function certToText(c: KeyCert): string {
  return TEXT_PREFIX + b64uEncode(encodeCert(c));
}

/** Parses the text form exactly (no surrounding whitespace). */
export function certFromText(text: string): KeyCert {
  if (!text.startsWith(TEXT_PREFIX)) fail('bad_certificate', 'missing hc1 prefix');
  return decodeCert(b64uDecode(text.slice(TEXT_PREFIX.length)));
}

/**
 * The certificate to use at `now`: valid, verifying under `identity` when
 * given (authenticated mode), highest serial, later `not_before` on ties.
 * None: `bad_signature` if some valid one failed verification, else `not_valid`.
 * `verify`: the suite's check (suite 2 signs more bytes, spec/hybrid.md H2).
 */
export function chooseCert<C extends KeyCert>(certs: readonly C[], now: number, identity?: Uint8Array, verify: (c: C, id: Uint8Array) => void = verifyCert): C {
  let best: C | null = null;
  let sawBad = false;
  for (const c of certs) {
    if (!isValidAt(c, now)) continue;
    if (identity !== undefined) {
      try {
        verify(c, identity);
      } catch {
        sawBad = true;
        continue;
      }
    }
    if (best === null || c.serial > best.serial || (c.serial === best.serial && c.notBefore > best.notBefore)) best = c;
  }
  if (best === null) fail(sawBad ? 'bad_signature' : 'not_valid', sawBad ? 'the certificates are not signed by the pinned identity' : 'no certificate is valid now');
  return best;
}

/** Formats an `application/httpcrypt-certs` body (LF line ends). */
export function formatCertList(certs: readonly KeyCert[]): string {
  return certs.map((c) => certToText(c) + '\n').join('');
}

/** Parses an `application/httpcrypt-certs` body: LF or CRLF, blank lines skipped, every other line a certificate. */
export function parseCertList(body: Uint8Array | string): KeyCert[] {
  let text: string;
  if (typeof body === 'string') text = body;
  else {
    try {
      text = new TextDecoder('utf-8', { fatal: true }).decode(body);
    } catch {
      fail('bad_certificate', 'certificate list is not UTF-8');
    }
  }
  return text
    .split('\n')
    .map((l) => (l.endsWith('\r') ? l.slice(0, -1) : l))
    .filter((l) => l.length > 0)
    .map(certFromText);
}
