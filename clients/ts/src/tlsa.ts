/**
 * The TLSA form of a key certificate (spec §6.3, D24): an X.509 v3
 * certificate of the X25519 key, signed with Ed25519 by the identity key,
 * in a `3 0 0` TLSA record. A strict DER subset is written and read here:
 * only what this one certificate shape needs, with DER's canonical-form
 * rules (minimal lengths and integers, no explicit DEFAULT, DER booleans).
 */
import { b64uEncode } from './b64u.js';
import { fail } from './errors.js';
import { concat, ed25519Public, ed25519Sign, ed25519VerifyStrict, keyId, signerId, utf8 } from './suite.js';

export const TLSA_MAX_DER = 2048;
const OID_ED25519 = Uint8Array.of(0x2b, 0x65, 0x70);
const OID_X25519 = Uint8Array.of(0x2b, 0x65, 0x6e);
const OID_CN = Uint8Array.of(0x55, 0x04, 0x03);
const OID_KEY_USAGE = Uint8Array.of(0x55, 0x1d, 0x0f);

// ---- writing ----

function tlv(tag: number, ...content: Uint8Array[]): Uint8Array {
  const body = concat(...content);
  const n = body.length;
  let len: number[];
  if (n < 0x80) len = [n];
  else {
    const bytes: number[] = [];
    for (let v = n; v > 0; v = Math.floor(v / 256)) bytes.unshift(v & 0xff);
    len = [0x80 | bytes.length, ...bytes];
  }
  return concat(Uint8Array.of(tag, ...len), body);
}

function derUint(v: number): Uint8Array {
  const bytes: number[] = [];
  for (let x = v; x > 0; x = Math.floor(x / 256)) bytes.unshift(x & 0xff);
  if (bytes.length === 0 || bytes[0]! & 0x80) bytes.unshift(0);
  return tlv(0x02, Uint8Array.from(bytes));
}

function derTime(unix: number): Uint8Array {
  const d = new Date(unix * 1000);
  const p = (n: number, w = 2): string => String(n).padStart(w, '0');
  const rest = `${p(d.getUTCMonth() + 1)}${p(d.getUTCDate())}${p(d.getUTCHours())}${p(d.getUTCMinutes())}${p(d.getUTCSeconds())}Z`;
  const y = d.getUTCFullYear();
  // RFC 5280 §4.1.2.5: UTCTime through 2049, GeneralizedTime from 2050.
  return y < 2050 ? tlv(0x17, utf8(p(y % 100) + rest)) : tlv(0x18, utf8(p(y, 4) + rest));
}

const cnName = (cn: string): Uint8Array => tlv(0x30, tlv(0x31, tlv(0x30, tlv(0x06, OID_CN), tlv(0x0c, utf8(cn)))));
const algId = (oid: Uint8Array): Uint8Array => tlv(0x30, tlv(0x06, oid));
const bitString = (b: Uint8Array): Uint8Array => tlv(0x03, Uint8Array.of(0), b);

/** The DER X.509 certificate of spec §6.3 (deterministic: Ed25519 is). */
export function encodeTlsaCert(identitySeed: Uint8Array, serial: number, notBefore: number, notAfter: number, kexPublic: Uint8Array): Uint8Array {
  const idPub = ed25519Public(identitySeed);
  const keyUsage = tlv(0x03, Uint8Array.of(0x03, 0x08)); // keyAgreement only
  const tbs = tlv(
    0x30,
    tlv(0xa0, derUint(2)),
    derUint(serial),
    algId(OID_ED25519),
    cnName(`httpcrypt identity ${b64uEncode(signerId(idPub))}`),
    tlv(0x30, derTime(notBefore), derTime(notAfter)),
    cnName(`httpcrypt kex ${b64uEncode(keyId(kexPublic))}`),
    tlv(0x30, algId(OID_X25519), bitString(kexPublic)),
    tlv(0xa3, tlv(0x30, tlv(0x30, tlv(0x06, OID_KEY_USAGE), tlv(0x01, Uint8Array.of(0xff)), tlv(0x04, keyUsage)))),
  );
  return tlv(0x30, tbs, algId(OID_ED25519), bitString(ed25519Sign(identitySeed, tbs)));
}

