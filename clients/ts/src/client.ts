/**
 * `createClient` / `hcFetch`: a `fetch`-compatible HTTPCrypt client for
 * browsers and Node 20. It finds the server's keys (`OPTIONS {mount}/`,
 * cached for `max-age`), seals the request (GET form when it fits, else
 * POST, streaming the body where the platform can), opens the response
 * incrementally and hands out a standard `Response` whose body yields only
 * verified bytes. It retries once on outer `unknown-key` and once on inner
 * `stale`, never on `replay` (spec §11.5), and obeys a server's admission
 * defence (spec §14.5): it solves the puzzle of an outer 429 `admission`
 * challenge, waits out `busy`, at most three such retries per call.
 * When the chosen certificate has version 2 it sends profile 2 (spec §4.5):
 * the time in the nonce, record 0 bound to the outer `Host` (`URL.host`,
 * what fetch puts on the wire), no inner `Host` or `Date`, pads of 0–7.
 * Every field the caller sets travels inside (erratum E1); the answer to
 * HEAD and a 304 have no body (erratum E2). Failures to reach or recognise
 * a server are the shared diagnoses of spec §12 (`connect_failed`,
 * `timeout`, `not_httpcrypt`, `no_endpoint`).
 */
import { ADMIT_COOKIE_LEN, ADMIT_COOKIE_NAME, ADMIT_ECHO_SECONDS, MAX_CLIENT_DIFFICULTY, cookieDifficulty, formatEcho, solvePuzzle } from './admission.js';
import { b64uDecodeExact } from './b64u.js';
import { type KeyCert, certFromText, certVersion, chooseCert, parseCertList, verifyCert } from './cert.js';
import { COMPACT_MAX_PAD, type Profile, compactNonce } from './compact.js';
import { checkDate, formatHttpDate } from './date.js';
import { type ErrorCode, HttpCryptError, PROBLEM, type ProblemInfo, codeForProblem, fail } from './errors.js';
import { type ClientCredential, type PreparedRequest, prepareRequest, requestSealer, responseOpener } from './exchange.js';
import { DEFAULT_INNER_LIMITS, FORBIDDEN, type Field, InnerDecoder, type InnerLimits, type ResponseHead, fieldValue, formatRequestHead } from './inner.js';
import { MAX_PAD, PROBLEM_TYPE, fitsGetForm, getTarget, noncePath, normalizeMount, parseProblem, randomPad, OCTET_STREAM } from './outer.js';
import { DEFAULT_MAX_RECORD, type Opener, sealAll } from './stream.js';
import { concat, isIdentityKey, randomBytes } from './suite.js';
import { TICKET_FIELD, parseTicketField } from './ticket.js';
import { CLIENT_RANDOM_FIELD, RANDOM_FIELD, formatClientRandom } from './token.js';

/** Options of `createClient`. */
export interface ClientOptions {
  /**
   * The server's mount path. Default: discovered per origin among
   * `DEFAULT_MOUNTS` (`''`, the server's default, and `/hc`, the mount of a
   * server that also serves the pages, `serve --pass-through --mount /hc`):
   * the first whose `OPTIONS {mount}/` answers a certificate list is kept.
   */
  mount?: string;
  /**
   * Seconds without progress after which a call fails with `timeout`
   * (default 30): while connecting and waiting for an answer, between
   * request records sent, and while a read of the response body waits for
   * the network (a caller that stops reading is not timed out). `0`: none.
   */
  timeout?: number;
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
  /** The transport (default `globalThis.fetch`). */
  fetch?: typeof globalThis.fetch;
  /** Clock hook: unix seconds (default `Date.now() / 1000`). */
  now?: () => number;
  /**
   * How the HTTPCrypt cookie travels. `header` sets the `Cookie` field
   * (Node); `document` sets a same-origin cookie scoped to the request's
   * nonce path through `document.cookie` (browsers, which forbid the field).
   * Default: `document` when `document` exists, else `header`.
   *
   * In `document` mode the request goes with `credentials: 'same-origin'`,
   * so the browser also puts every page cookie matching the nonce path
   * (all `path=/` ones, HttpOnly included) in the outer `Cookie`, in clear
   * for anyone on the path; the service never sees them (erratum E1: only
   * what is sealed reaches it). At most `MAX_LIVE_COOKIES` request cookies
   * are in the jar at once.
   */
  cookieMode?: 'header' | 'document';
  /**
   * Stream the sealed request body (`duplex: 'half'`). Default: true in
   * Node; false in browsers, which do not generally support streaming
   * uploads over HTTP/1.1, so the sealed body is buffered there.
   */
  streamingUploads?: boolean;
  /** Certificate lines (`hc1 …`) known in advance, e.g. from DNS; checked like `OPTIONS` answers. */
  certs?: string[];
}

