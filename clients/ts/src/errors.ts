/**
 * The one error type of the client (spec §12): a stable snake_case `code`
 * shared with the Rust core and the test vectors, and for problems a server
 * reported, the problem type URN and status.
 */

/** Every error code of spec §12 (plus client-side ones for transport and configuration). */
export type ErrorCode =
  | 'bad_base64'
  | 'bad_base32'
  | 'bad_host'
  | 'bad_nonce_path'
  | 'bad_query'
  | 'no_cookie'
  | 'bad_cookie'
  | 'unknown_key'
  | 'small_order'
  | 'body_too_large'
  | 'record_too_large'
  | 'integrity'
  | 'clear_in_request'
  | 'truncated'
  | 'trailing_data'
  | 'too_many_records'
  | 'malformed_inner'
  | 'inner_head_too_large'
  | 'forbidden_header'
  | 'content_length_mismatch'
  | 'bad_date'
  | 'stale'
  | 'replay'
  | 'token_required'
  | 'overloaded'
  | 'bad_certificate'
  | 'bad_signature'
  | 'not_valid'
  | 'bad_record'
  | 'bad_key_header'
  | 'bad_keypair'
  | 'bad_token'
  /** An admission echo the server would refuse, or a puzzle above difficulty 24 (spec §14.3, §14.5). */
  | 'bad_admission'
  /** The server under load still asked for an admission cookie after the retries (spec §14.5). */
  | 'admission_required'
  /** The server's budget for this source prefix stayed empty after the retries (spec §14.5). */
  | 'busy'
  /** A hybrid request's body (or decoded query) is shorter than the ML-KEM ciphertext (spec/hybrid.md H6). */
  | 'bad_ciphertext'
  /** A v1 fresh-key request to a server that takes suite 2 only (spec/hybrid.md H6). */
  | 'hybrid_required'
  /** An encapsulation key text whose SHA3-256 is not the certificate's `kem_hash` (spec/hybrid.md H2). */
  | 'kem_mismatch'
  /** The origin is pinned to (or the client requires) suite 2 and discovery offered none (spec/hybrid.md H5). */
  | 'hybrid_downgrade'
  // Client diagnoses (spec §12), the same in every client:
  /** The host could not be reached: `cannot connect to HOST:PORT: REASON`. */
  | 'connect_failed'
  /** No progress for the configured time: `timed out after N s while PHASE`. */
  | 'timeout'
  /** `OPTIONS {mount}/` answered neither a certificate list nor 404: `HOST:PORT is not an HTTPCrypt server (OPTIONS MOUNT answered STATUS)`. */
  | 'not_httpcrypt'
  /** `OPTIONS {mount}/` answered 404: `no HTTPCrypt endpoint at MOUNT on HOST:PORT: wrong mount?`. */
  | 'no_endpoint'
  // Client side, not in the wire protocol:
  /** The server answered with a non-200 outer status (unauthenticated). */
  | 'refused'
  /** Network failure, or the caller aborted. */
  | 'transport'
  /** Unusable options or request (e.g. https URL, bad mount). */
  | 'config';

/** Problem type URNs (spec §4.4). */
export const PROBLEM = {
  malformed: 'urn:httpcrypt:malformed',
  unknownKey: 'urn:httpcrypt:unknown-key',
  tooLarge: 'urn:httpcrypt:too-large',
  integrity: 'urn:httpcrypt:integrity',
  stale: 'urn:httpcrypt:stale',
  replay: 'urn:httpcrypt:replay',
  tokenRequired: 'urn:httpcrypt:token-required',
  overloaded: 'urn:httpcrypt:overloaded',
  admission: 'urn:httpcrypt:admission',
  busy: 'urn:httpcrypt:busy',
  hybridRequired: 'urn:httpcrypt:hybrid-required',
} as const;

/** Where a server-reported problem came from. */
export type ProblemScope = 'outer' | 'inner';

/** Details a server gave about a problem. */
export interface ProblemInfo {
  /** The RFC 9457 `type`, e.g. `urn:httpcrypt:replay`. */
  type: string;
  /** HTTP status (outer status, or the sealed inner status). */
  status: number;
  /** `outer`: plaintext and unauthenticated; `inner`: sealed, so the server's own word. */
  scope: ProblemScope;
  /** Informative `title`. */
  title?: string;
}

/**
 * The code a problem type maps to on the client (the fine-grained code does
 * not travel, spec §4.4). `too-large` is `body_too_large` outside (the outer
 * body was refused) and `record_too_large` inside (a record was refused).
 */
export function codeForProblem(type: string, scope: ProblemScope): ErrorCode {
  switch (type) {
    case PROBLEM.unknownKey:
      return 'unknown_key';
    case PROBLEM.integrity:
      return 'integrity';
    case PROBLEM.stale:
      return 'stale';
    case PROBLEM.replay:
      return 'replay';
    case PROBLEM.tokenRequired:
      return 'token_required';
    case PROBLEM.overloaded:
      return 'overloaded';
    case PROBLEM.admission:
      return 'admission_required';
    case PROBLEM.busy:
      return 'busy';
    case PROBLEM.hybridRequired:
      return 'hybrid_required';
    case PROBLEM.tooLarge:
      return scope === 'outer' ? 'body_too_large' : 'record_too_large';
    case PROBLEM.malformed:
      return 'malformed_inner';
    default:
      return 'refused';
  }
}

/** The error every part of this package throws. */
export class HttpCryptError extends Error {
  /** Stable snake_case code (spec §12). */
  readonly code: ErrorCode;
  /** For problems a server reported: type URN, status and scope. */
  readonly problem?: ProblemInfo;

  constructor(code: ErrorCode, message?: string, problem?: ProblemInfo, options?: { cause?: unknown }) {
    super(message ?? code, options);
    this.name = 'HttpCryptError';
    this.code = code;
    if (problem !== undefined) this.problem = problem;
  }
}

/** Shorthand for throwing a coded error. */
export function fail(code: ErrorCode, message?: string): never {
  throw new HttpCryptError(code, message);
}