/** The zone-file form `3 0 0 HEX`. */
export function formatTlsaRdata(der: Uint8Array): string {
  let hex = '';
  for (const b of der) hex += b.toString(16).padStart(2, '0').toUpperCase();
  return `3 0 0 ${hex}`;
}

// ---- reading ----

interface Tlv {
  tag: number;
  /** Whole element. */
  raw: Uint8Array;
  /** Content. */
  body: Uint8Array;
}

const bad = (why: string): never => fail('bad_certificate', why);

/** Reads one element at `pos` with DER length rules. */
function readTlv(b: Uint8Array, pos: number): [Tlv, number] {
  if (pos + 2 > b.length) bad('truncated');
  const tag = b[pos]!;
  if ((tag & 0x1f) === 0x1f) bad('high tag number');
  let len = b[pos + 1]!;
  let p = pos + 2;
  if (len & 0x80) {
    const n = len & 0x7f;
    if (n === 0 || n > 3) bad('length form');
    if (p + n > b.length) bad('truncated');
    if (b[p] === 0) bad('non-minimal length');
    len = 0;
    for (let i = 0; i < n; i++) len = len * 256 + b[p + i]!;
    if (len < 0x80) bad('non-minimal length');
    p += n;
  }
  if (p + len > b.length) bad('truncated');
  return [{ tag, raw: b.subarray(pos, p + len), body: b.subarray(p, p + len) }, p + len];
}

/** The children of a constructed element. */
function children(t: Tlv): Tlv[] {
  const out: Tlv[] = [];
  for (let p = 0; p < t.body.length; ) {
    const [c, next] = readTlv(t.body, p);
    out.push(c);
    p = next;
  }
  return out;
}

function expect(t: Tlv | undefined, tag: number, what: string): Tlv {
  if (t === undefined || t.tag !== tag) bad(what);
  return t as Tlv;
}

const same = (a: Uint8Array, b: Uint8Array): boolean => a.length === b.length && a.every((x, i) => x === b[i]);

/** An AlgorithmIdentifier that must be `oid` with absent parameters. */
function isAlg(t: Tlv, oid: Uint8Array): boolean {
  if (t.tag !== 0x30) return false;
  const c = children(t);
  return c.length === 1 && c[0]!.tag === 0x06 && same(c[0]!.body, oid);
}

/** A DER INTEGER as a u32 serial: minimal, non-negative, at most 32 bits. */
function readSerial(t: Tlv): number {
  const b = t.body;
  if (b.length === 0) bad('empty integer');
  if (b.length > 1 && ((b[0] === 0 && !(b[1]! & 0x80)) || (b[0] === 0xff && b[1]! & 0x80))) bad('non-minimal integer');
  if (b[0]! & 0x80) bad('negative serial');
  const v = b[0] === 0 && b.length > 1 ? b.subarray(1) : b;
  if (v.length > 4) bad('serial above 32 bits');
  let n = 0;
  for (const x of v) n = n * 256 + x;
  return n;
}

function readTime(t: Tlv): number {
  const s = new TextDecoder().decode(t.body);
  let m: RegExpExecArray | null;
  let year: number;
  if (t.tag === 0x17 && (m = /^(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})Z$/.exec(s))) {
    const yy = Number(m[1]);
    year = yy >= 50 ? 1900 + yy : 2000 + yy;
  } else if (t.tag === 0x18 && (m = /^(\d{4})(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})Z$/.exec(s))) {
    year = Number(m[1]);
  } else {
    return bad('time');
  }
  const [mo, d, h, mi, se] = [2, 3, 4, 5, 6].map((i) => Number(m![i]));
  const ms = Date.UTC(year, mo! - 1, d!, h!, mi!, se!);
  const back = new Date(ms);
  if (back.getUTCMonth() !== mo! - 1 || back.getUTCDate() !== d! || h! > 23 || mi! > 59 || se! > 59) bad('time');
  const unix = ms / 1000;
  if (unix < 0 || unix > 0xffffffff) bad('time outside the u32 range');
  return unix;
}

/** Walks every element below a constructed one, so bad lengths anywhere are refused. */
function checkTree(t: Tlv): void {
  if (t.tag & 0x20) for (const c of children(t)) checkTree(c);
}