/** What happened on the wire for one `hcFetch` call. */
export interface ExchangeInfo {
  /** What the outer cookie carried on the last attempt. */
  credential: 'key' | 'ticket';
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

const INFO = new WeakMap<Response, ExchangeInfo>();

/** The exchange details of a response `hcFetch` returned. */
export function exchangeInfo(res: Response): ExchangeInfo | undefined {
  return INFO.get(res);
}

interface HostState {
  certs: KeyCert[];
  fetched: number;
  maxAge: number;
  key: Uint8Array | null;
  ticket: { ticket: Uint8Array; sessionKey: Uint8Array } | null;
  token: { value: string; sessionKey: Uint8Array } | null;
  clockOffset: number;
  /** The admission cookie to echo on fresh-key requests until `until` (clock seconds), spec §14.5. */
  admit: { cookie: Uint8Array; difficulty: number; until: number } | null;
  /** The mount this origin serves HTTPCrypt under: configured, or found by discovery (null: not yet). */
  mount: string | null;
}

/** Mounts tried, in order, when none is configured: the server's default and the documented pass-through mount. */
export const DEFAULT_MOUNTS: readonly string[] = ['', '/hc'];

/**
 * Request cookies a page may hold at once (browsers, all clients of the
 * page together). Each sealed request in document mode puts one cookie in
 * the page's jar; Chromium keeps 180 per site and evicts the least recently
 * used, which would be the page's own (its login included) under a burst of
 * calls. A call takes a slot before it seals and gives it back as soon as
 * its request was answered and its cookie removed.
 */
export const MAX_LIVE_COOKIES = 8;

/** A counting semaphore for the page's request cookies. */
const cookieSlots = {
  free: MAX_LIVE_COOKIES,
  waiting: [] as (() => void)[],
  async take(signal: AbortSignal | undefined): Promise<() => void> {
    if (this.free > 0) this.free--;
    else {
      await new Promise<void>((resolve, reject) => {
        const wake = (): void => {
          signal?.removeEventListener('abort', abort);
          resolve();
        };
        const abort = (): void => {
          const i = this.waiting.indexOf(wake);
          if (i >= 0) this.waiting.splice(i, 1);
          reject(new HttpCryptError('transport', 'aborted while waiting for a request cookie slot', undefined, { cause: signal?.reason }));
        };
        if (signal?.aborted) return abort();
        signal?.addEventListener('abort', abort, { once: true });
        this.waiting.push(wake);
      });
    }
    let given = false;
    return () => {
      if (given) return;
      given = true;
      const next = this.waiting.shift();
      if (next) next();
      else this.free++;
    };
  },
};

/** `HOST:PORT` of an http origin, as diagnoses name it. */
function hostPort(origin: string): string {
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
class Watchdog {
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

type Outcome =
  | { kind: 'done'; response: Response }
  | { kind: 'retry_key' }
  | { kind: 'retry_stale' }
  | { kind: 'retry_token' }
  | { kind: 'retry_admission'; problem: ProblemInfo }
  | { kind: 'retry_busy'; wait: number; problem: ProblemInfo };

/** Retries spent on admission challenges and `busy` answers, together, per call (spec §14.5). */
const ADMISSION_RETRIES = 3;
/** The longest `busy` wait (seconds). */
const MAX_BUSY_WAIT = 5;

interface CallStats {
  challenges: number;
  busy: number;
  echoDifficulty: number | null;
}

/** Waits `seconds`, or rejects with `transport` when `signal` aborts. */
function sleep(seconds: number, signal: AbortSignal | undefined): Promise<void> {
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

const SAFE = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE']);
const NULL_BODY = new Set([101, 204, 205, 304]);
const PROBLEM_LIMIT = 64 * 1024;
/** The media type of a certificate list (spec §6.5). */
const CERTS_TYPE = 'application/httpcrypt-certs';

/**
 * What a failed transport call becomes: an `HttpCryptError` as it is (a
 * `timeout` among them), `connect_failed` when the host could not be
 * reached (Node names the reason; a browser's fetch does not say, so there it
 * stays `transport`), else `transport`.
 */
function transportError(e: unknown, origin: string, what: string): HttpCryptError {
  if (e instanceof HttpCryptError) return e;
  const code = causeCode(e);
  const reason = code === undefined ? undefined : CONNECT_ERRORS[code];
  if (reason !== undefined) return new HttpCryptError('connect_failed', `cannot connect to ${hostPort(origin)}: ${reason}`, undefined, { cause: e });
  const detail = code !== undefined ? `${String(e)} (${code})` : String(e);
  return new HttpCryptError('transport', `${what}: ${detail}`, undefined, { cause: e });
}

/** The HTTPCrypt client: `fetch` plus state per host (keys, tickets, clock offset). */
export interface HcClient {
  fetch(input: string | URL | Request, init?: RequestInit): Promise<Response>;
  /** Fetches (or returns cached) certificates of `origin` (`http://host[:port]`). */
  refreshCerts(origin: string): Promise<KeyCert[]>;
  /** Forget cached keys and tickets (all hosts). */
  clear(): void;
}

/** A view typed as backed by a plain ArrayBuffer (what BodyInit/BlobPart want). */
function own(b: Uint8Array): Uint8Array<ArrayBuffer> {
  return b.buffer instanceof ArrayBuffer ? (b as Uint8Array<ArrayBuffer>) : new Uint8Array(b);
}

function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

async function readLimited(body: ReadableStream<Uint8Array> | null, limit: number): Promise<Uint8Array> {
  if (body === null) return new Uint8Array(0);
  const reader = body.getReader();
  const parts: Uint8Array[] = [];
  let n = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    n += value.length;
    if (n > limit) {
      await reader.cancel().catch(() => undefined);
      fail('body_too_large', 'response too large');
    }
    parts.push(value);
  }
  return concat(...parts);
}

/** Turns a caller's body into bytes (and its default Content-Type), or keeps a stream. */
async function normalizeBody(body: BodyInit | null | undefined): Promise<{ bytes: Uint8Array | null; stream: ReadableStream<Uint8Array> | null; type: string | null }> {
  if (body === null || body === undefined) return { bytes: null, stream: null, type: null };
  if (body instanceof ReadableStream) return { bytes: null, stream: body as ReadableStream<Uint8Array>, type: null };
  if (body instanceof Uint8Array) return { bytes: body, stream: null, type: null };
  const r = new Response(body);
  return { bytes: new Uint8Array(await r.arrayBuffer()), stream: null, type: r.headers.get('content-type') };
}

/** Creates a client. */
export function createClient(options: ClientOptions = {}): HcClient {
  const configuredMount = options.mount === undefined ? null : normalizeMount(options.mount);
  const timeout = options.timeout ?? 30;
  let identity: Uint8Array | undefined;
  if (options.identity !== undefined) {
    identity = typeof options.identity === 'string' ? b64uDecodeExact(options.identity, 32) : options.identity;
    if (!isIdentityKey(identity)) fail('bad_signature', 'the pinned identity is not an Ed25519 point');
  }
  const form = options.form ?? 'auto';
  const keyReuse = options.keyReuse ?? false;
  const useTickets = options.tickets ?? true;
  const useCompact = options.compact ?? true;
  const recordSize = Math.max(1, options.recordSize ?? 16 * 1024);
  const maxRecord = options.maxRecord ?? DEFAULT_MAX_RECORD;
  const innerLimits = options.innerLimits ?? DEFAULT_INNER_LIMITS;
  const transport = options.fetch ?? ((...a: Parameters<typeof fetch>) => globalThis.fetch(...a));
  const clock = options.now ?? (() => Date.now() / 1000);
  const now = (): number => Math.floor(clock());
  const hasDocument = typeof (globalThis as { document?: unknown }).document !== 'undefined';
  const cookieMode = options.cookieMode ?? (hasDocument ? 'document' : 'header');
  const streaming = options.streamingUploads ?? !hasDocument;
  const hosts = new Map<string, HostState>();

  const host = (origin: string): HostState => {
    let h = hosts.get(origin);
    if (!h) {
      h = { certs: [], fetched: 0, maxAge: 0, key: null, ticket: null, token: null, clockOffset: 0, admit: null, mount: configuredMount };
      if (options.certs) {
        h.certs = checked(options.certs.map(certFromText));
        h.fetched = now();
        h.maxAge = 86400;
      }
      hosts.set(origin, h);
    }
    return h;
  };

  /** Authenticated mode keeps only certificates the identity signed. */
  function checked(certs: KeyCert[]): KeyCert[] {
    if (identity === undefined) return certs;
    const id = identity;
    return certs.filter((c) => {
      try {
        verifyCert(c, id);
        return true;
      } catch {
        return false;
      }
    });
  }

  /** Discoveries in flight, one per origin: concurrent first calls share one `OPTIONS`. */
  const discovering = new Map<string, Promise<KeyCert[]>>();

  function refreshCerts(origin: string): Promise<KeyCert[]> {
    let p = discovering.get(origin);
    if (p === undefined) {
      p = discover(origin).finally(() => discovering.delete(origin));
      discovering.set(origin, p);
    }
    return p;
  }

  /**
   * `OPTIONS {mount}/` at the origin's mount, or, with none configured, at
   * each of `DEFAULT_MOUNTS` until one answers a certificate list (then kept).
   * Nothing there is `no_endpoint` (404) or `not_httpcrypt` (any other
   * answer); with several candidates the first one's diagnosis is reported.
   */
  async function discover(origin: string): Promise<KeyCert[]> {
    const h = host(origin);
    const candidates = h.mount !== null ? [h.mount] : DEFAULT_MOUNTS;
    let first: unknown = null;
    for (const m of candidates) {
      try {
        const found = await optionsAt(origin, m);
        h.mount = m;
        return found;
      } catch (e) {
        if (!(e instanceof HttpCryptError && (e.code === 'no_endpoint' || e.code === 'not_httpcrypt'))) throw e;
        first ??= e;
      }
    }
    throw first;
  }

  async function optionsAt(origin: string, m: string): Promise<KeyCert[]> {
    const where = hostPort(origin);
    const watchdog = new Watchdog(timeout, undefined);
    const phase = `fetching the certificates (OPTIONS ${m}/)`;
    let rsp: Response;
    watchdog.arm(phase);
    try {
      rsp = await transport(`${origin}${m}/`, { method: 'OPTIONS', cache: 'no-store', redirect: 'manual', signal: watchdog.signal });
    } catch (e) {
      throw transportError(watchdog.explain(e), origin, `OPTIONS ${origin}${m}/`);
    } finally {
      watchdog.disarm();
    }
    const ctype = rsp.headers.get('content-type')?.split(';')[0]?.trim().toLowerCase();
    // A refusal's body is read (within a bound) rather than cancelled, which a browser would log as a failed request.
    const drain = (): Promise<unknown> => readLimited(rsp.body, PROBLEM_LIMIT).catch(() => undefined);
    if (rsp.status === 404) {
      await drain();
      throw new HttpCryptError('no_endpoint', `no HTTPCrypt endpoint at ${m || '/'} on ${where}: wrong mount?`, { type: '', status: 404, scope: 'outer' });
    }
    if (rsp.status !== 200 || (ctype !== undefined && ctype !== CERTS_TYPE)) {
      await drain();
      throw new HttpCryptError('not_httpcrypt', `${where} is not an HTTPCrypt server (OPTIONS ${m}/ answered ${rsp.status})`, {
        type: '',
        status: rsp.status,
        scope: 'outer',
      });
    }
    const m2 = /(?:^|,)\s*max-age=(\d+)/.exec(rsp.headers.get('cache-control') ?? '');
    // max-age=0 (a rotation is due) means "ask again soon", not "keep forever".
    const maxAge = m2 ? Math.max(1, Number(m2[1])) : 0;
    let text: Uint8Array;
    watchdog.arm(`reading the certificates (OPTIONS ${m}/)`);
    try {
      text = await readLimited(rsp.body, PROBLEM_LIMIT);
    } catch (e) {
      throw transportError(watchdog.explain(e), origin, `OPTIONS ${origin}${m}/`);
    } finally {
      watchdog.disarm();
    }
    let certs: KeyCert[];
    try {
      certs = parseCertList(text);
    } catch (e) {
      // Without the certificate list's type, a body that is not one is some other service's answer.
      if (ctype === undefined) throw new HttpCryptError('not_httpcrypt', `${where} is not an HTTPCrypt server (OPTIONS ${m}/ answered ${rsp.status})`);
      throw e;
    }
    const t = now();
    chooseCert(certs, t, identity); // bad_signature / not_valid when nothing usable
    const h = host(origin);
    h.certs = checked(certs);
    h.fetched = t;
    h.maxAge = maxAge;
    return h.certs;
  }

  async function currentCert(origin: string): Promise<KeyCert> {
    const h = host(origin);
    const t = now();
    if (h.certs.length > 0 && (h.maxAge === 0 || t < h.fetched + h.maxAge)) {
      try {
        return chooseCert(h.certs, t);
      } catch {
        // none valid any more: refresh
      }
    }
    return chooseCert(await refreshCerts(origin), t, identity);
  }

  async function hcFetch(input: string | URL | Request, init: RequestInit = {}): Promise<Response> {
    const base = typeof location !== 'undefined' ? location.href : undefined;
    let url: URL;
    let method: string;
    let headers: Headers;
    let rawBody: BodyInit | null | undefined;
    const signal = init.signal ?? (input instanceof Request ? input.signal : undefined);
    if (input instanceof Request) {
      url = new URL(input.url);
      method = (init.method ?? input.method).toUpperCase();
      headers = new Headers(init.headers ?? input.headers);
      rawBody = init.body !== undefined ? init.body : input.body;
    } else {
      url = new URL(String(input), base);
      method = (init.method ?? 'GET').toUpperCase();
      headers = new Headers(init.headers);
      rawBody = init.body;
    }
    if (url.protocol !== 'http:') fail('config', `HTTPCrypt runs over plain http, not ${url.protocol}`);
    const body = await normalizeBody(rawBody);
    if (body.type !== null && !headers.has('content-type')) headers.set('content-type', body.type);

    let retriedKey = false;
    let retriedStale = false;
    let retriedToken = false;
    let admissionRetries = 0;
    const stats: CallStats = { challenges: 0, busy: 0, echoDifficulty: null };
    for (let attempts = 1; attempts <= 4 + ADMISSION_RETRIES; attempts++) {
      const outcome = await sendOnce(url, method, headers, body, attempts, retriedStale, signal ?? undefined, stats);
      if (outcome.kind === 'done') return outcome.response;
      // A streamed body was consumed: no retry is possible (state is refreshed for the next call).
      const once = body.stream === null;
      if (outcome.kind === 'retry_admission' || outcome.kind === 'retry_busy') {
        // Challenges and busy answers share one bound (spec §14.5); the stored cookie serves the next call.
        const code: ErrorCode = outcome.kind === 'retry_admission' ? 'admission_required' : 'busy';
        if (!once) throw new HttpCryptError(code, `outer 429 ${outcome.problem.type}: a streamed body cannot be sent again`, outcome.problem);
        if (admissionRetries >= ADMISSION_RETRIES) throw new HttpCryptError(code, `outer 429 ${outcome.problem.type} after ${ADMISSION_RETRIES} retries`, outcome.problem);
        admissionRetries++;
        if (outcome.kind === 'retry_busy') {
          stats.busy++;
          await sleep(outcome.wait, signal ?? undefined);
        } else {
          stats.challenges++;
        }
        continue;
      }
      if (outcome.kind === 'retry_key' && once && !retriedKey) retriedKey = true;
      else if (outcome.kind === 'retry_stale' && once && !retriedStale) retriedStale = true;
      else if (outcome.kind === 'retry_token' && once && !retriedToken) retriedToken = true;
      else {
        const code = outcome.kind === 'retry_key' ? 'unknown_key' : outcome.kind === 'retry_stale' ? 'stale' : 'token_required';
        fail(code, `${code} after retry`);
      }
    }
    fail('config', 'too many attempts');
  }

  async function sendOnce(
    url: URL,
    method: string,
    callerHeaders: Headers,
    body: { bytes: Uint8Array | null; stream: ReadableStream<Uint8Array> | null },
    attempts: number,
    ownDate: boolean,
    signal: AbortSignal | undefined,
    stats: CallStats,
  ): Promise<Outcome> {
    const cert = await currentCert(url.origin);
    // Browsers: a slot for this request's cookie, taken before sealing (profile 2 seals the time).
    const slot = cookieMode === 'document' ? await cookieSlots.take(signal) : () => undefined;
    const watchdog = new Watchdog(timeout, signal);
    try {
      return await exchange(url, method, callerHeaders, body, attempts, ownDate, stats, cert, slot, watchdog);
    } finally {
      slot();
    }
  }

  async function exchange(
    url: URL,
    method: string,
    callerHeaders: Headers,
    body: { bytes: Uint8Array | null; stream: ReadableStream<Uint8Array> | null },
    attempts: number,
    ownDate: boolean,
    stats: CallStats,
    cert: KeyCert,
    slot: () => void,
    watchdog: Watchdog,
  ): Promise<Outcome> {
    const origin = url.origin;
    const authority = url.host;
    const signal = watchdog.signal;
    const h = host(origin);
    const mount = h.mount ?? DEFAULT_MOUNTS[0]!;
    if (keyReuse && h.key === null) h.key = randomBytes(32);
    const cred: ClientCredential =
      useTickets && h.ticket !== null ? { kind: 'ticket', ...h.ticket } : { kind: 'key', secret: h.key ?? randomBytes(32) };
    // Profile 2 exactly when the chosen certificate announces it (spec §4.5). Its n0 carries the
    // corrected clock; record 0 binds the outer Host as fetch writes it on the wire: URL.host.
    const profile: Profile = useCompact && certVersion(cert) === 2 ? 2 : 1;
    const maxPad = profile === 2 ? COMPACT_MAX_PAD : MAX_PAD;
    const p =
      profile === 2
        ? prepareRequest(cert.kexPublic, cred, compactNonce(now() + h.clockOffset), randomPad(maxPad), randomPad(maxPad), { profile: 2, host: authority })
        : prepareRequest(cert.kexPublic, cred, randomBytes(24), randomPad(maxPad), randomPad(maxPad));
    // Under admission: fresh-key requests echo the host's cookie with a solution for this n0; ticket requests never.
    let echo: string | null = null;
    stats.echoDifficulty = null;
    if (h.admit !== null && clock() >= h.admit.until) h.admit = null;
    if (cred.kind === 'key' && h.admit !== null) {
      const { cookie, difficulty } = h.admit;
      echo = formatEcho(cookie, await solvePuzzle(cookie, p.n0, difficulty, { signal }));
      stats.echoDifficulty = difficulty;
    }

    // Inner head: target, Host, the caller's fields, a corrected Date, framing, token.
    // Profile 2 sends neither Host (the outer one is bound) nor Date (the time is in n0).
    const fields: Field[] = [];
    if (profile === 1 && !callerHeaders.has('host')) fields.push(['Host', authority]);
    callerHeaders.forEach((value, name) => {
      if (FORBIDDEN.includes(name) || name === 'content-length' || (profile === 1 && ownDate && name === 'date')) return;
      fields.push([name, value]);
    });
    if (profile === 1 && (ownDate || !callerHeaders.has('date'))) fields.push(['Date', formatHttpDate(now() + h.clockOffset)]);
    const len = body.bytes?.length ?? (body.stream === null ? 0 : null);
    if (len !== null && (len > 0 || method === 'POST' || method === 'PUT')) fields.push(['Content-Length', String(len)]);
    if (!SAFE.has(method)) {
      if (h.token !== null && bytesEqual(h.token.sessionKey, p.sessionKey)) fields.push([RANDOM_FIELD, h.token.value]);
      fields.push([CLIENT_RANDOM_FIELD, formatClientRandom(randomBytes(24))]);
    }
    const target = url.pathname + url.search;
    const head = formatRequestHead({ method, target, fields });

    const fits = len !== null && fitsGetForm(mount, head.length + len + 64, profile);
    if (form === 'get' && !fits) fail('config', 'the request does not fit the GET form (2000-byte request line, body in memory)');
    const useGet = form !== 'post' && fits;
    const outerHeaders = new Headers();
    let outerUrl: string;
    // Outside only what the network needs (erratum E1): not even the page's address as Referer.
    const outerInit: RequestInit & { duplex?: 'half' } = { headers: outerHeaders, redirect: 'manual', signal, referrerPolicy: 'no-referrer' };
    if (useGet) {
      const stream = sealAll(requestSealer(p), concat(head, body.bytes ?? new Uint8Array(0)), recordSize);
      outerUrl = origin + getTarget(mount, p.n0, stream, profile);
      outerInit.method = 'GET';
    } else {
      outerUrl = origin + noncePath(mount, p.n0, profile);
      outerInit.method = 'POST';
      outerHeaders.set('Content-Type', OCTET_STREAM);
      if (body.stream !== null) {
        const sealed = sealStream(p, head, body.stream, recordSize, watchdog);
        if (streaming) {
          outerInit.body = sealed;
          outerInit.duplex = 'half';
        } else {
          outerInit.body = own(await readLimited(sealed, Number.MAX_SAFE_INTEGER));
        }
      } else {
        const bytes = body.bytes ?? new Uint8Array(0);
        if (streaming && bytes.length > recordSize) {
          // Sealed record by record as the transport takes them, so that a server refusing the body early is heard (ioTurn).
          outerInit.body = sealStream(p, head, new Blob([own(bytes)]).stream(), recordSize, watchdog);
          outerInit.duplex = 'half';
        } else {
          outerInit.body = own(sealAll(requestSealer(p), concat(head, bytes), recordSize));
        }
      }
    }
    const path = new URL(outerUrl).pathname;
    const release = attachCookie(p, echo, outerHeaders, outerInit, url, path);
    let rsp: Response;
    watchdog.arm(outerInit.body instanceof ReadableStream ? 'sending the request' : 'waiting for the response');
    try {
      rsp = await transport(outerUrl, outerInit);
    } catch (e) {
      throw transportError(watchdog.explain(e), origin, `${method} ${url.href}`);
    } finally {
      watchdog.disarm();
      // The request is answered: its cookie leaves the jar and its slot is free for the next one.
      release();
      slot();
    }

    if (rsp.status !== 200) {
      // Unauthenticated: at most a hint for a retry, never data.
      watchdog.arm('reading the response');
      const text = await readLimited(rsp.body, PROBLEM_LIMIT)
        .catch(() => new Uint8Array(0))
        .finally(() => watchdog.disarm());
      const problem = parseProblem(text);
      if (problem?.type === 'urn:httpcrypt:unknown-key') {
        const certs: KeyCert[] = [];
        for (const line of problem.certs) {
          try {
            certs.push(certFromText(line));
          } catch {
            // skip lines that do not parse
          }
        }
        const usable = checked(certs);
        h.ticket = null;
        h.certs = usable;
        h.fetched = now();
        h.maxAge = usable.length > 0 ? Math.max(h.maxAge, 1) : 0;
        return { kind: 'retry_key' };
      }
      const info: ProblemInfo = {
        type: problem?.type ?? '',
        status: rsp.status,
        scope: 'outer',
        ...(problem?.title !== undefined ? { title: problem.title } : {}),
      };
      if (rsp.status === 429 && problem?.type === PROBLEM.admission) {
        let cookie: Uint8Array;
        try {
          cookie = b64uDecodeExact(problem.admit ?? '', ADMIT_COOKIE_LEN);
        } catch {
          throw new HttpCryptError('admission_required', 'outer 429 admission without a usable cookie (unauthenticated)', info);
        }
        // The cookie's own difficulty byte is what the server checks (its MAC covers it); never solve less than either says.
        const d = Math.max(cookieDifficulty(cookie), problem.difficulty ?? 0);
        if (!Number.isInteger(d) || d > MAX_CLIENT_DIFFICULTY) {
          throw new HttpCryptError('bad_admission', `admission puzzle of difficulty ${d} is above ${MAX_CLIENT_DIFFICULTY}: not solved`, info);
        }
        h.admit = { cookie, difficulty: d, until: clock() + ADMIT_ECHO_SECONDS };
        // Tickets never meet the defence; a challenged ticket request goes again as a fresh-key request.
        if (p.credential === 'ticket') h.ticket = null;
        return { kind: 'retry_admission', problem: info };
      }
      if (rsp.status === 429 && problem?.type === PROBLEM.busy) {
        const header = Number(rsp.headers.get('retry-after') ?? '');
        const s = problem.retryAfter ?? (Number.isFinite(header) ? header : 1);
        return { kind: 'retry_busy', wait: Math.min(Math.max(0, s), MAX_BUSY_WAIT), problem: info };
      }
      const type = problem?.type ?? '';
      throw new HttpCryptError(type ? codeForProblem(type, 'outer') : 'refused', `outer ${rsp.status}${type ? ' ' + type : ''} (unauthenticated)`, {
        type,
        status: rsp.status,
        scope: 'outer',
        ...(problem?.title !== undefined ? { title: problem.title } : {}),
      });
    }

    const opened = openBody(responseOpener(p, maxRecord), InnerDecoder.response(innerLimits, method), outerBody(rsp), watchdog);
    const inner = await opened.head;
    const ticketField = fieldValue(inner.fields, TICKET_FIELD);
    if (ticketField !== undefined && useTickets) {
      try {
        h.ticket = { ticket: parseTicketField(ticketField), sessionKey: p.sessionKey };
      } catch {
        // a malformed ticket is ignored; the key pair keeps working
      }
    }
    const random = fieldValue(inner.fields, RANDOM_FIELD);
    if (random !== undefined) h.token = { value: random, sessionKey: p.sessionKey };

    const ctype = fieldValue(inner.fields, 'content-type')?.split(';')[0]?.trim().toLowerCase();
    let bodyStream: ReadableStream<Uint8Array> | null = opened.body;
    if (ctype === PROBLEM_TYPE || NULL_BODY.has(inner.status) || method === 'HEAD') {
      // Small (or empty) bodies are verified whole before anything is released.
      const bytes = await readLimited(opened.body, ctype === PROBLEM_TYPE ? PROBLEM_LIMIT : maxRecord);
      const problem = ctype === PROBLEM_TYPE ? parseProblem(bytes) : null;
      if (problem !== null && problem.type.startsWith('urn:httpcrypt:')) {
        if (problem.type === 'urn:httpcrypt:stale') {
          try {
            const server = checkDate(fieldValue(inner.fields, 'date'), 0, Number.MAX_SAFE_INTEGER);
            h.clockOffset = server - now();
          } catch {
            // no usable Date: retry with the same clock
          }
          return { kind: 'retry_stale' };
        }
        if (problem.type === 'urn:httpcrypt:token-required') return { kind: 'retry_token' };
        // Sealed, so it is the server's own word; still a protocol failure, not a document.
        throw new HttpCryptError(codeForProblem(problem.type, 'inner'), `server reported ${inner.status} ${problem.type}`, {
          type: problem.type,
          status: inner.status,
          scope: 'inner',
          ...(problem.title !== undefined ? { title: problem.title } : {}),
        });
      }
      bodyStream = NULL_BODY.has(inner.status) || method === 'HEAD' ? null : new Blob([own(bytes)]).stream();
    }
    if (inner.status < 200 || inner.status > 599) fail('malformed_inner', `inner status ${inner.status} cannot be represented by a Response`);
    const outHeaders = new Headers();
    for (const [n, v] of inner.fields) {
      try {
        outHeaders.append(n, v);
      } catch {
        // names a Response may not carry (e.g. Set-Cookie in browsers) are left out
      }
    }
    let response: Response;
    try {
      response = new Response(bodyStream, { status: inner.status, statusText: inner.reason, headers: outHeaders });
    } catch {
      // a reason phrase with bytes a Response cannot carry: keep the status, drop the phrase
      response = new Response(bodyStream, { status: inner.status, headers: outHeaders });
    }
    INFO.set(response, { credential: p.credential, attempts, form: useGet ? 'get' : 'post', outerUrl, profile, admission: { ...stats } });
    Object.defineProperty(response, 'url', { value: url.href });
    return { kind: 'done', response };
  }

  /**
   * Puts the cookie pair on the outer request: as the `Cookie` field
   * (Node), or in the browser as a same-origin cookie scoped to this
   * request's unique nonce path (so concurrent requests never collide),
   * removed again once the request has been sent. An admission echo is one
   * more pair, `hc1-admit`, travelling and removed the same way.
   */
  function attachCookie(p: PreparedRequest, echo: string | null, outerHeaders: Headers, init: RequestInit, url: URL, path: string): () => void {
    const echoPair = echo === null ? null : `${ADMIT_COOKIE_NAME}=${echo}`;
    if (cookieMode === 'header') {
      outerHeaders.set('Cookie', echoPair === null ? p.cookie : `${p.cookie}; ${echoPair}`);
      return () => undefined;
    }
    const doc = (globalThis as { document?: { cookie: string } }).document;
    const loc = (globalThis as { location?: { origin: string } }).location;
    if (!doc || !loc || loc.origin !== url.origin) {
      fail('config', `browsers can only carry the HTTPCrypt cookie to the page's own origin (${loc?.origin ?? 'none'}), not ${url.origin}`);
    }
    const eq = p.cookie.indexOf('=');
    const name = p.cookie.slice(0, eq);
    doc.cookie = `${p.cookie}; path=${path}; max-age=60; samesite=strict`;
    if (echoPair !== null) doc.cookie = `${echoPair}; path=${path}; max-age=60; samesite=strict`;
    init.credentials = 'same-origin';
    return () => {
      doc.cookie = `${name}=; path=${path}; max-age=0; samesite=strict`;
      if (echoPair !== null) doc.cookie = `${ADMIT_COOKIE_NAME}=; path=${path}; max-age=0; samesite=strict`;
    };
  }

  return {
    fetch: hcFetch,
    refreshCerts,
    clear: () => hosts.clear(),
  };
}

/**
 * One turn of the event loop's I/O phase (Node's `setImmediate`), so that
 * an answer the server sent while the body is still being written (an early
 * 413 before it closes) is read before the next write can fail on the
 * closed connection; the transport then resolves with that answer rather
 * than a connection reset. Elsewhere a microtask.
 */
function ioTurn(): Promise<void> {
  const immediate = (globalThis as { setImmediate?: (f: () => void) => unknown }).setImmediate;
  return new Promise((resolve) => (immediate ? immediate(resolve) : queueMicrotask(resolve)));
}

/** Outer answers up to this announced length are read whole (`outerBody`). */
const WHOLE_LIMIT = 1 << 20;

/**
 * The sealed answer's bytes as a stream. An answer of announced length up
 * to `WHOLE_LIMIT` is taken with `arrayBuffer()`, which lets the platform
 * finish the load itself: Chromium reports a fetch whose body a stream
 * reader drained before the network layer signalled completion as
 * cancelled (`net::ERR_ABORTED`), although every byte arrived. Longer or
 * unannounced answers stream through the reader.
 */
function outerBody(rsp: Response): ReadableStream<Uint8Array> | null {
  const announced = Number(rsp.headers.get('content-length') ?? Number.NaN);
  if (rsp.body === null || !Number.isSafeInteger(announced) || announced > WHOLE_LIMIT) return rsp.body;
  let taken = false;
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (taken) {
        controller.close();
        return;
      }
      taken = true;
      controller.enqueue(new Uint8Array(await rsp.arrayBuffer()));
    },
    async cancel() {
      await rsp.body?.cancel().catch(() => undefined);
    },
  });
}

