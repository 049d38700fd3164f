/**
 * The client's decisions, without IO: per-origin state (certificates and
 * when they were fetched, the mount found, the reused key pair, the last
 * ticket, short ticket and token, the clock offset, the admission cookie),
 * what one attempt sends (credential, profile, nonce, inner head, outer form
 * and URL), and what each answer means for the call (spec §11.5: a retry, an
 * error, or a response to hand out). The fetch driver (`client.ts`) does
 * the network around it, as the Python client's `Engine` and its drivers.
 *
 * Profile 2 (spec §4.5) is used exactly when the chosen certificate has
 * version 2: the time goes in the nonce, record 0 binds the outer `Host`
 * (`URL.host`, what fetch puts on the wire), the inner head has no `Host`
 * or `Date`, pads are 0–7 characters. Every field the caller sets travels
 * inside (erratum E1).
 *
 * Suite 2 (spec/hybrid.md) with the `pq` option: the attempt is planned on
 * a `HybridKey` (X25519 + ML-KEM-768, `ct_M` before the stream); the
 * suite-2 state, pins and `hybrid_downgrade` are `HybridState`'s (`pq.ts`).
 *
 * Short tickets (spec §7.3), on by default: an attempt asks with
 * `Ticket: short` when `shortpolicy.ts` says so, and presents the held short
 * ticket before a v1 one; a 400 `malformed` answer to a short ticket (its
 * ticket key is gone) drops it for one retry with a key.
 */
import { ADMIT_COOKIE_LEN, ADMIT_ECHO_SECONDS, MAX_CLIENT_DIFFICULTY, cookieDifficulty, formatEcho, solvePuzzle } from './admission.js';
import { b64uDecodeExact } from './b64u.js';
import { type KeyCert, certFromText, certVersion, chooseCert, parseCertList, verifyCert } from './cert.js';
import { KEM_CIPHERTEXT_LEN } from './hybrid.js';
import { hybridCertKid } from './hybridcert.js';
import { type HybridKey, type PqMode, HybridState } from './pq.js';
import { COMPACT_MAX_PAD, type Profile, compactNonce } from './compact.js';
import { checkDate, formatHttpDate } from './date.js';
import { hostPort } from './diagnose.js';
import { HttpCryptError, PROBLEM, type ProblemInfo, codeForProblem, fail } from './errors.js';
import { type ClientCredential, type PreparedRequest, outerPayload, prepareRequest, requestSealer } from './exchange.js';
import { DEFAULT_INNER_LIMITS, FORBIDDEN, type Field, type InnerLimits, type ResponseHead, fieldValue, formatRequestHead } from './inner.js';
import { CERTS_TYPE, MAX_PAD, PROBLEM_TYPE, fitsGetForm, getTarget, noncePath, normalizeMount, parseProblem, randomPad } from './outer.js';
import { type CallStats, MAX_BUSY_WAIT, type Retry } from './retry.js';
import { type ShortPolicy, ShortUse, shortPolicy } from './shortpolicy.js';
import { DEFAULT_MAX_RECORD, sealAll } from './stream.js';
import { concat, isIdentityKey, randomBytes } from './suite.js';
import { ASK_SHORT, DECLINE, TICKET_FIELD, parseAnyTicketField } from './ticket.js';
import { CLIENT_RANDOM_FIELD, RANDOM_FIELD, formatClientRandom } from './token.js';
import { type Attempt, type CallerBody, type HostState } from './attempt.js';
import { DEFAULT_MOUNTS, type EngineOptions, type ExchangeInfo } from './options.js';

/** The largest problem document or certificate list read. */
export const PROBLEM_LIMIT = 64 * 1024;

const SAFE = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE']);
const NULL_BODY = new Set([101, 204, 205, 304]);

function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/** The media type of a `Content-Type` value, lower case (undefined when absent). */
function mediaType(value: string | null | undefined): string | undefined {
  return value?.split(';')[0]?.trim().toLowerCase();
}

