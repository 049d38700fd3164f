/**
 * `createClient` / `hcFetch`: a `fetch`-compatible HTTPCrypt client for
 * browsers and Node 20, the thin driver around the IO-free `Engine`
 * (`engine.ts`). It finds the server's keys (`OPTIONS {mount}/`, cached
 * for `max-age`), sends the request the engine planned (GET form when it
 * fits, else POST, streaming the body where the platform can), opens the
 * response incrementally and hands out a standard `Response` whose body
 * yields only verified bytes. The engine decides what each answer means:
 * one retry on outer `unknown-key`, one on inner `stale` and one after a
 * refused short ticket (spec §7.3), never on `replay` (spec §11.5); under
 * a server's admission defence (spec §14.5) the puzzle of an outer 429
 * `admission` challenge is solved and `busy` is waited out, at most three
 * such retries per call. The answer to HEAD and
 * a 304 have no body (erratum E2). Failures to reach or recognise a server
 * are the shared diagnoses of spec §12 (`connect_failed`, `timeout`,
 * `not_httpcrypt`, `no_endpoint`). With `pq` on, discovery asks
 * `OPTIONS {mount}/pq` first (spec/hybrid.md H4) and falls back to v1 only
 * where the engine allows it.
 */
import { own, normalizeBody, openBody, outerBody, readLimited, sealStream } from './body.js';
import { type KeyCert } from './cert.js';
import { attachCookie, cookieSlots } from './cookies.js';
import { Watchdog, sleep, transportError } from './diagnose.js';
import { type Attempt, type CallerBody } from './attempt.js';
import { Engine, PROBLEM_LIMIT } from './engine.js';
import { type EngineOptions, type ExchangeInfo } from './options.js';
import { type HybridKey } from './pq.js';
import { HttpCryptError, fail } from './errors.js';
import { responseOpener } from './exchange.js';
import { InnerDecoder } from './inner.js';
import { OCTET_STREAM } from './outer.js';
import { MAX_ATTEMPTS, type Retry, Retries } from './retry.js';

export { DEFAULT_MOUNTS, type ExchangeInfo } from './options.js';
export { MAX_LIVE_COOKIES } from './cookies.js';
export { type HybridKey, type PqMode } from './pq.js';

/** Options of `createClient`: the engine's settings and the driver's. */
export interface ClientOptions extends EngineOptions {
  /**
   * Seconds without progress after which a call fails with `timeout`
   * (default 30): while connecting and waiting for an answer, between
   * request records sent, and while a read of the response body waits for
   * the network (a caller that stops reading is not timed out). `0`: none.
   */
  timeout?: number;
  /** The transport (default `globalThis.fetch`). */
  fetch?: typeof globalThis.fetch;
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
}

const INFO = new WeakMap<Response, ExchangeInfo>();

/** The exchange details of a response `hcFetch` returned. */
export function exchangeInfo(res: Response): ExchangeInfo | undefined {
  return INFO.get(res);
}

/** The HTTPCrypt client: `fetch` plus state per host (keys, tickets, clock offset). */
export interface HcClient {
  fetch(input: string | URL | Request, init?: RequestInit): Promise<Response>;
  /** Fetches (or returns cached) certificates of `origin` (`http://host[:port]`). */
  refreshCerts(origin: string): Promise<KeyCert[]>;
  /** Forget cached keys and tickets (all hosts). */
  clear(): void;
}

type Outcome = { kind: 'done'; response: Response } | Retry;

