/**
 * Suite-2 certificates and key texts (spec/hybrid.md H2, H4): the 150-byte
 * certificate whose signed part holds `kem_hash`, its `hc1 ` text, the
 * `hck1 ` encapsulation key text, lists that hold both suites and key
 * texts (`OPTIONS {mount}/pq`, the `hybrid_certs` of an `unknown-key`
 * problem), and the DNS forms: TXT at `_httpcrypt-pq.{host}` (a
 * certificate) and `_httpcrypt-kem.{host}` (the key text), and eleven AAAA
 * addresses at `_httpcrypt-pq.{host}`.
 */
import { b64uDecode, b64uEncode } from './b64u.js';
import { type CertVersion, type KeyCert, CERT_LEN, TEXT_PREFIX, certToText, decodeCert } from './cert.js';
import { aaaaAddresses, aaaaPayload } from './dns.js';
import { fail } from './errors.js';
import { KEM_PUBLIC_LEN, hybridKeyId, isKemPublicKey, kemHash } from './hybrid.js';
import { bytesEqual, concat, ed25519Public, ed25519Sign, ed25519VerifyStrict, signerId, utf8 } from './suite.js';

/** A suite-2 certificate's length. */
export const HYBRID_CERT_LEN = 150;
const SIGNED_LEN = 86;
const CONTEXT = utf8('httpcrypt-cert-v1');
/** The encapsulation key text's prefix. */
export const KEM_TEXT_PREFIX = 'hck1 ';

/** A decoded suite-2 certificate: a v1 certificate plus the signed `kem_hash`. */
export interface HybridCert {
  suite: 2;
  version: CertVersion;
  serial: number;
  notBefore: number;
  notAfter: number;
  kexPublic: Uint8Array;
  /** `SHA3-256(ek_M)`. */
  kemHash: Uint8Array;
  signer: Uint8Array;
  signature: Uint8Array;
}

/** A certificate of either suite. */
export type AnyCert = KeyCert | HybridCert;

/** Whether `c` is a suite-2 certificate. */
export function isHybridCert(c: AnyCert): c is HybridCert {
  return (c as { suite?: number }).suite === 2;
}

const u32 = (b: Uint8Array, i: number): number => ((b[i]! << 24) | (b[i + 1]! << 16) | (b[i + 2]! << 8) | b[i + 3]!) >>> 0;
function putU32(b: Uint8Array, i: number, v: number): void {
  b[i] = (v >>> 24) & 0xff;
  b[i + 1] = (v >>> 16) & 0xff;
  b[i + 2] = (v >>> 8) & 0xff;
  b[i + 3] = v & 0xff;
}

/** The 150-byte wire form. */
export function encodeHybridCert(c: HybridCert): Uint8Array {
  const b = new Uint8Array(HYBRID_CERT_LEN);
  b[0] = c.version;
  b[1] = 2;
  putU32(b, 2, c.serial);
  putU32(b, 6, c.notBefore);
  putU32(b, 10, c.notAfter);
  b.set(c.kexPublic, 14);
  b.set(c.kemHash, 46);
  b.set(c.signer, 78);
  b.set(c.signature, 86);
  return b;
}

/** Decodes a suite-2 certificate: length 150, version 1 or 2, suite 2 (`bad_certificate`); not the signature. */
export function decodeHybridCert(b: Uint8Array): HybridCert {
  const version = b[0];
  if (b.length !== HYBRID_CERT_LEN || (version !== 1 && version !== 2) || b[1] !== 2) fail('bad_certificate');
  return {
    suite: 2,
    version,
    serial: u32(b, 2),
    notBefore: u32(b, 6),
    notAfter: u32(b, 10),
    kexPublic: b.slice(14, 46),
    kemHash: b.slice(46, 78),
    signer: b.slice(78, 86),
    signature: b.slice(86, 150),
  };
}