/** What a TLSA record states: the key, serial and validity. */
export interface TlsaKey {
  serial: number;
  notBefore: number;
  notAfter: number;
  kexPublic: Uint8Array;
}

/**
 * Reads a TLSA record (spec §6.3): anything but `3 0 0`, or data above
 * 2048 bytes, is `bad_record`; a certificate that breaks the shape or DER
 * is `bad_certificate`; with `identityPublic` (authenticated mode) the
 * signature over the TBSCertificate must verify (`bad_signature`).
 */
export function readTlsa(usage: number, selector: number, matching: number, data: Uint8Array, identityPublic?: Uint8Array): TlsaKey {
  if (usage !== 3 || selector !== 0 || matching !== 0) fail('bad_record', 'not a 3 0 0 TLSA record');
  if (data.length > TLSA_MAX_DER) fail('bad_record', 'TLSA data above 2048 bytes');
  const [cert, end] = readTlv(data, 0);
  if (end !== data.length) bad('trailing bytes');
  expect(cert, 0x30, 'certificate');
  checkTree(cert);
  const [tbs, sigAlg, sig, ...extra] = children(cert);
  if (extra.length > 0 || tbs === undefined || sigAlg === undefined || sig === undefined) bad('certificate shape');
  expect(tbs, 0x30, 'tbsCertificate');
  const f = children(tbs!);
  let i = 0;
  const version = expect(f[i++], 0xa0, 'version (v3 required)');
  const vc = children(version);
  if (vc.length !== 1 || vc[0]!.tag !== 0x02 || !same(vc[0]!.body, Uint8Array.of(2))) bad('version');
  const serial = readSerial(expect(f[i++], 0x02, 'serial'));
  const innerAlg = expect(f[i++], 0x30, 'signature algorithm');
  expect(f[i++], 0x30, 'issuer');
  const validity = children(expect(f[i++], 0x30, 'validity'));
  if (validity.length !== 2) bad('validity');
  const notBefore = readTime(validity[0]!);
  const notAfter = readTime(validity[1]!);
  expect(f[i++], 0x30, 'subject');
  const spki = children(expect(f[i++], 0x30, 'subjectPublicKeyInfo'));
  if (spki.length !== 2 || !isAlg(spki[0]!, OID_X25519)) bad('not an X25519 key');
  const keyBits = expect(spki[1], 0x03, 'subjectPublicKey');
  if (keyBits.body.length !== 33 || keyBits.body[0] !== 0) bad('X25519 key length');
  if (f[i]?.tag === 0x81) i++;
  if (f[i]?.tag === 0x82) i++;
  if (f[i]?.tag === 0xa3) {
    const exts = children(f[i++]!);
    if (exts.length !== 1 || exts[0]!.tag !== 0x30) bad('extensions');
    for (const ext of children(exts[0]!)) {
      const e = children(expect(ext, 0x30, 'extension'));
      expect(e[0], 0x06, 'extension id');
      if (e.length === 3) {
        const crit = expect(e[1], 0x01, 'critical');
        // DER: BOOLEAN is 0xFF for TRUE; FALSE is the DEFAULT and must be left out.
        if (crit.body.length !== 1 || crit.body[0] !== 0xff) bad('critical FALSE written out, or not a DER boolean');
        expect(e[2], 0x04, 'extnValue');
      } else if (e.length === 2) {
        expect(e[1], 0x04, 'extnValue');
      } else bad('extension shape');
    }
  }
  if (i !== f.length) bad('unexpected tbsCertificate field');
  if (!isAlg(innerAlg, OID_ED25519) || !isAlg(sigAlg!, OID_ED25519) || !same(innerAlg.raw, sigAlg!.raw)) bad('signature algorithm is not Ed25519');
  expect(sig, 0x03, 'signature');
  if (sig!.body.length !== 65 || sig!.body[0] !== 0) bad('signature length');
  if (identityPublic !== undefined && !ed25519VerifyStrict(sig!.body.subarray(1), tbs!.raw, identityPublic)) {
    fail('bad_signature', 'TLSA certificate signature');
  }
  return { serial, notBefore, notAfter, kexPublic: keyBits.body.slice(1) };
}
