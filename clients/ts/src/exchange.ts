/**
 * The client's side of one exchange, without IO (spec §4, §7.2): derive
 * `k` (or take it from a ticket), build cookie and path, seal the request,
 * open the response. The fetch client drives these; the vectors pin them.
 */
import { DEFAULT_INNER_LIMITS, InnerDecoder, type InnerLimits, type ResponseHead, decodeAll, latin1 } from './inner.js';
import { formatCookie, formatOuterRequestHead, getTarget, noncePath } from './outer.js';
import { DEFAULT_MAX_RECORD, Opener, Sealer, openAll, sealAll } from './stream.js';
import { concat, keyId, sessionKey, x25519Public } from './suite.js';
import { ticketId, ticketSealed } from './ticket.js';

/** What the cookie presents: a key pair (secret) or a ticket with its session key. */
export type ClientCredential = { kind: 'key'; secret: Uint8Array } | { kind: 'ticket'; ticket: Uint8Array; sessionKey: Uint8Array };

/** Everything needed to send one request and open its response. */
export interface PreparedRequest {
  n0: Uint8Array;
  sessionKey: Uint8Array;
  cookie: string;
  credential: 'key' | 'ticket';
}

/** Derives `k` against the server key (or takes the ticket's) and formats the cookie with the given pads. */
export function prepareRequest(serverKexPublic: Uint8Array, cred: ClientCredential, n0: Uint8Array, namePad: string, valuePad: string): PreparedRequest {
  if (cred.kind === 'key') {
    const k = sessionKey(cred.secret, serverKexPublic);
    const cookie = formatCookie(keyId(serverKexPublic), x25519Public(cred.secret), namePad, valuePad);
    return { n0, sessionKey: k, cookie, credential: 'key' };
  }
  const cookie = formatCookie(ticketId(cred.ticket), ticketSealed(cred.ticket), namePad, valuePad);
  return { n0, sessionKey: cred.sessionKey, cookie, credential: 'ticket' };
}

/** A sealer for the request stream. */
export function requestSealer(p: PreparedRequest): Sealer {
  return Sealer.request(p.sessionKey, p.n0);
}

/** An opener for the response body (`n0 || stream`). */
export function responseOpener(p: PreparedRequest, maxRecord = DEFAULT_MAX_RECORD): Opener {
  return Opener.response(p.sessionKey, p.n0, maxRecord);
}

/** Seals a complete inner message (head and body bytes) as one stream. */
export function sealMessage(p: PreparedRequest, inner: Uint8Array, recordSize: number): Uint8Array {
  return sealAll(requestSealer(p), inner, recordSize);
}

/** The complete outer request bytes in the canonical layout (spec D9). */
export function encodeOuterRequest(p: PreparedRequest, form: 'post' | 'get', mount: string, host: string, stream: Uint8Array): Uint8Array {
  if (form === 'post') {
    return concat(latin1(formatOuterRequestHead('post', noncePath(mount, p.n0), host, p.cookie, stream.length)), stream);
  }
  return latin1(formatOuterRequestHead('get', getTarget(mount, p.n0, stream), host, p.cookie, 0));
}

/** Opens a whole response body and parses the inner response. */
export function openResponse(p: PreparedRequest, body: Uint8Array, limits: InnerLimits = DEFAULT_INNER_LIMITS, maxRecord = DEFAULT_MAX_RECORD): { head: ResponseHead; body: Uint8Array } {
  return decodeAll(InnerDecoder.response(limits), openAll(responseOpener(p, maxRecord), body));
}