/** Decodes a certificate of either suite by its suite byte; a length that does not match the suite is `bad_certificate`. */
export function decodeAnyCert(b: Uint8Array): AnyCert {
  if (b[1] === 2) return decodeHybridCert(b);
  if (b.length !== CERT_LEN) fail('bad_certificate', 'certificate length');
  return decodeCert(b);
}

/** Parses `hc1 {b64u(cert)}` of either suite. */
export function anyCertFromText(text: string): AnyCert {
  if (!text.startsWith(TEXT_PREFIX)) fail('bad_certificate', 'missing hc1 prefix');
  return decodeAnyCert(b64uDecode(text.slice(TEXT_PREFIX.length)));
}

/** `hc1 {b64u(cert)}` of a suite-2 certificate. */
export function hybridCertToText(c: HybridCert): string {
  return TEXT_PREFIX + b64uEncode(encodeHybridCert(c));
}

function signedMessage(bytes: Uint8Array): Uint8Array {
  return concat(CONTEXT, bytes.subarray(0, SIGNED_LEN));
}

/** Signs a suite-2 certificate for `kexPublic` and the ML-KEM key `ek` (server side; vectors and tests). */
export function signHybridCert(
  identitySeed: Uint8Array,
  serial: number,
  notBefore: number,
  notAfter: number,
  kexPublic: Uint8Array,
  ek: Uint8Array,
  version: CertVersion = 1,
): HybridCert {
  if (version !== 1 && version !== 2) fail('bad_certificate', `certificate version ${String(version)}`);
  const c: HybridCert = {
    suite: 2,
    version,
    serial,
    notBefore,
    notAfter,
    kexPublic,
    kemHash: kemHash(ek),
    signer: signerId(ed25519Public(identitySeed)),
    signature: new Uint8Array(64),
  };
  c.signature = ed25519Sign(identitySeed, signedMessage(encodeHybridCert(c)));
  return c;
}

/** Checks the signer ID and the strict Ed25519 signature over the suite byte and `kem_hash` too; else `bad_signature`. */
export function verifyHybridCert(c: HybridCert, identityPublic: Uint8Array): void {
  if (!bytesEqual(c.signer, signerId(identityPublic))) fail('bad_signature', 'signer ID');
  if (!ed25519VerifyStrict(c.signature, signedMessage(encodeHybridCert(c)), identityPublic)) fail('bad_signature');
}

/** The suite-2 key ID, naming the pair: `SHA3-256(kex_public || kem_hash)[0..10]`. */
export function hybridCertKid(c: HybridCert): Uint8Array {
  return hybridKeyId(c.kexPublic, c.kemHash);
}

/** `hck1 {b64u(ek_M)}`. */
export function formatKemText(ek: Uint8Array): string {
  return KEM_TEXT_PREFIX + b64uEncode(ek);
}

/**
 * Parses an encapsulation key text: the prefix and exactly 1,184 bytes
 * (`bad_certificate`; bad base64url `bad_base64`), FIPS 203's modulus check
 * (`bad_certificate`) and, given the certificate's `kem_hash`, that
 * `SHA3-256(ek_M)` equals it (`kem_mismatch`). Returns `ek_M`.
 */
export function parseKemText(text: string, expectedHash?: Uint8Array): Uint8Array {
  if (!text.startsWith(KEM_TEXT_PREFIX)) fail('bad_certificate', 'missing hck1 prefix');
  const ek = b64uDecode(text.slice(KEM_TEXT_PREFIX.length));
  if (ek.length !== KEM_PUBLIC_LEN) fail('bad_certificate', 'ML-KEM key length');
  if (!isKemPublicKey(ek)) fail('bad_certificate', 'ML-KEM key fails the modulus check');
  if (expectedHash !== undefined && !bytesEqual(kemHash(ek), expectedHash)) fail('kem_mismatch', 'the key text is not the certificate\'s ML-KEM key');
  return ek;
}

/** A list read by a suite-2 reader: certificates of both suites in list order, and the key texts' keys. */
export interface HybridCertList {
  certs: AnyCert[];
  /** `ek_M` of each `hck1 ` line, in order. */
  kemKeys: Uint8Array[];
}

