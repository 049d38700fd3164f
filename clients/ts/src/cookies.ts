/**
 * How the HTTPCrypt cookie travels on the outer request: as the `Cookie`
 * field (Node), or in browsers, which forbid that field, as a same-origin
 * cookie scoped to the request's own nonce path, with a bound on how many
 * such cookies a page holds at once.
 */
import { ADMIT_COOKIE_NAME } from './admission.js';
import { HttpCryptError, fail } from './errors.js';
import { type PreparedRequest } from './exchange.js';

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
export const cookieSlots = {
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

/**
 * Puts the cookie pair on the outer request: as the `Cookie` field
 * (Node), or in the browser as a same-origin cookie scoped to this
 * request's unique nonce path (so concurrent requests never collide),
 * removed again once the request has been sent. An admission echo is one
 * more pair, `hc1-admit`, travelling and removed the same way.
 */
export function attachCookie(
  cookieMode: 'header' | 'document',
  p: PreparedRequest,
  echo: string | null,
  outerHeaders: Headers,
  init: RequestInit,
  url: URL,
  path: string,
): () => void {
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
