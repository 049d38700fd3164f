/**
 * The outer message (spec §4.1, §4.2, §11): mount and nonce path, routing,
 * the cookie pair (format and the server's scan), the canonical request
 * head, the GET-form size rule, and problem documents.
 */
import { b64uDecode, b64uDecodeExact, b64uEncode, encodedLen, isB64uText } from './b64u.js';
import { COMPACT_SEGMENT_PREFIX, type Profile } from './compact.js';
import { fail } from './errors.js';
import { KID_LEN, NONCE_LEN, bytesEqual, randomBytes } from './suite.js';
import { SEALED_TICKET_LEN, SHORT_H_LEN } from './ticket.js';

export const NONCE_B64_LEN = 32;
export const ID_B64_LEN = 14;
export const PUBLIC_B64_LEN = 43;
export const TICKET_B64_LEN = 115;
/** Characters of a short ticket's `h`, the cookie value of spec §7.3 (before its pad). */
export const SHORT_B64_LEN = 22;
export const MAX_PAD = 16;
/** A client uses the GET form only while the request line stays below this (spec §4.1). */
export const GET_FORM_LIMIT = 2000;
export const OCTET_STREAM = 'application/octet-stream';
export const CERTS_TYPE = 'application/httpcrypt-certs';
export const PROBLEM_TYPE = 'application/problem+json';

/** Normalises a mount (spec §4.1, D5): empty or `/`-led without trailing `/`. */
export function normalizeMount(text: string): string {
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x20 || c === 0x7f || '?#% \t'.includes(text[i]!)) fail('bad_nonce_path', 'unusable mount');
  }
  let m = text.replace(/\/+$/, '');
  if (m !== '' && !m.startsWith('/')) m = '/' + m;
  return m;
}

/** The nonce segment: `b64u(n0)` (v1, 32 characters) or `2` + `b64u(n0)` (profile 2, 33; spec §4.5). */
export function nonceSegment(n0: Uint8Array, profile: Profile = 1): string {
  return (profile === 2 ? COMPACT_SEGMENT_PREFIX : '') + b64uEncode(n0);
}

/** `{mount}/{b64u(n0)}`, or `{mount}/2{b64u(n0)}` for profile 2. */
export function noncePath(mount: string, n0: Uint8Array, profile: Profile = 1): string {
  return `${mount}/${nonceSegment(n0, profile)}`;
}

/** `{mount}/{segment}?{b64u(stream)}`: the GET form's target. */
export function getTarget(mount: string, n0: Uint8Array, stream: Uint8Array, profile: Profile = 1): string {
  return `${noncePath(mount, n0, profile)}?${b64uEncode(stream)}`;
}

/** Whether a GET request line with a stream of this length stays below the limit. */
export function fitsGetForm(mount: string, streamLen: number, profile: Profile = 1): boolean {
  const segment = NONCE_B64_LEN + (profile === 2 ? 1 : 0);
  const line = 4 + mount.length + 1 + segment + 1 + encodedLen(streamLen) + 9;
  return line < GET_FORM_LIMIT;
}

export type Route =
  | { route: 'outside' }
  | { route: 'options' }
  | { route: 'method_not_allowed' }
  | { route: 'not_found' }
  | { route: 'post'; n0: Uint8Array; profile: Profile }
  | { route: 'get'; n0: Uint8Array; query: string; profile: Profile };

/** Exactly 32 canonical base64url characters naming a 24-byte nonce. */
export function parseNonce(text: string): Uint8Array {
  try {
    return b64uDecodeExact(text, NONCE_LEN);
  } catch {
    fail('bad_nonce_path');
  }
}

/**
 * The nonce segment after `{mount}/` (spec §11.1 step 3): 32 canonical
 * characters (v1) or `2` and 32 (profile 2); anything else `bad_nonce_path`.
 */
export function parseNonceSegment(segment: string): { n0: Uint8Array; profile: Profile } {
  if (segment.length === NONCE_B64_LEN) return { n0: parseNonce(segment), profile: 1 };
  if (segment.length === NONCE_B64_LEN + 1 && segment.startsWith(COMPACT_SEGMENT_PREFIX)) {
    return { n0: parseNonce(segment.slice(1)), profile: 2 };
  }
  fail('bad_nonce_path');
}

