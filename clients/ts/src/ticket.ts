/**
 * Session tickets (spec §7.2):
 * `ticket = tid(10) || n(24) || Seal(ticket_key, n, k || kid || expiry, AD = tid)`.
 * The client stores what the server gave and presents `ticket[10..]` in its
 * cookie; sealing and opening (server side) serve the vectors and tests.
 */
import { b64uDecodeExact, b64uEncode } from './b64u.js';
import { fail } from './errors.js';
import { KID_LEN, NONCE_LEN, TAG_LEN, aeadOpen, aeadSeal, concat } from './suite.js';

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
