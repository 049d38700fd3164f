/**
 * When the client asks for a new short ticket (spec §7.3): on its first
 * request to a host, and on the request that uses the held ticket for the
 * R-th time or once T seconds have passed since its first use. Requests that
 * carry the same short ticket are linkable to each other, as requests under
 * one reused key pair are; R and T bound that set. A new ticket starts the
 * count again, and so does the ask itself, so that requests sent before the
 * new ticket arrives (concurrent ones) present the held one without asking.
 * Time is a parameter, as everywhere in the engine.
 */
import { fail } from './errors.js';
import { type ShortTicket } from './ticket.js';

/** Requests one short ticket is presented with, by default, before the client asks for a new one. */
export const SHORT_TICKET_REUSE = 16;
/** Seconds after its first use, by default, after which the client asks for a new short ticket. */
export const SHORT_TICKET_MAX_AGE = 600;

/** When a client asks for a new short ticket. */
export interface ShortPolicy {
  /** Requests per short ticket, R (at least 1; 1 asks on every request, so no two requests share a ticket). */
  reuse: number;
  /** Seconds after its first use, T. */
  maxAge: number;
}

/** The policy of the options: defaults for what is not set; `config` for a reuse below 1 or a negative age. */
export function shortPolicy(options: Partial<ShortPolicy> = {}): ShortPolicy {
  const reuse = options.reuse ?? SHORT_TICKET_REUSE;
  const maxAge = options.maxAge ?? SHORT_TICKET_MAX_AGE;
  if (!Number.isInteger(reuse) || reuse < 1) fail('config', 'short tickets: reuse is a whole number of requests, at least 1');
  if (!(maxAge >= 0)) fail('config', 'short tickets: maxAge is a number of seconds, at least 0');
  return { reuse, maxAge };
}

/** How much a held short ticket has been used: the count and clock its policy is applied to. */
export class ShortUse {
  /** Requests that presented it since it arrived or was last asked about. */
  #uses = 0;
  /** When that count started (unix seconds): its first use, or the last request that asked for a new one. */
  #firstUsed: number | null = null;

  /** Whether a request at `now` asks for a new ticket: on the ticket's last use, or once it is `maxAge` old. */
  asks(policy: ShortPolicy, now: number): boolean {
    return this.#uses + 1 >= policy.reuse || (this.#firstUsed !== null && now >= this.#firstUsed + policy.maxAge);
  }

  /** Counts one request at `now` that presented the ticket. */
  used(now: number): void {
    this.#uses++;
    this.#firstUsed ??= now;
  }

  /** Notes that a request at `now` asked for a new ticket: the count starts again. */
  asked(now: number): void {
    this.#uses = 0;
    this.#firstUsed = now;
  }
}

/** A short ticket the client holds: the ticket, the suite of the session it resumes, its use so far. */
export interface HeldShort {
  ticket: ShortTicket;
  suite: 1 | 2;
  used: ShortUse;
}
