/**
 * A minimal server side of one exchange, without IO (spec §11.1 order):
 * route, Host, nonce path, body/query, cookie, key agreement or ticket;
 * then the stream and the inner request. The client package carries it
 * for the shared vectors (`server_request`, `service_request`,
 * `exchange`) and for tests that play both ends in memory; it is not a
 * production server. Both profiles: a `2…` nonce segment is profile 2
 * (spec §4.5), whose record 0 is bound to the outer `Host` parsed here and
 * whose response body is `r || stream`. Suite 2 (spec/hybrid.md H3): a
 * cookie naming a suite-2 key ID reads `ct_M` from the head of the body or
 * query and agrees the X-Wing key; its tickets resume like v1 ones.
 * Short tickets (spec §7.3): a ticket key that came with a kex key (v1 or
 * suite 2) resolves `(tid, h)` to that key's session under `k'`.
 */
import { type KeyCert, isValidAt } from './cert.js';
import { MAX_BOUND_HOST, type Profile, RESPONSE_RANDOM_LEN } from './compact.js';
import { HttpCryptError, fail } from './errors.js';
import { DEFAULT_INNER_LIMITS, type Field, InnerDecoder, type RequestHead, decodeAll, fromLatin1 } from './inner.js';
import { decodeQuery, parseNonceSegment, route, scanCookies, type Credential, type IdKind } from './outer.js';
import { Opener, Sealer, openAll, sealAll, DEFAULT_MAX_RECORD } from './stream.js';
import { NONCE_LEN, bytesEqual, keyId, sessionKey } from './suite.js';
import { openTicket, shortTicketKey } from './ticket.js';
import { KEM_CIPHERTEXT_LEN, type KemKeyPair, hybridDecapsulate, kemHash, kemKeyPair } from './hybrid.js';
import { type HybridCert, hybridCertKid } from './hybridcert.js';

export interface ServerKey {
  secret: Uint8Array;
  cert: KeyCert;
  kid: Uint8Array;
}
/** A suite-2 key (spec/hybrid.md H3): the kex key, the ML-KEM key pair, their certificate and key IDs. */
export interface ServerHybridKey {
  secret: Uint8Array;
  kem: KemKeyPair;
  cert: HybridCert;
  /** The suite-2 key ID, `SHA3-256(kex_public || kem_hash)[0..10]`. */
  kid: Uint8Array;
  /** The v1 key ID of the same kex key: a fresh-key cookie naming it, with no v1 key held, is `hybrid_required`. */
  v1Kid: Uint8Array;
}
export interface ServerTicketKey {
  tid: Uint8Array;
  key: Uint8Array;
  expires: number;
  /**
   * The key ID of the kex key (v1 or suite 2) this ticket key came with: short tickets under it
   * run under that key (spec §7.3). Absent: the ticket key takes v1 tickets only.
   */
  kid?: Uint8Array;
}
export interface ServerConfig {
  keys: ServerKey[];
  /** Suite-2 keys (absent: none, a v1-only server). */
  hybridKeys?: ServerHybridKey[];
  ticketKeys: ServerTicketKey[];
  mount: string;
  maxBody: number;
}

/** The outer request fields the server looks at. */
export interface OuterRequest {
  method: string;
  target: string;
  host: string | null;
  cookies: string[];
  contentLength: number | null;
  body: Uint8Array;
  /** Every outer field, in order, named as sent. */
  fields: Field[];
}

/** Parses raw HTTP/1.1 request bytes (Content-Length framing; the rest is the body). */
export function parseOuterRequest(bytes: Uint8Array): OuterRequest {
  let end = -1;
  for (let i = 0; i + 3 < bytes.length; i++) {
    if (bytes[i] === 13 && bytes[i + 1] === 10 && bytes[i + 2] === 13 && bytes[i + 3] === 10) {
      end = i + 4;
      break;
    }
  }
  if (end < 0) fail('truncated', 'no outer head');
  const lines = fromLatin1(bytes.subarray(0, end - 4)).split('\r\n');
  const m = /^(\S+) (\S+) HTTP\/1\.[01]$/.exec(lines[0]!);
  if (!m) fail('truncated', 'outer request line');
  const req: OuterRequest = { method: m[1]!, target: m[2]!, host: null, cookies: [], contentLength: null, body: bytes.slice(end), fields: [] };
  for (const line of lines.slice(1)) {
    const c = line.indexOf(':');
    if (c <= 0) continue;
    const name = line.slice(0, c).toLowerCase();
    const value = line.slice(c + 1).trim();
    req.fields.push([line.slice(0, c), value]);
    if (name === 'host' && req.host === null) req.host = value;
    else if (name === 'cookie') req.cookies.push(value);
    else if (name === 'content-length' && req.contentLength === null && /^\d+$/.test(value)) req.contentLength = Number(value);
  }
  return req;
}

