/**
 * A minimal server side of one exchange, without IO (spec §11.1 order):
 * route, Host, nonce path, body/query, cookie, key agreement or ticket;
 * then the stream and the inner request. The client package carries it
 * for the shared vectors (`server_request`, `service_request`,
 * `exchange`) and for tests that play both ends in memory; it is not a
 * production server. Both profiles: a `2…` nonce segment is profile 2
 * (spec §4.5), whose record 0 is bound to the outer `Host` parsed here and
 * whose response body is `r || stream`.
 */
import { type KeyCert, isValidAt } from './cert.js';
import { MAX_BOUND_HOST, type Profile, RESPONSE_RANDOM_LEN } from './compact.js';
import { HttpCryptError, fail } from './errors.js';
import { DEFAULT_INNER_LIMITS, type Field, InnerDecoder, type RequestHead, decodeAll, fromLatin1 } from './inner.js';
import { decodeQuery, parseNonceSegment, route, scanCookies, type Credential, type IdKind } from './outer.js';
import { Opener, Sealer, openAll, sealAll, DEFAULT_MAX_RECORD } from './stream.js';
import { NONCE_LEN, bytesEqual, keyId, sessionKey } from './suite.js';
import { openTicket } from './ticket.js';

export interface ServerKey {
  secret: Uint8Array;
  cert: KeyCert;
  kid: Uint8Array;
}
export interface ServerTicketKey {
  tid: Uint8Array;
  key: Uint8Array;
  expires: number;
}
export interface ServerConfig {
  keys: ServerKey[];
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
}

export type AcceptResult = { kind: 'outside' | 'options' | 'method_not_allowed' | 'not_found' } | { kind: 'request'; accepted: Accepted };

function findKey(cfg: ServerConfig, id: Uint8Array, now: number): ServerKey | undefined {
  return cfg.keys.find((k) => now <= k.cert.notAfter && bytesEqual(k.kid, id));
}
function findTicketKey(cfg: ServerConfig, id: Uint8Array, now: number): ServerTicketKey | undefined {
  return cfg.ticketKeys.find((k) => now <= k.expires && bytesEqual(k.tid, id));
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
  const credential = scanCookies(req.cookies, (id): IdKind | null =>
    findKey(cfg, id, now) ? 'key' : findTicketKey(cfg, id, now) ? 'ticket' : null,
  );
  let kid: Uint8Array;
  let k: Uint8Array;
  if (credential.kind === 'key') {
    const sk = findKey(cfg, credential.id, now) ?? fail('unknown_key');
    kid = sk.kid;
    k = sessionKey(sk.secret, credential.value);
  } else {
    const tk = findTicketKey(cfg, credential.id, now) ?? fail('unknown_key');
    const c = openTicket(tk.tid, tk.key, credential.value, now);
    if (!findKey(cfg, c.kid, now)) fail('unknown_key', 'ticket names a kid no longer held');
    kid = c.kid;
    k = c.sessionKey;
  }
  return { kind: 'request', accepted: { kid, n0, sessionKey: k, queryStream, credential, profile, host } };
}

/** Opens the request stream (body or GET query) and parses the inner request. */
export function openRequest(a: Accepted, body: Uint8Array): { head: RequestHead; body: Uint8Array } {
  const opener =
    a.profile === 2 ? Opener.compactRequest(a.sessionKey, a.n0, a.host, DEFAULT_MAX_RECORD) : Opener.request(a.sessionKey, a.n0, DEFAULT_MAX_RECORD);
  const plaintext = openAll(opener, a.queryStream ?? body);
  return decodeAll(InnerDecoder.request(DEFAULT_INNER_LIMITS), plaintext);
}

/**
 * Inner request fields the server consumes (spec §4.3, erratum E1): the freshness `Date` (§8.1),
 * the token fields `Client-Random` and `Random` (§8.4) and `Ticket` (§7.2). They never reach the
 * service.
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

/** A server key from its secret and certificate. */
export function serverKey(secret: Uint8Array, cert: KeyCert): ServerKey {
  return { secret, cert, kid: keyId(cert.kexPublic) };
}

