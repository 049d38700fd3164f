/**
 * The client's suite-2 decisions (spec/hybrid.md H4, H5), without IO: per
 * origin, the suite-2 certificates `OPTIONS {mount}/pq` answered (cached
 * for `max-age`), whether the server was found to offer none, and the pin
 * (an origin where a valid suite-2 certificate was seen stays suite 2 until
 * that certificate's `not_after`); engine-wide, the ML-KEM encapsulation
 * keys by `kem_hash`, so a kex rotation that keeps the ML-KEM key costs
 * nothing more. Failures: `hybrid_downgrade` (pinned or required, and no
 * suite 2 offered), `kem_mismatch` (no key text matches the certificate).
 */
import { type KeyCert, chooseCert } from './cert.js';
import { HttpCryptError, fail } from './errors.js';
import { kemHash } from './hybrid.js';
import { type HybridCert, anyCertFromText, isHybridCert, parseHybridCertList, verifyHybridCert } from './hybridcert.js';
import { toHex } from './suite.js';

/** The `pq` option: `off` (v1 only), `prefer` (suite 2 when offered, pinned once seen), `require` (suite 2 or nothing). */
export type PqMode = 'off' | 'prefer' | 'require';

/** A suite-2 key the client can encapsulate to: the certificate and the ML-KEM key its `kem_hash` names. */
export interface HybridKey {
  cert: HybridCert;
  ek: Uint8Array;
}

/** How long a server found to offer no suite 2 is not asked again, without a `max-age` (seconds). */
export const PQ_ABSENT_SECONDS = 300;
/** Encapsulation keys kept (by `kem_hash`); one per ML-KEM key of each origin in use. */
export const KEM_CACHE_SIZE = 64;

interface Origin {
  certs: HybridCert[];
  fetched: number;
  maxAge: number;
  /** Until when (clock seconds) the server counts as offering no suite 2. */
  absentUntil: number;
  /** Until when (clock seconds) the origin is pinned to suite 2: the latest `not_after` seen. */
  pinUntil: number;
}

/** Where a `max-age` directive gives one, its seconds (at least 1), else `fallback`. */
export function maxAgeOf(cacheControl: string | null, fallback: number): number {
  const m = /(?:^|,)\s*max-age=(\d+)/.exec(cacheControl ?? '');
  return m ? Math.max(1, Number(m[1])) : fallback;
}

/** The suite-2 state of a client: per origin, and the encapsulation keys by hash. */
export class HybridState {
  readonly mode: PqMode;
  readonly #identity: Uint8Array | undefined;
  readonly #origins = new Map<string, Origin>();
  readonly #kemKeys = new Map<string, Uint8Array>();

  constructor(mode: PqMode, identity: Uint8Array | undefined) {
    if (mode !== 'off' && mode !== 'prefer' && mode !== 'require') fail('config', `pq must be 'off', 'prefer' or 'require'`);
    this.mode = mode;
    this.#identity = identity;
  }