/** Routes an outer request (spec §11.1, D16, D17); no percent-decoding. */
export function route(method: string, target: string, mount: string): Route {
  const q = target.indexOf('?');
  const path = q < 0 ? target : target.slice(0, q);
  const query = q < 0 ? null : target.slice(q + 1);
  if (!path.startsWith(mount + '/')) return { route: 'outside' };
  const rest = path.slice(mount.length + 1);
  if (method === 'OPTIONS') return rest === '' ? { route: 'options' } : { route: 'not_found' };
  if (method !== 'POST' && method !== 'GET') return { route: 'method_not_allowed' };
  const { n0, profile } = parseNonceSegment(rest);
  if (method === 'POST') return { route: 'post', n0, profile };
  if (query === null) fail('bad_query');
  return { route: 'get', n0, query, profile };
}

/** Decodes a GET-form query (spec D8, D22). */
export function decodeQuery(query: string, maxBody: number): Uint8Array {
  if (Math.floor(query.length / 4) * 3 > maxBody) fail('body_too_large');
  try {
    return b64uDecode(query);
  } catch {
    fail('bad_query');
  }
}

const PAD_ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';

/** 0–`max` random base64url characters: 0–16 for v1 (spec §4.1), 0–7 for profile 2 (spec §4.5). */
export function randomPad(max: number = MAX_PAD): string {
  const m = Math.max(0, Math.min(MAX_PAD, Math.floor(max)));
  const b = randomBytes(MAX_PAD + 1);
  const n = b[0]! % (m + 1);
  let s = '';
  for (let i = 1; i <= n; i++) s += PAD_ALPHABET[b[i]! & 63]!;
  return s;
}

/** `{b64u(id)}{namePad}={b64u(value)}{valuePad}` (spec §4.1, §7.2, §7.3). */
export function formatCookie(id: Uint8Array, value: Uint8Array, namePad: string, valuePad: string): string {
  for (const pad of [namePad, valuePad]) {
    if (pad.length > MAX_PAD || !isB64uText(pad)) fail('bad_cookie', 'pad');
  }
  return `${b64uEncode(id)}${namePad}=${b64uEncode(value)}${valuePad}`;
}

export type IdKind = 'key' | 'ticket';
/** What the cookie presents: a public key, `ticket[10..]` of a v1 ticket, or a short ticket's `h` (spec §7.3). */
export type Credential =
  | { kind: 'key'; id: Uint8Array; value: Uint8Array }
  | { kind: 'ticket'; id: Uint8Array; value: Uint8Array }
  | { kind: 'short_ticket'; id: Uint8Array; value: Uint8Array };

const trimOws = (s: string): string => s.replace(/^[ \t]+|[ \t]+$/g, '');

/** Whether a pair looks like an HTTPCrypt cookie. A short ticket's 22–38 characters are not in the shape (spec §7.3): `no_cookie` stays the contract's. */
function hasShape(name: string, value: string): boolean {
  const nameOk = name.length >= ID_B64_LEN && name.length <= ID_B64_LEN + MAX_PAD && isB64uText(name);
  const valueOk =
    ((value.length >= PUBLIC_B64_LEN && value.length <= PUBLIC_B64_LEN + MAX_PAD) ||
      (value.length >= TICKET_B64_LEN && value.length <= TICKET_B64_LEN + MAX_PAD)) &&
    isB64uText(value);
  return nameOk && valueOk;
}

function stripPad(text: string, n: number): Uint8Array {
  const len = encodedLen(n);
  if (text.length < len || text.length > len + MAX_PAD || !isB64uText(text.slice(len))) fail('bad_cookie');
  try {
    return b64uDecodeExact(text.slice(0, len), n);
  } catch {
    fail('bad_cookie');
  }
}

/**
 * The server's cookie scan (spec §11.3): the first pair whose 14-character
 * name prefix is a known ID is used and must be well formed (`bad_cookie`);
 * none: `unknown_key` if a pair has the HTTPCrypt shape, else `no_cookie`.
 * Under a ticket ID, a value of at most 38 characters is a short ticket
 * (spec §7.3), a longer one a v1 ticket.
 */