/** Per-origin client state and the protocol decisions of spec §11.5. */
export class Engine {
  readonly identity: Uint8Array | undefined;
  readonly form: 'auto' | 'post' | 'get';
  readonly keyReuse: boolean;
  readonly tickets: boolean;
  /** One request and nothing kept: no ticket presented or asked for, a safe request declines one. */
  readonly oneShot: boolean;
  /** When to ask for short tickets (spec §7.3); null: never (off, or `tickets` off). */
  readonly shortTickets: ShortPolicy | null;
  readonly compact: boolean;
  readonly recordSize: number;
  readonly maxRecord: number;
  readonly innerLimits: InnerLimits;
  /** Suite-2 state: the `pq` mode, suite-2 certificates, pins, ML-KEM keys by hash. */
  readonly hybrid: HybridState;
  readonly #configuredMount: string | null;
  readonly #clock: () => number;
  readonly #certs: string[] | undefined;
  readonly #hosts = new Map<string, HostState>();

  constructor(options: EngineOptions = {}) {
    this.#configuredMount = options.mount === undefined ? null : normalizeMount(options.mount);
    if (options.identity !== undefined) {
      const identity = typeof options.identity === 'string' ? b64uDecodeExact(options.identity, 32) : options.identity;
      if (!isIdentityKey(identity)) fail('bad_signature', 'the pinned identity is not an Ed25519 point');
      this.identity = identity;
    }
    this.form = options.form ?? 'auto';
    this.keyReuse = options.keyReuse ?? false;
    this.oneShot = options.oneShot ?? false;
    this.tickets = (options.tickets ?? true) && !this.oneShot;
    const short = options.shortTickets ?? true;
    this.shortTickets = !this.tickets || short === false ? null : shortPolicy(short === true ? {} : short);
    this.compact = options.compact ?? true;
    this.recordSize = Math.max(1, options.recordSize ?? 16 * 1024);
    this.maxRecord = options.maxRecord ?? DEFAULT_MAX_RECORD;
    this.innerLimits = options.innerLimits ?? DEFAULT_INNER_LIMITS;
    this.#clock = options.now ?? (() => Date.now() / 1000);
    this.#certs = options.certs;
    this.hybrid = new HybridState(options.pq ?? 'off', this.identity);
  }

  /** The `pq` mode. */
  get pq(): PqMode {
    return this.hybrid.mode;
  }

  /** The clock, in (fractional) unix seconds. */
  clock(): number {
    return this.#clock();
  }

