/**
 * The state the engine (`engine.ts`) keeps per origin (`HostState`) and
 * what one planned outer request carries (`Attempt`), with the caller's
 * body as the engine sees it.
 */
import { type KeyCert } from './cert.js';
import { type Profile } from './compact.js';
import { type PreparedRequest } from './exchange.js';
import { type HeldShort } from './shortpolicy.js';

/** What the client keeps per origin. */
export interface HostState {
  certs: KeyCert[];
  fetched: number;
  maxAge: number;
  key: Uint8Array | null;
  /** The last ticket, with its session key and the suite of the session it resumes. */
  ticket: { ticket: Uint8Array; sessionKey: Uint8Array; suite: 1 | 2 } | null;
  /** The last short ticket (spec §7.3), kept apart from the v1 one, with the suite it resumes and its use. */
  short: HeldShort | null;
  /** The last `Random` (spec §8.4) with the key it is bound to: the answered request's, or `k'` of a short ticket issued with it (§7.3). */
  token: { value: string; sessionKey: Uint8Array } | null;
  clockOffset: number;
  /** The admission cookie to echo on fresh-key requests until `until` (clock seconds), spec §14.5. */
  admit: { cookie: Uint8Array; difficulty: number; until: number } | null;
  /** The mount this origin serves HTTPCrypt under: configured, or found by discovery (null: not yet). */
  mount: string | null;
}

/** A caller's body as the engine sees it: bytes in memory, or a stream of unknown length. */
export interface CallerBody {
  bytes: Uint8Array | null;
  stream: ReadableStream<Uint8Array> | null;
}

/** One outer request as the engine planned it. */
export interface Attempt {
  readonly origin: string;
  /** The origin's state the attempt reads and its answer updates. */
  readonly host: HostState;
  readonly prepared: PreparedRequest;
  readonly profile: Profile;
  /** The inner request's method (upper case). */
  readonly method: string;
  /** The formatted inner request head. */
  readonly head: Uint8Array;
  readonly form: 'get' | 'post';
  readonly outerUrl: string;
  /** 2 for a hybrid fresh-key request or a ticket of a hybrid session. */
  readonly suite: 1 | 2;
  /** Whether the inner head asks for a short ticket (`Ticket: short`, spec §7.3). */
  readonly askTicket: boolean;
  /** The `hc1-admit` echo value this attempt carries (spec §14.5), or null. */
  readonly echo: string | null;
  readonly echoDifficulty: number | null;
}