/**
 * Parses a list that may hold both suites and `hck1 ` lines (H2): LF or
 * CRLF, blank lines skipped, every other line must parse.
 */
export function parseHybridCertList(body: Uint8Array | string): HybridCertList {
  let text: string;
  if (typeof body === 'string') text = body;
  else {
    try {
      text = new TextDecoder('utf-8', { fatal: true }).decode(body);
    } catch {
      fail('bad_certificate', 'certificate list is not UTF-8');
    }
  }
  const out: HybridCertList = { certs: [], kemKeys: [] };
  for (const raw of text.split('\n')) {
    const line = raw.endsWith('\r') ? raw.slice(0, -1) : raw;
    if (line.length === 0) continue;
    if (line.startsWith(KEM_TEXT_PREFIX)) out.kemKeys.push(parseKemText(line));
    else out.certs.push(anyCertFromText(line));
  }
  return out;
}

/** Formats a list: the certificates, then each distinct key text (LF line ends), as `OPTIONS {mount}/pq` answers. */
export function formatHybridCertList(certs: readonly AnyCert[], kemKeys: readonly Uint8Array[]): string {
  const lines = certs.map((c) => (isHybridCert(c) ? hybridCertToText(c) : certToText(c)));
  const seen = new Set<string>();
  for (const ek of kemKeys) {
    const t = formatKemText(ek);
    if (!seen.has(t)) lines.push(t);
    seen.add(t);
  }
  return lines.map((l) => l + '\n').join('');
}

/** The AAAA form of a suite-2 certificate (H4): eleven addresses at `_httpcrypt-pq.{host}`. */
export const HYBRID_AAAA_CHUNKS = 11;

/** The eleven AAAA addresses of a suite-2 certificate (padded to 154 bytes, chunks of 14, `fd`, order). */
export function formatHybridAaaa(c: HybridCert): Uint8Array[] {
  return aaaaAddresses(encodeHybridCert(c), HYBRID_AAAA_CHUNKS);
}

/** Reassembles a suite-2 certificate from its AAAA RRset in any order (exactly eleven, each order once, zero padding); else `bad_record`. */
export function parseHybridAaaa(addrs: readonly Uint8Array[]): HybridCert {
  return decodeHybridCert(aaaaPayload(addrs, HYBRID_AAAA_CHUNKS, HYBRID_CERT_LEN));
}

/** `_httpcrypt-pq.{host}`: owner of the suite-2 TXT and AAAA records (H4). */
export function hybridCertName(host: string): string {
  return `_httpcrypt-pq.${host.replace(/\.+$/, '')}`;
}

/** `_httpcrypt-kem.{host}`: owner of the key text TXT record (H4). */
export function kemName(host: string): string {
  return `_httpcrypt-kem.${host.replace(/\.+$/, '')}`;
}

function txtText(strings: readonly Uint8Array[]): string {
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(concat(...strings));
  } catch {
    fail('bad_record', 'TXT is not UTF-8');
  }
}

/** A suite-2 certificate from one TXT record at `_httpcrypt-pq.{host}` (its character-strings joined, as spec §6.1). */
export function parseHybridTxt(strings: readonly Uint8Array[]): HybridCert {
  const c = anyCertFromText(txtText(strings));
  if (!isHybridCert(c)) fail('bad_certificate', 'a suite-1 certificate where a suite-2 one belongs');
  return c;
}

/** The key text from its TXT record at `_httpcrypt-kem.{host}` (seven character-strings of at most 255), checked against `kem_hash` when given. */
export function parseKemTxt(strings: readonly Uint8Array[], expectedHash?: Uint8Array): Uint8Array {
  return parseKemText(txtText(strings), expectedHash);
}

/** The character-strings of the key text's TXT record (at most 255 bytes each). */
export function formatKemTxt(ek: Uint8Array): Uint8Array[] {
  const text = utf8(formatKemText(ek));
  const out: Uint8Array[] = [];
  for (let i = 0; i < text.length; i += 255) out.push(text.slice(i, i + 255));
  return out;
}