  #origin(origin: string): Origin {
    let o = this.#origins.get(origin);
    if (o === undefined) {
      o = { certs: [], fetched: 0, maxAge: 0, absentUntil: 0, pinUntil: 0 };
      this.#origins.set(origin, o);
    }
    return o;
  }

  /** Forgets every origin's suite-2 state, the pins and the cached keys. */
  clear(): void {
    this.#origins.clear();
    this.#kemKeys.clear();
  }

  /** Whether `origin` must use suite 2 at `t`: the client requires it, or the origin is pinned. */
  hybridOnly(origin: string, t: number): boolean {
    return this.mode === 'require' || t <= this.#origin(origin).pinUntil;
  }

  /** Until when `origin` is pinned to suite 2 (0: not pinned). */
  pinnedUntil(origin: string): number {
    return this.#origin(origin).pinUntil;
  }

  /** Keeps an encapsulation key under its hash (bounded: the oldest goes first). */
  #keepKem(ek: Uint8Array): void {
    const h = toHex(kemHash(ek));
    this.#kemKeys.delete(h);
    this.#kemKeys.set(h, ek);
    while (this.#kemKeys.size > KEM_CACHE_SIZE) {
      const oldest = this.#kemKeys.keys().next().value;
      if (oldest === undefined) break;
      this.#kemKeys.delete(oldest);
    }
  }

  /** The cached encapsulation key of `hash`, if any. */
  kemKey(hash: Uint8Array): Uint8Array | undefined {
    return this.#kemKeys.get(toHex(hash));
  }

  /** Certificates the pinned identity signed (all in opportunistic mode). */
  #checked(certs: HybridCert[]): HybridCert[] {
    const id = this.#identity;
    if (id === undefined) return certs;
    return certs.filter((c) => {
      try {
        verifyHybridCert(c, id);
        return true;
      } catch {
        return false;
      }
    });
  }

  /** The best of `certs` (already checked) at `t` whose ML-KEM key is known, or null. */
  #choose(certs: HybridCert[], t: number): HybridKey | null {
    const usable = certs.filter((c) => this.kemKey(c.kemHash) !== undefined);
    try {
      const cert = chooseCert(usable, t);
      const ek = this.kemKey(cert.kemHash);
      return ek === undefined ? null : { cert, ek };
    } catch {
      return null;
    }
  }

  /** Pins `origin` to suite 2 until the latest `not_after` of `certs` valid at `t`. */
  #pin(o: Origin, certs: HybridCert[], t: number): void {
    for (const c of certs) if (c.notBefore <= t && t <= c.notAfter) o.pinUntil = Math.max(o.pinUntil, c.notAfter);
  }

  /** The suite-2 key to use at `t` from the cached certificates, if they are fresh and one is usable. */
  cached(origin: string, t: number): HybridKey | null {
    const o = this.#origin(origin);
    if (o.certs.length === 0 || (o.maxAge !== 0 && t >= o.fetched + o.maxAge)) return null;
    return this.#choose(o.certs, t);
  }

  /** Whether `OPTIONS {mount}/pq` should be asked at `t` (not after a recent answer that there is no suite 2). */
  shouldDiscover(origin: string, t: number): boolean {
    return t >= this.#origin(origin).absentUntil;
  }

  /**
   * Takes the list `OPTIONS {mount}/pq` answered (both suites and key
   * texts may be in it; every line must parse): keeps the key texts by
   * hash, the suite-2 certificates (signed, in authenticated mode) for
   * `max-age`, pins the origin, and returns the key to use, or null when
   * the list offers no valid suite-2 certificate (then `absent` decides).
   * Suite-1 certificates of the list are returned apart for the v1 path.
   * A valid certificate whose key text is in neither the list nor the
   * cache is `kem_mismatch` when the list holds other key texts. In
   * authenticated mode, valid suite-2 certificates none of which the
   * identity signed are `bad_signature`, as in v1.
   */
  store(origin: string, text: Uint8Array, cacheControl: string | null, t: number): { key: HybridKey | null; suite1: KeyCert[] } {
    const list = parseHybridCertList(text);
    for (const ek of list.kemKeys) this.#keepKem(ek);
    const offered = list.certs.filter(isHybridCert);
    const certs = this.#checked(offered);
    const suite1 = list.certs.filter((c): c is KeyCert => !isHybridCert(c));
    const o = this.#origin(origin);
    const isValid = (c: HybridCert): boolean => c.notBefore <= t && t <= c.notAfter;
    const valid = certs.filter(isValid);
    if (valid.length === 0) {
      if (offered.some(isValid)) fail('bad_signature', 'the suite-2 certificates are not signed by the pinned identity');
      return { key: null, suite1 };
    }
    o.certs = certs;
    o.fetched = t;
    o.maxAge = maxAgeOf(cacheControl, 0);
    o.absentUntil = 0;
    this.#pin(o, valid, t);
    const key = this.#choose(certs, t);
    if (key === null) {
      if (list.kemKeys.length > 0) fail('kem_mismatch', 'no key text matches the suite-2 certificate');
      fail('bad_certificate', 'the suite-2 certificate came without its key text');
    }
    return { key, suite1 };
  }

  /**
   * Discovery found no suite 2 at `t` (`OPTIONS {mount}/pq` answered 404,
   * or a list without a valid suite-2 certificate). Pinned or required:
   * `hybrid_downgrade`. Otherwise the origin is not asked again for
   * `max-age` (else `PQ_ABSENT_SECONDS`) and v1 is used.
   */
  absent(origin: string, t: number, cacheControl: string | null = null): void {
    const o = this.#origin(origin);
    this.refuseClassical(origin, t);
    o.certs = [];
    o.absentUntil = t + maxAgeOf(cacheControl, PQ_ABSENT_SECONDS);
  }

  /** Asks `OPTIONS {mount}/pq` again on the next call (the server said it takes suite 2 only). */
  rediscover(origin: string): void {
    this.#origin(origin).absentUntil = 0;
  }

  /** Throws `hybrid_downgrade` when `origin` must use suite 2 at `t` (about to use v1). */
  refuseClassical(origin: string, t: number): void {
    if (this.mode === 'require') {
      throw new HttpCryptError('hybrid_downgrade', `${origin} offers no suite-2 (hybrid) key and the client requires one`);
    }
    const until = this.#origin(origin).pinUntil;
    if (t <= until) {
      throw new HttpCryptError('hybrid_downgrade', `${origin} offers no suite-2 (hybrid) key, but a suite-2 certificate valid until ${until} was seen: refusing to fall back`);
    }
  }

  /**
   * Takes the `hybrid_certs` of an `unknown-key` problem (unauthenticated:
   * only certificates that parse, and that the identity signed in
   * authenticated mode). Those whose ML-KEM key is cached are used next;
   * when none is, the cache is dropped so the next call asks
   * `OPTIONS {mount}/pq` again.
   */
  fromProblem(origin: string, lines: readonly string[], t: number): void {
    const certs: HybridCert[] = [];
    for (const line of lines) {
      try {
        const c = anyCertFromText(line);
        if (isHybridCert(c)) certs.push(c);
      } catch {
        // lines that do not parse are skipped
      }
    }
    const o = this.#origin(origin);
    const usable = this.#checked(certs);
    if (this.#choose(usable, t) !== null) {
      o.certs = usable;
      o.fetched = t;
      o.maxAge = Math.max(o.maxAge, 1);
    } else {
      o.certs = [];
      o.fetched = 0;
    }
  }
}
