/**
 * The retry rules of one call (spec §7.3, §11.5, §14.5): which answers ask for
 * another attempt, how often each may, and how long a `busy` answer makes
 * the client wait. The engine says what an answer is; `Retries` says
 * whether the call may follow it.
 */
import { type ErrorCode, HttpCryptError, type ProblemInfo, fail } from './errors.js';

/** Retries spent on admission challenges and `busy` answers, together, per call (spec §14.5). */
export const ADMISSION_RETRIES = 3;
/** The longest `busy` wait (seconds). */
export const MAX_BUSY_WAIT = 5;
/** Outer requests per call at most: the first, one retry each for a refused short ticket, key, stale and token, and the admission retries. */
export const MAX_ATTEMPTS = 5 + ADMISSION_RETRIES;

/** An answer that asks for another attempt. */
export type Retry =
  | { kind: 'retry_key' }
  /** A 400 `malformed` answer to a short ticket (spec §7.3: its ticket key is gone); the ticket was dropped. */
  | { kind: 'retry_short' }
  | { kind: 'retry_stale' }
  | { kind: 'retry_token' }
  | { kind: 'retry_admission'; problem: ProblemInfo }
  | { kind: 'retry_busy'; wait: number; problem: ProblemInfo };

/** Counts for `ExchangeInfo.admission`. */
export interface CallStats {
  challenges: number;
  busy: number;
}

/**
 * The retries one call has left: one on `unknown-key`, one on `stale`,
 * one on `token-required`, one on a refused short ticket; admission challenges and `busy` answers
 * together at most `ADMISSION_RETRIES` times; none for a streamed body
 * (it was consumed); never on `replay`.
 */
export class Retries {
  readonly stats: CallStats = { challenges: 0, busy: 0 };
  readonly #used = new Set<Retry['kind']>();
  #admission = 0;

  /** `replayable`: the body can be sent again (it is not a stream). */
  constructor(readonly replayable: boolean) {}

  /** After a `stale` answer the corrected clock writes `Date`. */
  get ownDate(): boolean {
    return this.#used.has('retry_stale');
  }

  /** Whether `retry` may be followed: the seconds to wait first (`busy`), or null to go again at once; otherwise throws the call's error. */
  allow(retry: Retry): number | null {
    if (retry.kind === 'retry_admission' || retry.kind === 'retry_busy') {
      // Challenges and busy answers share one bound (spec §14.5); the stored cookie serves the next call.
      const code: ErrorCode = retry.kind === 'retry_admission' ? 'admission_required' : 'busy';
      if (!this.replayable) throw new HttpCryptError(code, `outer 429 ${retry.problem.type}: a streamed body cannot be sent again`, retry.problem);
      if (this.#admission >= ADMISSION_RETRIES) throw new HttpCryptError(code, `outer 429 ${retry.problem.type} after ${ADMISSION_RETRIES} retries`, retry.problem);
      this.#admission++;
      if (retry.kind === 'retry_busy') {
        this.stats.busy++;
        return retry.wait;
      }
      this.stats.challenges++;
      return null;
    }
    if (!this.replayable || this.#used.has(retry.kind)) {
      const code: ErrorCode = retry.kind === 'retry_key' ? 'unknown_key' : retry.kind === 'retry_stale' ? 'stale' : retry.kind === 'retry_short' ? 'no_cookie' : 'token_required';
      fail(code, `${code} after retry`);
    }
    this.#used.add(retry.kind);
    return null;
  }
}
