/**
 * What a failure to reach a server becomes (spec §12): the `timeout` of a
 * call that made no progress (`Watchdog`), `connect_failed` when the host
 * could not be reached, else `transport`; and the abortable wait of a
 * `busy` answer.
 */
import { HttpCryptError } from './errors.js';

/** `HOST:PORT` of an http origin, as diagnoses name it. */
export function hostPort(origin: string): string {
  const u = new URL(origin);
  return `${u.hostname}:${u.port || '80'}`;
}

/** Node's codes for failures to reach a host, and how a diagnosis words them. */
const CONNECT_ERRORS: Record<string, string> = {
  ECONNREFUSED: 'connection refused',
  ENOTFOUND: 'host not found',
  EAI_AGAIN: 'name lookup failed',
  EAI_FAIL: 'name lookup failed',
  EHOSTUNREACH: 'host unreachable',
  ENETUNREACH: 'network unreachable',
  EADDRNOTAVAIL: 'address not available',
  ECONNABORTED: 'connection aborted',
  ETIMEDOUT: 'connection timed out',
  UND_ERR_CONNECT_TIMEOUT: 'connection timed out',
};

/** The code of the innermost `cause` that has one (Node: `TypeError('fetch failed')` ← `Error{code}`). */
function causeCode(e: unknown): string | undefined {
  for (let c: unknown = e, depth = 0; c !== null && typeof c === 'object' && depth < 4; c = (c as { cause?: unknown }).cause, depth++) {
    const code = (c as { code?: unknown }).code;
    if (typeof code === 'string') return code;
  }
  return undefined;
}

/**
 * A timer that fails the call with `timeout` after `seconds` without
 * progress: armed while waiting on the network, with the phase that waits;
 * it aborts the transport through `signal` (which also follows the
 * caller's signal). It never aborts after the exchange ended.
 */
export class Watchdog {
  readonly signal: AbortSignal;
  readonly #controller = new AbortController();
  readonly #seconds: number;
  #timer: ReturnType<typeof setTimeout> | null = null;
  #fired: HttpCryptError | null = null;

  constructor(seconds: number, caller: AbortSignal | undefined) {
    this.#seconds = seconds;
    this.signal = this.#controller.signal;
    if (caller?.aborted) this.#controller.abort(caller.reason);
    else caller?.addEventListener('abort', () => this.#controller.abort(caller.reason), { once: true });
  }

  /** The timeout error, once it fired. */
  get fired(): HttpCryptError | null {
    return this.#fired;
  }

  arm(phase: string): void {
    this.disarm();
    if (!(this.#seconds > 0) || !Number.isFinite(this.#seconds)) return;
    this.#timer = setTimeout(() => {
      this.#fired = new HttpCryptError('timeout', `timed out after ${this.#seconds} s while ${phase}`);
      this.#controller.abort(this.#fired);
    }, this.#seconds * 1000);
  }

  disarm(): void {
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
  }

  /** The error to report for `e`, a failure while the watchdog watched: its own, or `e`. */
  explain(e: unknown): unknown {
    return this.#fired ?? e;
  }
}

/**
 * What a failed transport call becomes: an `HttpCryptError` as it is (a
 * `timeout` among them), `connect_failed` when the host could not be
 * reached (Node names the reason; a browser's fetch does not say, so there it
 * stays `transport`), else `transport`.
 */
export function transportError(e: unknown, origin: string, what: string): HttpCryptError {
  if (e instanceof HttpCryptError) return e;
  const code = causeCode(e);
  const reason = code === undefined ? undefined : CONNECT_ERRORS[code];
  if (reason !== undefined) return new HttpCryptError('connect_failed', `cannot connect to ${hostPort(origin)}: ${reason}`, undefined, { cause: e });
  const detail = code !== undefined ? `${String(e)} (${code})` : String(e);
  return new HttpCryptError('transport', `${what}: ${detail}`, undefined, { cause: e });
}

/** Waits `seconds`, or rejects with `transport` when `signal` aborts. */
export function sleep(seconds: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    const abort = (): void => {
      clearTimeout(t);
      reject(new HttpCryptError('transport', 'aborted while waiting out busy', undefined, { cause: signal?.reason }));
    };
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', abort);
      resolve();
    }, seconds * 1000);
    if (signal?.aborted) abort();
    else signal?.addEventListener('abort', abort, { once: true });
  });
}