/** A request whose key agreement succeeded. */
export interface Accepted {
  kid: Uint8Array;
  n0: Uint8Array;
  sessionKey: Uint8Array;
  queryStream: Uint8Array | null;
  credential: Credential;
  /** 1 (v1) or 2 (compact): told apart by the nonce segment. */
  profile: Profile;
  /** The outer `Host` value as parsed (profile 2 binds it). */
  host: string;
  /** 2 for a hybrid fresh-key request or a ticket of a hybrid session, else 1. */
  suite: 1 | 2;
  /** Where the sealed stream starts in a POST body: after `ct_M` (1,088) in a hybrid fresh-key request, else 0. */
  streamOffset: number;
}

export type AcceptResult = { kind: 'outside' | 'options' | 'method_not_allowed' | 'not_found' } | { kind: 'request'; accepted: Accepted };

function findKey(cfg: ServerConfig, id: Uint8Array, now: number): ServerKey | undefined {
  return cfg.keys.find((k) => now <= k.cert.notAfter && bytesEqual(k.kid, id));
}
function findHybridKey(cfg: ServerConfig, id: Uint8Array, now: number): ServerHybridKey | undefined {
  return (cfg.hybridKeys ?? []).find((k) => now <= k.cert.notAfter && bytesEqual(k.kid, id));
}
/** A held suite-2 kex key named by its v1 key ID (no v1 key has that ID). */
function classicalOfHybrid(cfg: ServerConfig, id: Uint8Array, now: number): ServerHybridKey | undefined {
  return (cfg.hybridKeys ?? []).find((k) => now <= k.cert.notAfter && bytesEqual(k.v1Kid, id));
}
function findTicketKey(cfg: ServerConfig, id: Uint8Array, now: number): ServerTicketKey | undefined {
  return cfg.ticketKeys.find((k) => now <= k.expires && bytesEqual(k.tid, id));
}

/** What `id` names at `now`: a kex key (either suite, or the v1 ID of a suite-2 one), a ticket key, or nothing. */
export function lookupId(cfg: ServerConfig, now: number): (id: Uint8Array) => IdKind | null {
  return (id) => (findKey(cfg, id, now) || findHybridKey(cfg, id, now) || classicalOfHybrid(cfg, id, now) ? 'key' : findTicketKey(cfg, id, now) ? 'ticket' : null);
}

/**
 * The session of the short ticket `(tid, h)` at `now` (spec §7.3): the ticket key must be
 * unexpired and have come with a kex key that is still held; any failure is `unknown_key`.
 */
export function openShortTicket(cfg: ServerConfig, tid: Uint8Array, h: Uint8Array, now: number): { kid: Uint8Array; sessionKey: Uint8Array; suite: 1 | 2 } {
  const tk = findTicketKey(cfg, tid, now) ?? fail('unknown_key');
  const kid = tk.kid ?? fail('unknown_key', 'a ticket key that came with no kex key takes v1 tickets only');
  const suite = findKey(cfg, kid, now) ? 1 : findHybridKey(cfg, kid, now) ? 2 : fail('unknown_key', 'the kex key of the short ticket is gone');
  return { kid, sessionKey: shortTicketKey(tk.tid, tk.key, kid, h), suite };
}

/** The unexpired ticket key that came with the kex key `kid`: the one short tickets of its sessions are issued under. */
export function ticketKeyFor(cfg: ServerConfig, kid: Uint8Array, now: number): ServerTicketKey | undefined {
  return cfg.ticketKeys.find((k) => now <= k.expires && k.kid !== undefined && bytesEqual(k.kid, kid));
}