  /** The clock in whole unix seconds. */
  now(): number {
    return Math.floor(this.#clock());
  }

  /** The state of `origin`, made on first use (with the configured certificates). */
  host(origin: string): HostState {
    let h = this.#hosts.get(origin);
    if (!h) {
      h = { certs: [], fetched: 0, maxAge: 0, key: null, ticket: null, short: null, token: null, clockOffset: 0, admit: null, mount: this.#configuredMount };
      if (this.#certs) {
        h.certs = this.checked(this.#certs.map(certFromText));
        h.fetched = this.now();
        h.maxAge = 86400;
      }
      this.#hosts.set(origin, h);
    }
    return h;
  }

  /** Forgets every origin's keys, tickets and clock offset. */
  clear(): void {
    this.#hosts.clear();
    this.hybrid.clear();
  }

  /** Authenticated mode keeps only certificates the identity signed. */
  checked(certs: KeyCert[]): KeyCert[] {
    const id = this.identity;
    if (id === undefined) return certs;
    return certs.filter((c) => {
      try {
        verifyCert(c, id);
        return true;
      } catch {
        return false;
      }
    });
  }

  // ---- keys ----

  /** The mounts discovery asks at, in order: the one configured or found, else `DEFAULT_MOUNTS`. */
  mounts(origin: string): readonly string[] {
    const m = this.host(origin).mount;
    return m !== null ? [m] : DEFAULT_MOUNTS;
  }

  /** The certificate to use at time `t` if the cached ones are fresh and one is valid, else null (fetch them). */
  cachedCert(origin: string, t: number): KeyCert | null {
    const h = this.host(origin);
    if (h.certs.length > 0 && (h.maxAge === 0 || t < h.fetched + h.maxAge)) {
      try {
        return chooseCert(h.certs, t);
      } catch {
        // none valid any more: refresh
      }
    }
    return null;
  }

  /** The certificate to use at time `t` among freshly fetched ones (bad_signature / not_valid when none). */
  chooseFetched(certs: KeyCert[], t: number): KeyCert {
    return chooseCert(certs, t, this.identity);
  }

  /**
   * The diagnosis of an `OPTIONS {m}/` answer that is no certificate list
   * by its status and type: `no_endpoint` (404) or `not_httpcrypt`; null
   * when the body should be read.
   */
  optionsRefusal(origin: string, m: string, status: number, contentType: string | null): HttpCryptError | null {
    const where = hostPort(origin);
    const ctype = mediaType(contentType);
    if (status === 404) {
      return new HttpCryptError('no_endpoint', `no HTTPCrypt endpoint at ${m || '/'} on ${where}: wrong mount?`, { type: '', status: 404, scope: 'outer' });
    }
    if (status !== 200 || (ctype !== undefined && ctype !== CERTS_TYPE)) {
      return new HttpCryptError('not_httpcrypt', `${where} is not an HTTPCrypt server (OPTIONS ${m}/ answered ${status})`, { type: '', status, scope: 'outer' });
    }
    return null;
  }

  /**
   * Takes the certificate list `OPTIONS {m}/` answered: checks it
   * (something usable, signed in authenticated mode), keeps the mount and
   * caches the list for `max-age`. Returns the certificates kept.
   */
  storeCerts(origin: string, m: string, status: number, contentType: string | null, cacheControl: string | null, text: Uint8Array): KeyCert[] {
    const m2 = /(?:^|,)\s*max-age=(\d+)/.exec(cacheControl ?? '');
    // max-age=0 (a rotation is due) means "ask again soon", not "keep forever".
    const maxAge = m2 ? Math.max(1, Number(m2[1])) : 0;
    let certs: KeyCert[];
    try {
      certs = parseCertList(text);
    } catch (e) {
      // Without the certificate list's type, a body that is not one is some other service's answer.
      if (mediaType(contentType) === undefined) throw new HttpCryptError('not_httpcrypt', `${hostPort(origin)} is not an HTTPCrypt server (OPTIONS ${m}/ answered ${status})`);
      throw e;
    }
    const t = this.now();
    chooseCert(certs, t, this.identity); // bad_signature / not_valid when nothing usable
    const h = this.host(origin);
    h.mount = m;
    h.certs = this.checked(certs);
    h.fetched = t;
    h.maxAge = maxAge;
    return h.certs;
  }

  // ---- suite 2 (spec/hybrid.md H4, H5) ----

  /** The suite-2 key to use at `t` if the cached one is fresh and usable, else null. */
  cachedHybrid(origin: string, t: number): HybridKey | null {
    return this.hybrid.cached(origin, t);
  }

  /** Whether a call should ask `OPTIONS {mount}/pq` now (`pq` on, no recent answer that there is none). */
  wantsHybrid(origin: string, t: number): boolean {
    return this.pq !== 'off' && this.hybrid.shouldDiscover(origin, t);
  }

  /** Whether an answer to `OPTIONS {m}/pq` is a certificate list to read (else this mount offers no suite 2). */
  isHybridList(status: number, contentType: string | null): boolean {
    const ctype = mediaType(contentType);
    return status === 200 && (ctype === undefined || ctype === CERTS_TYPE);
  }

  /**
   * Takes the list `OPTIONS {m}/pq` answered (`HybridState.store`) and keeps the mount; null: no valid
   * suite-2 certificate. Without the list's type, a body that is no list is some other service's answer.
   */
  storeHybrid(origin: string, m: string, contentType: string | null, cacheControl: string | null, text: Uint8Array): HybridKey | null {
    let key: HybridKey | null;
    try {
      key = this.hybrid.store(origin, text, cacheControl, this.now()).key;
    } catch (e) {
      if (mediaType(contentType) === undefined && e instanceof HttpCryptError && e.code === 'bad_certificate') return null;
      throw e;
    }
    if (key !== null) this.host(origin).mount = m;
    return key;
  }

  /** No mount offered suite 2: `hybrid_downgrade` when pinned or required, else v1 for a while. */
  noHybrid(origin: string, cacheControl: string | null = null): void {
    this.hybrid.absent(origin, this.now(), cacheControl);
  }

  /** Throws `hybrid_downgrade` if `origin` may not use v1 now (pinned, or `pq: 'require'`). */
  allowClassical(origin: string): void {
    if (this.pq !== 'off') this.hybrid.refuseClassical(origin, this.now());
  }

  // ---- requests ----

  /**
   * Plans one attempt of a request to `url` on key `cert`: the credential
   * (the host's short ticket, else its ticket, else a key pair per
   * `keyReuse`), whether it asks for a short ticket, the profile, the
   * admission echo (solving its puzzle, which `signal` may stop), the inner
   * head, the outer form and URL. A GET-form request is sealed here; a POST
   * body is sealed by the driver (`sealWhole` or record by record).
   * `ownDate`: after a `stale` answer the corrected clock writes `Date`.
   */
  async plan(url: URL, method: string, callerHeaders: Headers, body: CallerBody, ownDate: boolean, key: KeyCert | HybridKey, signal?: AbortSignal): Promise<Attempt> {
    const origin = url.origin;
    const authority = url.host;
    const h = this.host(origin);
    const mount = h.mount ?? DEFAULT_MOUNTS[0]!;
    const hybrid = 'ek' in key ? key : null;
    const cert = hybrid !== null ? hybrid.cert : (key as KeyCert);
    if (this.keyReuse && h.key === null) h.key = randomBytes(32);
    const now = this.now();
    // A ticket of a v1 session is a downgrade where suite 2 is required or pinned (spec/hybrid.md H5).
    const resumes = (t: { suite: 1 | 2 } | null): boolean => t !== null && (t.suite === 2 || !this.hybrid.hybridOnly(origin, now));
    const policy = this.shortTickets;
    // A short ticket first (spec §7.3), counted as used; then a v1 one.
    const short = policy !== null && resumes(h.short) ? h.short : null;
    const askTicket = policy !== null && (h.short === null || h.short.used.asks(policy, now));
    if (short !== null) short.used.used(now);
    if (askTicket) h.short?.used.asked(now);
    const ticket = short === null && this.tickets && resumes(h.ticket) ? h.ticket : null;
    const secret = h.key ?? randomBytes(32);
    const cred: ClientCredential =
      short !== null
        ? { kind: 'short_ticket', ticket: short.ticket }
        : ticket !== null
          ? { kind: 'ticket', ticket: ticket.ticket, sessionKey: ticket.sessionKey }
          : hybrid !== null
            ? { kind: 'hybrid', secret, ek: hybrid.ek, kid: hybridCertKid(hybrid.cert) }
            : { kind: 'key', secret };
    const suite: 1 | 2 = short !== null ? short.suite : ticket !== null ? ticket.suite : hybrid !== null ? 2 : 1;
    // Profile 2 exactly when the chosen certificate announces it (spec §4.5). Its n0 carries the
    // corrected clock; record 0 binds the outer Host as fetch writes it on the wire: URL.host.
    const profile: Profile = this.compact && certVersion(cert) === 2 ? 2 : 1;
    const maxPad = profile === 2 ? COMPACT_MAX_PAD : MAX_PAD;
    const p =
      profile === 2
        ? prepareRequest(cert.kexPublic, cred, compactNonce(this.now() + h.clockOffset), randomPad(maxPad), randomPad(maxPad), { profile: 2, host: authority })
        : prepareRequest(cert.kexPublic, cred, randomBytes(24), randomPad(maxPad), randomPad(maxPad));
    // Under admission: fresh-key requests echo the host's cookie with a solution for this n0; ticket requests never.
    let echo: string | null = null;
    let echoDifficulty: number | null = null;
    if (h.admit !== null && this.clock() >= h.admit.until) h.admit = null;
    if (cred.kind === 'key' && h.admit !== null) {
      const { cookie, difficulty } = h.admit;
      echo = formatEcho(cookie, await solvePuzzle(cookie, p.n0, difficulty, signal === undefined ? {} : { signal }));
      echoDifficulty = difficulty;
    }

    const len = body.bytes?.length ?? (body.stream === null ? 0 : null);
    const head = this.innerHead(url, method, callerHeaders, len, ownDate, profile, h, p, askTicket);
    // Suite 2: the ML-KEM ciphertext counts against the request line too (spec/hybrid.md H3).
    const ctLen = p.kemCiphertext === null ? 0 : KEM_CIPHERTEXT_LEN;
    const fits = len !== null && fitsGetForm(mount, ctLen + head.length + len + 64, profile);
    if (this.form === 'get' && !fits) fail('config', 'the request does not fit the GET form (2000-byte request line, body in memory)');
    const base = { origin, host: h, prepared: p, profile, method, head, echo, echoDifficulty, suite, askTicket };
    if (this.form !== 'post' && fits) {
      const stream = sealAll(requestSealer(p), concat(head, body.bytes ?? new Uint8Array(0)), this.recordSize);
      return { ...base, form: 'get', outerUrl: origin + getTarget(mount, p.n0, outerPayload(p, stream), profile) };
    }
    return { ...base, form: 'post', outerUrl: origin + noncePath(mount, p.n0, profile) };
  }

  /**
   * The inner head: target, Host, the caller's fields, a corrected Date,
   * framing, the ask for a short ticket (spec §7.3) and the tokens of spec
   * §8.4. Profile 2 sends neither Host (the outer one is bound) nor Date
   * (the time is in n0). `len`: the body's length, null when unknown (a stream).
   */
  innerHead(url: URL, method: string, callerHeaders: Headers, len: number | null, ownDate: boolean, profile: Profile, h: HostState, p: PreparedRequest, askTicket = false): Uint8Array {
    const fields: Field[] = [];
    if (profile === 1 && !callerHeaders.has('host')) fields.push(['Host', url.host]);
    callerHeaders.forEach((value, name) => {
      if (FORBIDDEN.includes(name) || name === 'content-length' || (profile === 1 && ownDate && name === 'date')) return;
      fields.push([name, value]);
    });
    if (profile === 1 && (ownDate || !callerHeaders.has('date'))) fields.push(['Date', formatHttpDate(this.now() + h.clockOffset)]);
    if (len !== null && (len > 0 || method === 'POST' || method === 'PUT')) fields.push(['Content-Length', String(len)]);
    if (askTicket) fields.push([TICKET_FIELD, ASK_SHORT]);
    // An unsafe request's token-required retry presents the ticket that came with the refusal (spec §8.4).
    else if (this.oneShot && SAFE.has(method)) fields.push([TICKET_FIELD, DECLINE]);
    if (!SAFE.has(method)) {
      // A token bound to this very session key proves an earlier round trip; a fresh Client-Random asks for the next one.
      if (h.token !== null && bytesEqual(h.token.sessionKey, p.sessionKey)) fields.push([RANDOM_FIELD, h.token.value]);
      fields.push([CLIENT_RANDOM_FIELD, formatClientRandom(randomBytes(24))]);
    }
    return formatRequestHead({ method, target: url.pathname + url.search, fields });
  }

  /** The outer body of a POST attempt whose body is in memory: the sealed stream (after `ct_M` in suite 2). */
  sealWhole(a: Attempt, bytes: Uint8Array): Uint8Array {
    return outerPayload(a.prepared, sealAll(requestSealer(a.prepared), concat(a.head, bytes), this.recordSize));
  }

  // ---- answers ----

  /**
   * Decides on a non-200 outer answer (unauthenticated: at most a hint for
   * a retry, never data). `unknown-key` takes the problem's certificates
   * (checked in authenticated mode) and retries; a 400 `malformed` answer
   * to a short ticket drops it and retries with a key (spec §7.3: the
   * contract's cookie shape does not cover short tickets, so a ticket key
   * the server no longer holds is `no_cookie`); a 429 `admission`
   * challenge stores its cookie for the host and retries (`bad_admission`
   * above `MAX_CLIENT_DIFFICULTY`); a 429 `busy` retries after its wait.
   * Anything else throws. `retryAfter`: the outer `Retry-After` field.
   */
  refused(a: Attempt, status: number, retryAfter: string | null, text: Uint8Array): Retry {
    const h = a.host;
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
      const usable = this.checked(certs);
      h.ticket = null;
      h.short = null;
      h.certs = usable;
      h.fetched = this.now();
      h.maxAge = usable.length > 0 ? Math.max(h.maxAge, 1) : 0;
      // Suite 2: the problem's `hybrid_certs` (spec/hybrid.md H3); the retry asks OPTIONS {mount}/pq when none is usable.
      if (this.pq !== 'off') this.hybrid.fromProblem(a.origin, problem.hybridCerts, this.now());
      return { kind: 'retry_key' };
    }
    if (a.prepared.ticketForm === 'short' && status === 400 && problem?.type === PROBLEM.malformed) {
      h.short = null;
      return { kind: 'retry_short' };
    }
    const info: ProblemInfo = {
      type: problem?.type ?? '',
      status,
      scope: 'outer',
      ...(problem?.title !== undefined ? { title: problem.title } : {}),
    };
    if (status === 429 && problem?.type === PROBLEM.admission) {
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
      h.admit = { cookie, difficulty: d, until: this.clock() + ADMIT_ECHO_SECONDS };
      // Tickets never meet the defence; a challenged ticket request goes again as a fresh-key request.
      this.#dropPresented(a);
      return { kind: 'retry_admission', problem: info };
    }
    // A suite-2-only server refused v1: a client that may use suite 2 asks OPTIONS {mount}/pq and goes again.
    if (problem?.type === PROBLEM.hybridRequired && this.pq !== 'off' && a.suite === 1) {
      this.hybrid.rediscover(a.origin);
      this.#dropPresented(a);
      return { kind: 'retry_key' };
    }
    if (status === 429 && problem?.type === PROBLEM.busy) {
      const header = Number(retryAfter ?? '');
      const s = problem.retryAfter ?? (Number.isFinite(header) ? header : 1);
      return { kind: 'retry_busy', wait: Math.min(Math.max(0, s), MAX_BUSY_WAIT), problem: info };
    }
    const type = problem?.type ?? '';
    throw new HttpCryptError(type ? codeForProblem(type, 'outer') : 'refused', `outer ${status}${type ? ' ' + type : ''} (unauthenticated)`, info);
  }

  /** Forgets the ticket attempt `a` presented, of either form. */
  #dropPresented(a: Attempt): void {
    if (a.prepared.ticketForm === 'v1') a.host.ticket = null;
    else if (a.prepared.ticketForm === 'short') a.host.short = null;
  }

  /**
   * Keeps the ticket (when tickets are on) and the token an authenticated
   * inner head carries. A short ticket (78 characters, spec §7.3) is kept
   * apart from a v1 one, with the suite of the session it resumes, and
   * starts a new count. The token is bound to the attempt's session key,
   * except in an answer that issues a short ticket: the server computed
   * that `Random` under the ticket's key `k'` (spec §7.3 "Tokens", §8.4),
   * which the next request, presenting the ticket, seals under.
   */
  answered(a: Attempt, inner: ResponseHead): void {
    const h = a.host;
    const p = a.prepared;
    let tokenKey = p.sessionKey;
    const ticketField = fieldValue(inner.fields, TICKET_FIELD);
    if (ticketField !== undefined && this.tickets) {
      try {
        const t = parseAnyTicketField(ticketField);
        if (t.form === 'v1') h.ticket = { ticket: t.ticket, sessionKey: p.sessionKey, suite: a.suite };
        else {
          tokenKey = t.ticket.key;
          if (this.shortTickets !== null) h.short = { ticket: t.ticket, suite: a.suite, used: new ShortUse() };
        }
      } catch {
        // a malformed ticket is ignored; the key pair keeps working
      }
    }
    const random = fieldValue(inner.fields, RANDOM_FIELD);
    if (random !== undefined) h.token = { value: random, sessionKey: tokenKey };
  }

  /** Whether the answer has no body: a 1xx/204/205/304 status, or the answer to HEAD (erratum E2). */
  bodiless(a: Attempt, inner: ResponseHead): boolean {
    return NULL_BODY.has(inner.status) || a.method === 'HEAD';
  }

  /**
   * How much of the inner body to verify whole before anything is
   * released, or null to stream it: a problem document (it may be a
   * protocol problem) and a body-less answer are small.
   */
  wholeBodyLimit(a: Attempt, inner: ResponseHead): number | null {
    const problem = mediaType(fieldValue(inner.fields, 'content-type')) === PROBLEM_TYPE;
    if (problem) return PROBLEM_LIMIT;
    return this.bodiless(a, inner) ? this.maxRecord : null;
  }

  /**
   * Decides on an inner body read whole: a sealed `stale` (the clock offset
   * is corrected from the inner Date) or `token-required` is retried; other
   * `urn:httpcrypt:` problems throw (the server's own word, still a protocol
   * failure, not a document); null: a response like any other.
   */
  judgeProblem(a: Attempt, inner: ResponseHead, bytes: Uint8Array): Retry | null {
    const problem = mediaType(fieldValue(inner.fields, 'content-type')) === PROBLEM_TYPE ? parseProblem(bytes) : null;
    if (problem === null || !problem.type.startsWith('urn:httpcrypt:')) return null;
    if (problem.type === 'urn:httpcrypt:stale') {
      try {
        const server = checkDate(fieldValue(inner.fields, 'date'), 0, Number.MAX_SAFE_INTEGER);
        a.host.clockOffset = server - this.now();
      } catch {
        // no usable Date: retry with the same clock
      }
      return { kind: 'retry_stale' };
    }
    if (problem.type === 'urn:httpcrypt:token-required') return { kind: 'retry_token' };
    throw new HttpCryptError(codeForProblem(problem.type, 'inner'), `server reported ${inner.status} ${problem.type}`, {
      type: problem.type,
      status: inner.status,
      scope: 'inner',
      ...(problem.title !== undefined ? { title: problem.title } : {}),
    });
  }

  /** What the call showed on the wire, its last attempt being `a`. */
  info(a: Attempt, attempts: number, stats: CallStats): ExchangeInfo {
    return {
      credential: a.prepared.credential,
      ticketForm: a.prepared.ticketForm,
      attempts,
      form: a.form,
      outerUrl: a.outerUrl,
      profile: a.profile,
      suite: a.suite,
      admission: { challenges: stats.challenges, busy: stats.busy, echoDifficulty: a.echoDifficulty },
    };
  }
}