/** Seals `head` then the caller's body stream, as records of `recordSize`, the last FINAL. */
function sealStream(p: PreparedRequest, head: Uint8Array, input: ReadableStream<Uint8Array>, recordSize: number, watchdog: Watchdog): ReadableStream<Uint8Array> {
  const sealer = requestSealer(p);
  const reader = input.getReader();
  let pending: Uint8Array = head;
  let ended = false;
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      // Fill one record (or reach the end), then emit it.
      while (!ended && pending.length <= recordSize) {
        const { done, value } = await reader.read();
        if (done) ended = true;
        else if (value.length > 0) pending = concat(pending, value);
      }
      if (pending.length > recordSize) {
        const record = sealer.seal(pending.subarray(0, recordSize));
        pending = pending.slice(recordSize);
        await ioTurn();
        watchdog.arm('sending the request');
        controller.enqueue(record);
        return;
      }
      const last = sealer.finish(pending);
      await ioTurn();
      watchdog.arm('waiting for the response');
      controller.enqueue(last);
      pending = new Uint8Array(0);
      controller.close();
    },
    cancel(reason) {
      return reader.cancel(reason);
    },
  });
}

/**
 * Opens a response body incrementally: `head` resolves with the inner
 * response head; `body` yields verified inner body bytes only and errors
 * with the `HttpCryptError` on any failure (integrity, truncation, …).
 */