/** Judges an outer request in the order of spec §11.1. */
export function accept(cfg: ServerConfig, req: OuterRequest, now: number): AcceptResult {
  let r: ReturnType<typeof route> | null = null;
  let routeError: unknown = null;
  try {
    r = route(req.method, req.target, cfg.mount);
  } catch (e) {
    routeError = e;
  }
  if (r !== null && (r.route === 'outside' || r.route === 'options' || r.route === 'method_not_allowed' || r.route === 'not_found')) {
    return { kind: r.route };
  }
  if (req.host === null || req.host === '') fail('bad_host');
  const host = req.host;
  if (routeError !== null) {
    // A GET without `?` passed the nonce path (step 3) before failing step 4: a profile-2 one
    // still has to be able to bind its Host first.
    if (routeError instanceof HttpCryptError && routeError.code === 'bad_query' && host.length > MAX_BOUND_HOST) {
      if (parseNonceSegment(req.target.slice(cfg.mount.length + 1)).profile === 2) fail('bad_host');
    }
    throw routeError;
  }
  if (r === null) fail('bad_nonce_path');
  // Spec §11.1 step 3: a profile-2 request must be able to bind its Host.
  if ((r.route === 'post' || r.route === 'get') && r.profile === 2 && host.length > MAX_BOUND_HOST) fail('bad_host');
  let queryStream: Uint8Array | null = null;
  if (r.route === 'post') {
    if (req.contentLength !== null && req.contentLength > cfg.maxBody) fail('body_too_large');
  } else if (r.route === 'get') {
    if ((req.contentLength ?? 0) > 0 || req.body.length > 0) fail('bad_query');
    queryStream = decodeQuery(r.query, cfg.maxBody);
  }
  const n0 = r.route === 'post' || r.route === 'get' ? r.n0 : fail('bad_nonce_path');
  const profile = r.route === 'post' || r.route === 'get' ? r.profile : 1;
  const credential = scanCookies(req.cookies, lookupId(cfg, now));
  let kid: Uint8Array;
  let k: Uint8Array;
  let suite: 1 | 2 = 1;
  let streamOffset = 0;
  if (credential.kind === 'key') {
    const sk = findKey(cfg, credential.id, now);
    const hk = sk ? undefined : findHybridKey(cfg, credential.id, now);
    if (sk) {
      kid = sk.kid;
      k = sessionKey(sk.secret, credential.value);
    } else if (hk) {
      // spec/hybrid.md H3: the first 1,088 bytes of the body (or decoded query) are ct_M.
      const payload = queryStream ?? req.body;
      if (payload.length < KEM_CIPHERTEXT_LEN) fail('bad_ciphertext');
      k = hybridDecapsulate(hk.secret, hk.cert.kexPublic, hk.kem.dk, credential.value, payload.subarray(0, KEM_CIPHERTEXT_LEN));
      kid = hk.kid;
      suite = 2;
      if (queryStream !== null) queryStream = queryStream.subarray(KEM_CIPHERTEXT_LEN);
      else streamOffset = KEM_CIPHERTEXT_LEN;
    } else if (classicalOfHybrid(cfg, credential.id, now)) {
      fail('hybrid_required');
    } else {
      fail('unknown_key');
    }
  } else if (credential.kind === 'short_ticket') {
    ({ kid, sessionKey: k, suite } = openShortTicket(cfg, credential.id, credential.value, now));
  } else {
    const tk = findTicketKey(cfg, credential.id, now) ?? fail('unknown_key');
    const c = openTicket(tk.tid, tk.key, credential.value, now);
    if (findHybridKey(cfg, c.kid, now)) suite = 2;
    else if (!findKey(cfg, c.kid, now)) fail('unknown_key', 'ticket names a kid no longer held');
    kid = c.kid;
    k = c.sessionKey;
  }
  return { kind: 'request', accepted: { kid, n0, sessionKey: k, queryStream, credential, profile, host, suite, streamOffset } };
}

/** Opens the request stream (body or GET query) and parses the inner request. */
export function openRequest(a: Accepted, body: Uint8Array): { head: RequestHead; body: Uint8Array } {
  const opener =
    a.profile === 2 ? Opener.compactRequest(a.sessionKey, a.n0, a.host, DEFAULT_MAX_RECORD) : Opener.request(a.sessionKey, a.n0, DEFAULT_MAX_RECORD);
  const plaintext = openAll(opener, a.queryStream ?? body.subarray(a.streamOffset));
  return decodeAll(InnerDecoder.request(DEFAULT_INNER_LIMITS), plaintext);
}

/**
 * Inner request fields the server consumes (spec §4.3, erratum E1): the freshness `Date` (§8.1),
 * the token fields `Client-Random` and `Random` (§8.4) and `Ticket` (§7.2; the ask of §7.3). They
 * never reach the service.
 */
export const PROTOCOL_FIELDS: readonly string[] = ['date', 'client-random', 'random', 'ticket'];

/**
 * What the service is handed (spec §4.3, erratum E1): `head` and `body` built from the inner
 * request alone, and apart from them the allow-listed outer fields, which nothing authenticated.
 */
export interface ServiceRequest {
  head: RequestHead;
  body: Uint8Array;
  outerFields: Field[];
}