export function scanCookies(fields: readonly string[], lookup: (id: Uint8Array) => IdKind | null): Credential {
  let shaped = false;
  for (const field of fields) {
    for (const raw of field.split(';')) {
      const pair = trimOws(raw);
      const eq = pair.indexOf('=');
      if (eq < 0) continue;
      const name = trimOws(pair.slice(0, eq));
      const value = trimOws(pair.slice(eq + 1));
      shaped ||= hasShape(name, value);
      if (name.length < ID_B64_LEN) continue;
      let id: Uint8Array;
      try {
        id = b64uDecodeExact(name.slice(0, ID_B64_LEN), KID_LEN);
      } catch {
        continue;
      }
      const kind = lookup(id);
      if (kind === null) continue;
      const namePad = name.slice(ID_B64_LEN);
      if (namePad.length > MAX_PAD || !isB64uText(namePad)) fail('bad_cookie');
      if (kind === 'key') return { kind, id, value: stripPad(value, 32) };
      // The lengths of the two ticket forms (22–38 and 115–131 characters) do not overlap.
      if (value.length <= SHORT_B64_LEN + MAX_PAD) return { kind: 'short_ticket', id, value: stripPad(value, SHORT_H_LEN) };
      return { kind, id, value: stripPad(value, SEALED_TICKET_LEN) };
    }
  }
  fail(shaped ? 'unknown_key' : 'no_cookie');
}

/** Looks `id` up in a list of `[id, kind]`. */
export function idLookup(ids: ReadonlyArray<[Uint8Array, IdKind]>): (id: Uint8Array) => IdKind | null {
  return (id) => ids.find(([x]) => bytesEqual(x, id))?.[1] ?? null;
}

/** The complete outer request head in the canonical layout (spec §4.1, D9). */
export function formatOuterRequestHead(form: 'post' | 'get', target: string, host: string, cookie: string, bodyLen: number): string {
  let s = `${form === 'post' ? 'POST' : 'GET'} ${target} HTTP/1.1\r\nHost: ${host}\r\nCookie: ${cookie}\r\n`;
  if (form === 'post') s += `Content-Type: ${OCTET_STREAM}\r\n`;
  if (form === 'post') s += `Content-Length: ${bodyLen}\r\n`;
  return s + '\r\n';
}

/** An RFC 9457 problem document as far as the protocol uses it. */
export interface ProblemDoc {
  type: string;
  status: number;
  title?: string;
  certs: string[];
  /** `urn:httpcrypt:unknown-key` of a server with suite 2: its suite-2 certificates (spec/hybrid.md H3). */
  hybridCerts: string[];
  /** `urn:httpcrypt:admission`: the cookie (base64url) and the puzzle difficulty (spec §14.4). */
  admit?: string;
  difficulty?: number;
  /** `urn:httpcrypt:busy`: seconds to wait. */
  retryAfter?: number;
}

/** Parses a problem document; `null` if it is not one. Unknown members are ignored. */
export function parseProblem(body: Uint8Array | string): ProblemDoc | null {
  try {
    const text = typeof body === 'string' ? body : new TextDecoder().decode(body);
    const v: unknown = JSON.parse(text);
    if (typeof v !== 'object' || v === null) return null;
    const o = v as Record<string, unknown>;
    if (typeof o['type'] !== 'string') return null;
    const certs = Array.isArray(o['certs']) ? o['certs'].filter((x): x is string => typeof x === 'string') : [];
    const hybridCerts = Array.isArray(o['hybrid_certs']) ? o['hybrid_certs'].filter((x): x is string => typeof x === 'string') : [];
    const doc: ProblemDoc = { type: o['type'], status: typeof o['status'] === 'number' ? o['status'] : 0, certs, hybridCerts };
    if (typeof o['title'] === 'string') doc.title = o['title'];
    if (typeof o['admit'] === 'string') doc.admit = o['admit'];
    if (typeof o['difficulty'] === 'number') doc.difficulty = o['difficulty'];
    if (typeof o['retry_after'] === 'number') doc.retryAfter = o['retry_after'];
    return doc;
  } catch {
    return null;
  }
}
