/**
 * Session tickets (spec §7.2):
 * `ticket = tid(10) || n(24) || Seal(ticket_key, n, k || kid || expiry, AD = tid)`.
 * The client stores what the server gave and presents `ticket[10..]` in its
 * cookie; sealing and opening (server side) serve the vectors and tests.
 *
 * Short tickets (spec §7.3, a project extension a client asks for with the
 * inner request field `Ticket: short`): the server draws `h` and derives
 * `k' = SHA3-256("hc1-short-ticket" || ticket_key || tid || kid || h)`; the
 * field carries `tid || h || k'` (78 characters), the cookie only `tid` and
 * `h`, and the ticket key names its `kid`.
 */
import { b64uDecodeExact, b64uEncode, encodedLen } from './b64u.js';
import { fail } from './errors.js';
import { KID_LEN, NONCE_LEN, TAG_LEN, aeadOpen, aeadSeal, concat, sha3, utf8 } from './suite.js';

const PLAIN_LEN = 32 + KID_LEN + 4;
export const SEALED_TICKET_LEN = NONCE_LEN + PLAIN_LEN + TAG_LEN;
export const TICKET_LEN = KID_LEN + SEALED_TICKET_LEN;
export const TICKET_FIELD = 'Ticket';

/** What a ticket holds. */
export interface TicketContents {
  sessionKey: Uint8Array;
  kid: Uint8Array;
  expiry: number;
}

/** The ticket-key ID (cookie name prefix) of a 96-byte ticket. */
export function ticketId(ticket: Uint8Array): Uint8Array {
  return ticket.subarray(0, KID_LEN);
}

/** `ticket[10..]`, the cookie value. */
export function ticketSealed(ticket: Uint8Array): Uint8Array {
  return ticket.subarray(KID_LEN);
}

/** Parses the inner `Ticket` field (128 base64url characters). */
export function parseTicketField(field: string): Uint8Array {
  return b64uDecodeExact(field, TICKET_LEN);
}

/** The inner `Ticket` field value. */
export function formatTicketField(ticket: Uint8Array): string {
  return b64uEncode(ticket);
}

/** Seals a ticket under `(tid, key)` with nonce `n`. */
export function sealTicket(tid: Uint8Array, key: Uint8Array, c: TicketContents, n: Uint8Array): Uint8Array {
  const exp = new Uint8Array([(c.expiry >>> 24) & 0xff, (c.expiry >>> 16) & 0xff, (c.expiry >>> 8) & 0xff, c.expiry & 0xff]);
  return concat(tid, n, aeadSeal(key, n, concat(c.sessionKey, c.kid, exp), tid));
}

/** Opens `ticket[10..]`; failure or expiry is `unknown_key` (spec §7.2). */
export function openTicket(tid: Uint8Array, key: Uint8Array, sealed: Uint8Array, now: number): TicketContents {
  if (sealed.length !== SEALED_TICKET_LEN) fail('unknown_key');
  const plain = aeadOpen(key, sealed.subarray(0, NONCE_LEN), sealed.subarray(NONCE_LEN), tid);
  if (plain === null) fail('unknown_key', 'ticket does not open');
  const expiry = ((plain[42]! << 24) | (plain[43]! << 16) | (plain[44]! << 8) | plain[45]!) >>> 0;
  if (now > expiry) fail('unknown_key', 'ticket expired');
  return { sessionKey: plain.slice(0, 32), kid: plain.slice(32, 32 + KID_LEN), expiry };
}

/** Bytes of a short ticket's random part `h` (the cookie value, spec §7.3). */
export const SHORT_H_LEN = 16;
/** Bytes of a short ticket as the `Ticket` field carries it: `tid || h || k'`. */
export const SHORT_TICKET_LEN = KID_LEN + SHORT_H_LEN + 32;
/** The value of the inner request field `Ticket` that asks for a short ticket (spec §7.3). */
export const ASK_SHORT = 'short';
/** `Ticket: none` declines any ticket for the answer: a one-shot client (spec §7.3). */
export const DECLINE = 'none';
const SHORT_LABEL = utf8('hc1-short-ticket');

/** A short ticket as the client holds it: the cookie parts and the key `k'` requests presenting it seal under. */
export interface ShortTicket {
  tid: Uint8Array;
  h: Uint8Array;
  key: Uint8Array;
}

/** `k' = SHA3-256("hc1-short-ticket" || ticket_key || tid || kid || h)`: the key of the short ticket `(tid, h)` issued for a session under `kid`. */
export function shortTicketKey(tid: Uint8Array, key: Uint8Array, kid: Uint8Array, h: Uint8Array): Uint8Array {
  return sha3(SHORT_LABEL, key, tid, kid, h);
}

/** The short ticket with random part `h` (fresh per ticket) under `(tid, key)` for a session under `kid`. */
export function issueShortTicket(tid: Uint8Array, key: Uint8Array, kid: Uint8Array, h: Uint8Array): ShortTicket {
  return { tid, h, key: shortTicketKey(tid, key, kid, h) };
}

/** Parses a short `Ticket` field (78 base64url characters). */
export function parseShortTicketField(field: string): ShortTicket {
  const b = b64uDecodeExact(field, SHORT_TICKET_LEN);
  return { tid: b.slice(0, KID_LEN), h: b.slice(KID_LEN, KID_LEN + SHORT_H_LEN), key: b.slice(KID_LEN + SHORT_H_LEN) };
}

/** The short `Ticket` field value: `b64u(tid || h || k')`. */
export function formatShortTicketField(t: ShortTicket): string {
  return b64uEncode(concat(t.tid, t.h, t.key));
}

/** A `Ticket` field of either form, told apart by its length: 78 characters a short ticket, else a v1 one. */
export type AnyTicket = { form: 'v1'; ticket: Uint8Array } | { form: 'short'; ticket: ShortTicket };

/** Parses a `Ticket` field of either form (`bad_base64` when it is neither). */
export function parseAnyTicketField(field: string): AnyTicket {
  if (field.length === encodedLen(SHORT_TICKET_LEN)) return { form: 'short', ticket: parseShortTicketField(field) };
  return { form: 'v1', ticket: parseTicketField(field) };
}