/**
 * Serves the outer request `bytes` and builds the service's request. Its fields are the inner ones
 * in order but the protocol's own ({@link PROTOCOL_FIELDS}). Where the inner head has no `Host`, one
 * goes first: the outer `Host` a profile-2 stream binds, else `authority` (the configured name),
 * else none; an outer `Host` nothing authenticated never reaches the service. `passOuter` names
 * the outer fields handed over apart: each name in list order, its values in outer order. No other
 * outer field takes part.
 */
export function serviceRequest(
  cfg: ServerConfig,
  bytes: Uint8Array,
  now: number,
  authority: string | null = null,
  passOuter: readonly string[] = [],
): ServiceRequest {
  const req = parseOuterRequest(bytes);
  const r = accept(cfg, req, now);
  if (r.kind !== 'request') fail('bad_nonce_path', `not an HTTPCrypt request (${r.kind})`);
  const inner = openRequest(r.accepted, req.body);
  const fields: Field[] = [];
  if (!inner.head.fields.some(([n]) => n.toLowerCase() === 'host')) {
    const host = r.accepted.profile === 2 ? r.accepted.host : authority;
    if (host !== null) fields.push(['Host', host]);
  }
  for (const f of inner.head.fields) if (!PROTOCOL_FIELDS.includes(f[0].toLowerCase())) fields.push(f);
  const outerFields = passOuter.flatMap((name) => req.fields.filter(([n]) => n.toLowerCase() === name.toLowerCase()));
  return { head: { method: inner.head.method, target: inner.head.target, fields }, body: inner.body, outerFields };
}

/** How many fresh random bytes open a response body: 24 (v1 `n0`) or 16 (profile-2 `r`). */
export function responseNonceLen(a: Accepted): number {
  return a.profile === 2 ? RESPONSE_RANDOM_LEN : NONCE_LEN;
}

/**
 * Seals a complete inner response: `n0 || stream` (v1, `responseN0` 24
 * bytes), or `r || stream` under the nonce `0xff^8 || r` (profile 2,
 * `responseN0` is the 16-byte `r`).
 */
export function sealResponse(a: Accepted, responseN0: Uint8Array, innerResponse: Uint8Array, recordSize: number): Uint8Array {
  if (responseN0.length !== responseNonceLen(a)) fail('config', `a profile-${a.profile} response starts with ${responseNonceLen(a)} random bytes`);
  const sealer = a.profile === 2 ? Sealer.compactResponse(a.sessionKey, responseN0, a.n0) : Sealer.response(a.sessionKey, responseN0, a.n0);
  const stream = sealAll(sealer, innerResponse, recordSize);
  const out = new Uint8Array(responseN0.length + stream.length);
  out.set(responseN0);
  out.set(stream, responseN0.length);
  return out;
}

/** Certificates valid at `now`, highest serial first (for OPTIONS and unknown-key). */
export function validCerts(cfg: ServerConfig, now: number): KeyCert[] {
  return cfg.keys
    .map((k) => k.cert)
    .filter((c) => isValidAt(c, now))
    .sort((a, b) => b.serial - a.serial || b.notBefore - a.notBefore);
}

/** Suite-2 certificates valid at `now`, highest serial first (for `OPTIONS {mount}/pq` and `hybrid_certs`). */
export function validHybridCerts(cfg: ServerConfig, now: number): HybridCert[] {
  return (cfg.hybridKeys ?? [])
    .map((k) => k.cert)
    .filter((c) => isValidAt(c, now))
    .sort((a, b) => b.serial - a.serial || b.notBefore - a.notBefore);
}

/** The distinct encapsulation keys of the valid suite-2 certificates (the `hck1 ` lines of `OPTIONS {mount}/pq`). */
export function validKemKeys(cfg: ServerConfig, now: number): Uint8Array[] {
  const out: Uint8Array[] = [];
  for (const k of cfg.hybridKeys ?? []) {
    if (isValidAt(k.cert, now) && !out.some((e) => bytesEqual(e, k.kem.ek))) out.push(k.kem.ek);
  }
  return out;
}

/** A suite-2 server key from the kex secret, the ML-KEM seed and the certificate. */
export function serverHybridKey(secret: Uint8Array, kemSeed: Uint8Array, cert: HybridCert): ServerHybridKey {
  const kem = kemKeyPair(kemSeed);
  if (!bytesEqual(kemHash(kem.ek), cert.kemHash)) fail('kem_mismatch', 'the certificate names another ML-KEM key');
  return { secret, kem, cert, kid: hybridCertKid(cert), v1Kid: keyId(cert.kexPublic) };
}

/** A server key from its secret and certificate. */
export function serverKey(secret: Uint8Array, cert: KeyCert): ServerKey {
  return { secret, cert, kid: keyId(cert.kexPublic) };
}

