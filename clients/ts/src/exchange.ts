/**
 * The client's side of one exchange, without IO (spec §4, §7.2, §7.3): derive
 * `k` (or take it from a ticket, or a short ticket's `k'`), build cookie and path, seal the request,
 * open the response. The fetch client drives these; the vectors pin them.
 * A request is v1 or profile 2 (spec §4.5: `2…` nonce segment, record 0
 * bound to the outer `Host`, response body `r || stream`).
 */
import { type Profile } from './compact.js';
import { fail } from './errors.js';
import { DEFAULT_INNER_LIMITS, InnerDecoder, type InnerLimits, type ResponseHead, decodeAll, latin1 } from './inner.js';
import { formatCookie, formatOuterRequestHead, getTarget, noncePath } from './outer.js';
import { DEFAULT_MAX_RECORD, Opener, Sealer, openAll, sealAll } from './stream.js';
import { concat, keyId, sessionKey, x25519Public } from './suite.js';
import { type ShortTicket, ticketId, ticketSealed } from './ticket.js';
import { hybridEncapsulate } from './hybrid.js';

/**
 * What the cookie presents: a key pair (secret), a ticket with its session
 * key, a short ticket (spec §7.3, with its own key `k'`), or a suite-2
 * agreement (spec/hybrid.md H3): the client's X25519 secret, the server's
 * ML-KEM key `ek`, the suite-2 key ID, and for deterministic tests the
 * encapsulation randomness `m`.
 */
export type ClientCredential =
  | { kind: 'key'; secret: Uint8Array }
  | { kind: 'ticket'; ticket: Uint8Array; sessionKey: Uint8Array }
  | { kind: 'short_ticket'; ticket: ShortTicket }
  | { kind: 'hybrid'; secret: Uint8Array; ek: Uint8Array; kid: Uint8Array; m?: Uint8Array };

/** The request profile and, for profile 2, the outer `Host` value record 0 binds (exactly as it will be sent). */
export type RequestProfile = { profile: 1 } | { profile: 2; host: string };

/** Everything needed to send one request and open its response. */
export interface PreparedRequest {
  n0: Uint8Array;
  sessionKey: Uint8Array;
  cookie: string;
  credential: 'key' | 'ticket';
  /** The form of the ticket presented: `v1` (spec §7.2) or `short` (§7.3); null for a key. */
  ticketForm: 'v1' | 'short' | null;
  /** 1 (v1) or 2 (compact, spec §4.5). */
  profile: Profile;
  /** Profile 2: the bound outer `Host` value; v1: null. */
  host: string | null;
  /** Suite 2 (spec/hybrid.md H3): the ML-KEM ciphertext that precedes the sealed stream; else null. */
  kemCiphertext: Uint8Array | null;
}

/**
 * Derives `k` against the server key (or takes the ticket's, or the short ticket's `k'`) and formats
 * the cookie with the given pads. For profile 2, `n0` is `u40(t) || r`
 * (`compactNonce`) and the caller draws pads of at most 7 characters.
 */
export function prepareRequest(
  serverKexPublic: Uint8Array,
  cred: ClientCredential,
  n0: Uint8Array,
  namePad: string,
  valuePad: string,
  profile: RequestProfile = { profile: 1 },
): PreparedRequest {
  const binding = profile.profile === 2 ? { profile: 2 as const, host: profile.host } : { profile: 1 as const, host: null };
  if (cred.kind === 'key') {
    const k = sessionKey(cred.secret, serverKexPublic);
    const cookie = formatCookie(keyId(serverKexPublic), x25519Public(cred.secret), namePad, valuePad);
    return { n0, sessionKey: k, cookie, credential: 'key', ticketForm: null, ...binding, kemCiphertext: null };
  }
  if (cred.kind === 'hybrid') {
    const h = hybridEncapsulate(cred.secret, serverKexPublic, cred.ek, cred.m);
    const cookie = formatCookie(cred.kid, h.ctX, namePad, valuePad);
    return { n0, sessionKey: h.sessionKey, cookie, credential: 'key', ticketForm: null, ...binding, kemCiphertext: h.ctM };
  }
  if (cred.kind === 'short_ticket') {
    // A short ticket issued in a hybrid session resumes it like a v1 ticket does: no ciphertext (spec §7.3).
    const cookie = formatCookie(cred.ticket.tid, cred.ticket.h, namePad, valuePad);
    return { n0, sessionKey: cred.ticket.key, cookie, credential: 'ticket', ticketForm: 'short', ...binding, kemCiphertext: null };
  }
  const cookie = formatCookie(ticketId(cred.ticket), ticketSealed(cred.ticket), namePad, valuePad);
  return { n0, sessionKey: cred.sessionKey, cookie, credential: 'ticket', ticketForm: 'v1', ...binding, kemCiphertext: null };
}

/** A sealer for the request stream (profile 2: record 0 bound to the Host). */
export function requestSealer(p: PreparedRequest): Sealer {
  if (p.profile === 2) return Sealer.compactRequest(p.sessionKey, p.n0, p.host ?? fail('config', 'profile 2 without a Host'));
  return Sealer.request(p.sessionKey, p.n0);
}

/** An opener for the response body (`n0 || stream`; profile 2: `r || stream`). */
export function responseOpener(p: PreparedRequest, maxRecord = DEFAULT_MAX_RECORD): Opener {
  if (p.profile === 2) return Opener.compactResponse(p.sessionKey, p.n0, maxRecord);
  return Opener.response(p.sessionKey, p.n0, maxRecord);
}

/** Seals a complete inner message (head and body bytes) as one stream. */
export function sealMessage(p: PreparedRequest, inner: Uint8Array, recordSize: number): Uint8Array {
  return sealAll(requestSealer(p), inner, recordSize);
}

/** The outer body (POST) or query bytes (GET) of a request: the sealed stream, after `ct_M` in suite 2. */
export function outerPayload(p: PreparedRequest, stream: Uint8Array): Uint8Array {
  return p.kemCiphertext === null ? stream : concat(p.kemCiphertext, stream);
}

/**
 * The complete outer request bytes in the canonical layout (spec D9). Profile 2 sends the Host it bound;
 * suite 2 puts `ct_M` before the stream (spec/hybrid.md H3).
 */
export function encodeOuterRequest(p: PreparedRequest, form: 'post' | 'get', mount: string, host: string, sealedStream: Uint8Array): Uint8Array {
  if (p.profile === 2 && host !== p.host) fail('config', 'the outer Host differs from the one record 0 binds');
  const stream = outerPayload(p, sealedStream);
  if (form === 'post') {
    return concat(latin1(formatOuterRequestHead('post', noncePath(mount, p.n0, p.profile), host, p.cookie, stream.length)), stream);
  }
  return latin1(formatOuterRequestHead('get', getTarget(mount, p.n0, stream, p.profile), host, p.cookie, 0));
}

/** Opens a whole response body and parses the inner response to a `requestMethod` request (HEAD: erratum E2). */
export function openResponse(
  p: PreparedRequest,
  body: Uint8Array,
  limits: InnerLimits = DEFAULT_INNER_LIMITS,
  maxRecord = DEFAULT_MAX_RECORD,
  requestMethod = 'GET',
): { head: ResponseHead; body: Uint8Array } {
  return decodeAll(InnerDecoder.response(limits, requestMethod), openAll(responseOpener(p, maxRecord), body));
}
