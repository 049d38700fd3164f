/**
 * What a caller sets for the client's decisions (`EngineOptions`, part of
 * `ClientOptions`) and what it is told about one call (`ExchangeInfo`):
 * the public settings and report of the engine (`engine.ts`).
 */
import { type Profile } from './compact.js';
import { type InnerLimits } from './inner.js';
import { type PqMode } from './pq.js';
import { type ShortPolicy } from './shortpolicy.js';

/** The settings the engine decides with (part of `ClientOptions`). */
export interface EngineOptions {
  /**
   * The server's mount path. Default: discovered per origin among
   * `DEFAULT_MOUNTS` (`''`, the server's default, and `/hc`, the mount of a
   * server that also serves the pages, `serve --pass-through --mount /hc`):
   * the first whose `OPTIONS {mount}/` answers a certificate list is kept.
   */
  mount?: string;
  /** Authenticated mode: certificates must verify under this Ed25519 identity (32 bytes or base64url). */
  identity?: Uint8Array | string;
  /**
   * `auto` (default, as the Rust client): GET form when the request fits in
   * the request line (under 2000 bytes), else POST. `post`: always POST.
   * `get`: always the GET form; a request that does not fit is a `config` error.
   */
  form?: 'auto' | 'post' | 'get';
  /** Reuse one X25519 key pair per host so the server's session cache helps (default: fresh per request). */
  keyReuse?: boolean;
  /** Present tickets the server issues (default true). */
  tickets?: boolean;
  /**
   * Short tickets (spec §7.3), used when `tickets` is on. Default: on, with
   * R = 16 requests per ticket and T = 600 s: the first request to a host
   * asks for one (`Ticket: short`), later ones present it, and the request
   * that uses it for the R-th time, or the first one T seconds after its
   * first use, asks again. `{ reuse, maxAge }` sets R and T. `false`: never
   * ask, so the server's v1 tickets are presented (spec §7.2, D29).
   */
  shortTickets?: boolean | Partial<ShortPolicy>;
  /**
   * The client sends one request and keeps nothing (a command-line fetch):
   * it presents and asks for no ticket, and a safe request declines one
   * (`Ticket: none`, spec §7.3). `hcfetch` without `--repeat`. Default false.
   */
  oneShot?: boolean;
  /**
   * Use request profile 2 with a key whose certificate announces it
   * (version 2, spec §4.5; default true). `false` keeps the v1 layout.
   */
  compact?: boolean;
  /** Record size for request bodies (default 16 KiB). */
  recordSize?: number;
  /** Largest response record accepted (default 1 MiB). */
  maxRecord?: number;
  /** Inner head limits for responses. */
  innerLimits?: InnerLimits;
  /** Clock hook: unix seconds (default `Date.now() / 1000`). */
  now?: () => number;
  /** Certificate lines (`hc1 …`) known in advance, e.g. from DNS; checked like `OPTIONS` answers. */
  certs?: string[];
  /**
   * Suite 2, the hybrid X25519 + ML-KEM-768 agreement (spec/hybrid.md H5).
   * `off` (default): v1 only. `prefer`: ask `OPTIONS {mount}/pq` first and
   * use suite 2 when offered, else v1; once a suite-2 certificate was seen
   * the origin is pinned to suite 2 until its `not_after` (a later
   * discovery offering none is `hybrid_downgrade`). `require`: suite 2 or
   * `hybrid_downgrade`.
   */
  pq?: PqMode;
}

/** What happened on the wire for one `hcFetch` call. */
export interface ExchangeInfo {
  /** What the outer cookie carried on the last attempt. */
  credential: 'key' | 'ticket';
  /** The form of that ticket: `v1` (spec §7.2) or `short` (§7.3); null for a key. */
  ticketForm: 'v1' | 'short' | null;
  /** Requests sent (2 after a retry). */
  attempts: number;
  /** Outer form of the last attempt. */
  form: 'post' | 'get';
  /** Outer URL of the last attempt. */
  outerUrl: string;
  /**
   * Request profile of the last attempt: 2 (compact, spec §4.5) when the
   * certificate used has version 2, else 1.
   */
  profile: Profile;
  /**
   * Key agreement suite of the last attempt's session: 2 for a hybrid
   * fresh-key request or a ticket of a hybrid session, else 1.
   */
  suite: 1 | 2;
  /** Admission (spec §14): challenges and `busy` answers met in this call, and the echo of the last attempt. */
  admission: {
    /** Outer 429 `urn:httpcrypt:admission` answers this call got (each one solved and retried). */
    challenges: number;
    /** Outer 429 `urn:httpcrypt:busy` answers this call waited out. */
    busy: number;
    /** Whether the last attempt carried an `hc1-admit` echo, and the difficulty it solved (else null). */
    echoDifficulty: number | null;
  };
}

/** Mounts tried, in order, when none is configured: the server's default and the documented pass-through mount. */
export const DEFAULT_MOUNTS: readonly string[] = ['', '/hc'];