/** Creates a client. */
export function createClient(options: ClientOptions = {}): HcClient {
  const engine = new Engine(options);
  const timeout = options.timeout ?? 30;
  const transport = options.fetch ?? ((...a: Parameters<typeof fetch>) => globalThis.fetch(...a));
  const hasDocument = typeof (globalThis as { document?: unknown }).document !== 'undefined';
  const cookieMode = options.cookieMode ?? (hasDocument ? 'document' : 'header');
  const streaming = options.streamingUploads ?? !hasDocument;

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
    let first: unknown = null;
    for (const m of engine.mounts(origin)) {
      try {
        return await optionsAt(origin, m);
      } catch (e) {
        if (!(e instanceof HttpCryptError && (e.code === 'no_endpoint' || e.code === 'not_httpcrypt'))) throw e;
        first ??= e;
      }
    }
    throw first;
  }

  async function optionsAt(origin: string, m: string): Promise<KeyCert[]> {
    const watchdog = new Watchdog(timeout, undefined);
    let rsp: Response;
    watchdog.arm(`fetching the certificates (OPTIONS ${m}/)`);
    try {
      rsp = await transport(`${origin}${m}/`, { method: 'OPTIONS', cache: 'no-store', redirect: 'manual', signal: watchdog.signal });
    } catch (e) {
      throw transportError(watchdog.explain(e), origin, `OPTIONS ${origin}${m}/`);
    } finally {
      watchdog.disarm();
    }
    const contentType = rsp.headers.get('content-type');
    const refusal = engine.optionsRefusal(origin, m, rsp.status, contentType);
    if (refusal !== null) {
      // A refusal's body is read (within a bound) rather than cancelled, which a browser would log as a failed request.
      await readLimited(rsp.body, PROBLEM_LIMIT).catch(() => undefined);
      throw refusal;
    }
    let text: Uint8Array;
    watchdog.arm(`reading the certificates (OPTIONS ${m}/)`);
    try {
      text = await readLimited(rsp.body, PROBLEM_LIMIT);
    } catch (e) {
      throw transportError(watchdog.explain(e), origin, `OPTIONS ${origin}${m}/`);
    } finally {
      watchdog.disarm();
    }
    return engine.storeCerts(origin, m, rsp.status, contentType, rsp.headers.get('cache-control'), text);
  }

  /** Suite-2 discoveries in flight, one per origin. */
  const discoveringHybrid = new Map<string, Promise<HybridKey | null>>();

  function refreshHybrid(origin: string): Promise<HybridKey | null> {
    let p = discoveringHybrid.get(origin);
    if (p === undefined) {
      p = discoverHybrid(origin).finally(() => discoveringHybrid.delete(origin));
      discoveringHybrid.set(origin, p);
    }
    return p;
  }

  /**
   * `OPTIONS {mount}/pq` at each candidate mount until one answers a list
   * with a suite-2 certificate (spec/hybrid.md H4). Any other answer means
   * "no suite 2 here"; none anywhere is the engine's to judge (v1, or
   * `hybrid_downgrade`). Transport failures are thrown as for v1.
   */
  async function discoverHybrid(origin: string): Promise<HybridKey | null> {
    let cacheControl: string | null = null;
    for (const m of engine.mounts(origin)) {
      const path = `${m}/pq`;
      const watchdog = new Watchdog(timeout, undefined);
      let rsp: Response;
      let text: Uint8Array;
      watchdog.arm(`fetching the suite-2 certificates (OPTIONS ${path})`);
      try {
        rsp = await transport(`${origin}${path}`, { method: 'OPTIONS', cache: 'no-store', redirect: 'manual', signal: watchdog.signal });
        if (!engine.isHybridList(rsp.status, rsp.headers.get('content-type'))) {
          // Not a list (a 404 page, of any size): read within a bound and let go, as for v1's refusals.
          await readLimited(rsp.body, PROBLEM_LIMIT).catch(() => undefined);
          cacheControl ??= rsp.headers.get('cache-control');
          continue;
        }
        text = await readLimited(rsp.body, PROBLEM_LIMIT);
      } catch (e) {
        throw transportError(watchdog.explain(e), origin, `OPTIONS ${origin}${path}`);
      } finally {
        watchdog.disarm();
      }
      const key = engine.storeHybrid(origin, m, rsp.headers.get('content-type'), rsp.headers.get('cache-control'), text);
      if (key !== null) return key;
    }
    engine.noHybrid(origin, cacheControl);
    return null;
  }

  async function currentCert(origin: string): Promise<KeyCert | HybridKey> {
    const t = engine.now();
    if (engine.pq !== 'off') {
      const cached = engine.cachedHybrid(origin, t);
      if (cached !== null) return cached;
      if (engine.wantsHybrid(origin, t)) {
        const found = await refreshHybrid(origin);
        if (found !== null) return found;
      }
      engine.allowClassical(origin);
    }
    return engine.cachedCert(origin, t) ?? engine.chooseFetched(await refreshCerts(origin), t);
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

    // A streamed body is consumed by its attempt: no retry is possible (state is refreshed for the next call).
    const retries = new Retries(body.stream === null);
    for (let attempts = 1; attempts <= MAX_ATTEMPTS; attempts++) {
      const outcome = await sendOnce(url, method, headers, body, attempts, retries, signal ?? undefined);
      if (outcome.kind === 'done') return outcome.response;
      const wait = retries.allow(outcome);
      if (wait !== null) await sleep(wait, signal ?? undefined);
    }
    fail('config', 'too many attempts');
  }

  async function sendOnce(url: URL, method: string, callerHeaders: Headers, body: CallerBody, attempts: number, retries: Retries, signal: AbortSignal | undefined): Promise<Outcome> {
    const cert = await currentCert(url.origin);
    // Browsers: a slot for this request's cookie, taken before sealing (profile 2 seals the time).
    const slot = cookieMode === 'document' ? await cookieSlots.take(signal) : () => undefined;
    const watchdog = new Watchdog(timeout, signal);
    try {
      const a = await engine.plan(url, method, callerHeaders, body, retries.ownDate, cert, watchdog.signal);
      const rsp = await send(a, url, body, slot, watchdog);
      return await receive(a, url, rsp, attempts, retries, watchdog);
    } finally {
      slot();
    }
  }

  /** Sends the planned attempt; the answer's head is in when it resolves. */
  async function send(a: Attempt, url: URL, body: CallerBody, slot: () => void, watchdog: Watchdog): Promise<Response> {
    const outerHeaders = new Headers();
    // Outside only what the network needs (erratum E1): not even the page's address as Referer.
    const outerInit: RequestInit & { duplex?: 'half' } = { headers: outerHeaders, redirect: 'manual', signal: watchdog.signal, referrerPolicy: 'no-referrer' };
    outerInit.method = a.form === 'get' ? 'GET' : 'POST';
    if (a.form === 'post') {
      outerHeaders.set('Content-Type', OCTET_STREAM);
      const rs = engine.recordSize;
      if (body.stream !== null) {
        const sealed = sealStream(a.prepared, a.head, body.stream, rs, watchdog);
        if (streaming) {
          outerInit.body = sealed;
          outerInit.duplex = 'half';
        } else {
          outerInit.body = own(await readLimited(sealed, Number.MAX_SAFE_INTEGER));
        }
      } else {
        const bytes = body.bytes ?? new Uint8Array(0);
        if (streaming && bytes.length > rs) {
          // Sealed record by record as the transport takes them, so that a server refusing the body early is heard.
          outerInit.body = sealStream(a.prepared, a.head, new Blob([own(bytes)]).stream(), rs, watchdog);
          outerInit.duplex = 'half';
        } else {
          outerInit.body = own(engine.sealWhole(a, bytes));
        }
      }
    }
    const release = attachCookie(cookieMode, a.prepared, a.echo, outerHeaders, outerInit, url, new URL(a.outerUrl).pathname);
    watchdog.arm(outerInit.body instanceof ReadableStream ? 'sending the request' : 'waiting for the response');
    try {
      return await transport(a.outerUrl, outerInit);
    } catch (e) {
      throw transportError(watchdog.explain(e), a.origin, `${a.method} ${url.href}`);
    } finally {
      watchdog.disarm();
      // The request is answered: its cookie leaves the jar and its slot is free for the next one.
      release();
      slot();
    }
  }

  /** Reads the answer to attempt `a` as far as the engine needs to decide on it, and hands out the response. */
  async function receive(a: Attempt, url: URL, rsp: Response, attempts: number, retries: Retries, watchdog: Watchdog): Promise<Outcome> {
    if (rsp.status !== 200) {
      watchdog.arm('reading the response');
      const text = await readLimited(rsp.body, PROBLEM_LIMIT)
        .catch(() => new Uint8Array(0))
        .finally(() => watchdog.disarm());
      return engine.refused(a, rsp.status, rsp.headers.get('retry-after'), text);
    }

    const opened = openBody(responseOpener(a.prepared, engine.maxRecord), InnerDecoder.response(engine.innerLimits, a.method), outerBody(rsp), watchdog);
    const inner = await opened.head;
    engine.answered(a, inner);
    let bodyStream: ReadableStream<Uint8Array> | null = opened.body;
    const whole = engine.wholeBodyLimit(a, inner);
    if (whole !== null) {
      // Small (or empty) bodies are verified whole before anything is released.
      const bytes = await readLimited(opened.body, whole);
      const retry = engine.judgeProblem(a, inner, bytes);
      if (retry !== null) return retry;
      bodyStream = engine.bodiless(a, inner) ? null : new Blob([own(bytes)]).stream();
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
    INFO.set(response, engine.info(a, attempts, retries.stats));
    Object.defineProperty(response, 'url', { value: url.href });
    return { kind: 'done', response };
  }

  return {
    fetch: hcFetch,
    refreshCerts,
    clear: () => engine.clear(),
  };
}

let defaultClient: HcClient | null = null;

/** `fetch` over HTTPCrypt with a shared default client (mount `''`, opportunistic mode). */
export function hcFetch(input: string | URL | Request, init?: RequestInit): Promise<Response> {
  defaultClient ??= createClient();
  return defaultClient.fetch(input, init);
}