function openBody(
  opener: Opener,
  decoder: InnerDecoder<ResponseHead>,
  source: ReadableStream<Uint8Array> | null,
  watchdog: Watchdog,
): { head: Promise<ResponseHead>; body: ReadableStream<Uint8Array> } {
  const reader = source?.getReader() ?? null;
  const ready: Uint8Array[] = [];
  let head: ResponseHead | null = null;
  let finished = false;

  /** Pulls input until some body bytes are ready, the head arrived (when `forHead`), or the end. */
  async function step(forHead: boolean): Promise<void> {
    while (ready.length === 0 && !finished && !(forHead && head !== null)) {
      let r: ReadableStreamReadResult<Uint8Array>;
      if (reader === null) r = { done: true, value: undefined };
      else {
        watchdog.arm('reading the response');
        try {
          r = await reader.read();
        } catch (e) {
          const why = watchdog.explain(e);
          throw why instanceof HttpCryptError ? why : new HttpCryptError('transport', `reading the response: ${String(why)}`, undefined, { cause: why });
        } finally {
          watchdog.disarm();
        }
      }
      if (r.done) {
        opener.finish();
        decoder.finish();
        finished = true;
        break;
      }
      opener.receive(r.value);
      for (let ev = opener.nextEvent(); ev !== null; ev = opener.nextEvent()) {
        if (ev.type === 'data') decoder.receive(ev.plaintext);
      }
      for (let ev = decoder.nextEvent(); ev !== null; ev = decoder.nextEvent()) {
        if (ev.type === 'head') head = ev.head;
        else ready.push(ev.bytes);
      }
    }
  }

  const headPromise = (async () => {
    try {
      await step(true);
      if (head === null) fail('malformed_inner', 'no inner head');
      return head;
    } catch (e) {
      await reader?.cancel().catch(() => undefined);
      throw e;
    }
  })();

  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        await step(false);
      } catch (e) {
        await reader?.cancel().catch(() => undefined);
        controller.error(e);
        return;
      }
      const chunk = ready.shift();
      if (chunk !== undefined) controller.enqueue(chunk);
      else if (finished) controller.close();
    },
    async cancel(reason) {
      await reader?.cancel(reason).catch(() => undefined);
    },
  });
  return { head: headPromise, body };
}

let defaultClient: HcClient | null = null;

/** `fetch` over HTTPCrypt with a shared default client (mount `''`, opportunistic mode). */
export function hcFetch(input: string | URL | Request, init?: RequestInit): Promise<Response> {
  defaultClient ??= createClient();
  return defaultClient.fetch(input, init);
}

