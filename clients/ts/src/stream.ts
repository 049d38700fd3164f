/**
 * Sealed streams (spec §3): `record = header(4) || tag(16) || payload(L)`,
 * header bit 31 FINAL, bit 30 CLEAR, bits 29..0 L. Record `i` uses nonce
 * `n0 + i`; record 0 is bound to the direction (and a response to its
 * request's nonce), every later record to the previous tag.
 *
 * `Sealer` appends records; `Opener` is push-bytes-in, pull-events-out and
 * works for any split of its input (spec §3.6, §11.2).
 *
 * Profile 2 (spec §4.5) changes only record 0's associated data (a request
 * binds the outer `Host`, the labels become `hc2-…`) and the response
 * nonce (`0xff^8 || r`, the body starts with the 16-byte `r`).
 */
import { type Profile, RESPONSE_RANDOM_LEN, hostBytes } from './compact.js';
import { HttpCryptError, fail } from './errors.js';
import { NONCE_LEN, TAG_LEN, aeadOpen, aeadOpenInPlace, aeadSeal, aeadSealInto, concat, nonceAdd, utf8 } from './suite.js';

export const HEADER_LEN = 4;
export const RECORD_OVERHEAD = HEADER_LEN + TAG_LEN;
/** Every receiver accepts records at least this long (spec §3). */
export const RECORD_FLOOR = 16 * 1024;
/** No receiver accepts longer records. */
export const RECORD_CEILING = 1 << 24;
/** Default receiver maximum. */
export const DEFAULT_MAX_RECORD = 1 << 20;
/** At most this many records per stream. */
export const MAX_RECORDS = 2 ** 32;

const FINAL = 0x80000000;
const CLEAR = 0x40000000;
const LEN_MASK = CLEAR - 1;
const REQ_LABEL = utf8('hc1-req');
const RSP_LABEL = utf8('hc1-rsp');
const REQ2_LABEL = utf8('hc2-req');
const RSP2_LABEL = utf8('hc2-rsp');
/** The first 8 bytes of every profile-2 response nonce. */
const RSP2_NONCE_PREFIX = new Uint8Array(NONCE_LEN - RESPONSE_RANDOM_LEN).fill(0xff);

/**
 * Which way a stream flows. A response is bound to its request's nonce; a
 * profile-2 request to the outer `Host` value as sent (its bytes).
 */
export type Direction =
  | { kind: 'request'; profile?: 1 }
  | { kind: 'request'; profile: 2; host: Uint8Array }
  | { kind: 'response'; requestN0: Uint8Array; profile?: Profile };

/**
 * What record 0's associated data holds before its header (spec §3.3, §4.5):
 * `hc1-req`; `hc2-req || u16(len(host)) || host`; `hc1-rsp || request_n0`;
 * `hc2-rsp || request_n0`.
 */
export function firstRecordAdPrefix(direction: Direction): Uint8Array {
  if (direction.kind === 'request') {
    if (direction.profile !== 2) return REQ_LABEL;
    const host = direction.host;
    if (host.length > 0xffff) fail('bad_host', 'Host above 65535 bytes cannot be bound');
    return concat(REQ2_LABEL, Uint8Array.of(host.length >>> 8, host.length & 0xff), host);
  }
  return concat(direction.profile === 2 ? RSP2_LABEL : RSP_LABEL, direction.requestN0);
}

/** The stream nonce of a profile-2 response: `0xff^8 || r` (spec §4.5). */
export function compactResponseNonce(responseRandom: Uint8Array): Uint8Array {
  if (responseRandom.length !== RESPONSE_RANDOM_LEN) fail('config', `a profile-2 response random is ${RESPONSE_RANDOM_LEN} bytes`);
  return concat(RSP2_NONCE_PREFIX, responseRandom);
}

/** Clamps a configured record maximum into `[16 KiB, 2^24]` (spec D13). */
export function clampMaxRecord(m: number): number {
  return Math.min(RECORD_CEILING, Math.max(RECORD_FLOOR, m));
}

function encodeHeader(last: boolean, clear: boolean, len: number): Uint8Array {
  const w = ((last ? FINAL : 0) | (clear ? CLEAR : 0) | (len & LEN_MASK)) >>> 0;
  return new Uint8Array([w >>> 24, (w >>> 16) & 0xff, (w >>> 8) & 0xff, w & 0xff]);
}

/** The chain state both ends share: key, nonce, index, previous tag. */
class Chain {
  index = 0;
  prevTag: Uint8Array = new Uint8Array(TAG_LEN);
  readonly #adPrefix: Uint8Array;
  constructor(
    readonly key: Uint8Array,
    public n0: Uint8Array,
    readonly direction: Direction,
  ) {
    this.#adPrefix = firstRecordAdPrefix(direction);
  }

  ad(header: Uint8Array): Uint8Array {
    if (this.index > 0) return concat(this.prevTag, header);
    return concat(this.#adPrefix, header);
  }

  nonce(): Uint8Array {
    return nonceAdd(this.n0, this.index);
  }
}

/** Produces the records of one stream. After `finish`, no more records. */
export class Sealer {
  readonly #chain: Chain;
  #done = false;

  private constructor(chain: Chain) {
    this.#chain = chain;
  }

  /** A request stream starting at `n0` (the nonce in the outer path). */
  static request(key: Uint8Array, n0: Uint8Array): Sealer {
    return new Sealer(new Chain(key, n0, { kind: 'request' }));
  }

  /**
   * A response stream starting at the fresh nonce `n0`, answering the
   * request whose nonce is `requestN0`. The outer body is `n0 || records`.
   */
  static response(key: Uint8Array, n0: Uint8Array, requestN0: Uint8Array): Sealer {
    return new Sealer(new Chain(key, n0, { kind: 'response', requestN0 }));
  }

  /**
   * A profile-2 request stream (spec §4.5) starting at `n0` (`u40(t) || r`),
   * record 0 bound to the outer `Host` value exactly as sent.
   */
  static compactRequest(key: Uint8Array, n0: Uint8Array, host: string): Sealer {
    return new Sealer(new Chain(key, n0, { kind: 'request', profile: 2, host: hostBytes(host) }));
  }

  /**
   * A profile-2 response stream under the nonce `0xff^8 || responseRandom`,
   * answering the request whose nonce is `requestN0`. The outer body is
   * `responseRandom || records`.
   */
  static compactResponse(key: Uint8Array, responseRandom: Uint8Array, requestN0: Uint8Array): Sealer {
    return new Sealer(new Chain(key, compactResponseNonce(responseRandom), { kind: 'response', requestN0, profile: 2 }));
  }

  /** Records sealed so far. */
  get records(): number {
    return this.#chain.index;
  }

  /** Seals one record. `last` ends the stream; `clear` is for responses only (spec §9). */
  seal(plaintext: Uint8Array, last = false, clear = false): Uint8Array {
    // 16 bytes of slack: the AEAD writes its tag after the ciphertext first.
    const out = new Uint8Array(RECORD_OVERHEAD + plaintext.length + TAG_LEN);
    this.sealInto(plaintext, out, 0, last, clear);
    return out.subarray(0, RECORD_OVERHEAD + plaintext.length);
  }

  /**
   * Seals one record into `out` at `offset`. `out` needs
   * `offset + 20 + L + 16` bytes: the 16 bytes after the record are
   * scratch space (the next record may overwrite them). Returns the record length.
   */
  sealInto(plaintext: Uint8Array, out: Uint8Array, offset: number, last = false, clear = false): number {
    const c = this.#chain;
    if (this.#done) fail('trailing_data', 'stream already finished');
    if (plaintext.length > RECORD_CEILING) fail('record_too_large');
    if (clear && c.direction.kind === 'request') fail('clear_in_request');
    if (c.index >= MAX_RECORDS) fail('too_many_records');
    const len = plaintext.length;
    const header = encodeHeader(last, clear, len);
    const ad = c.ad(header);
    const nonce = c.nonce();
    out.set(header, offset);
    const body = offset + RECORD_OVERHEAD;
    if (clear) {
      out.set(aeadSeal(c.key, nonce, new Uint8Array(0), concat(ad, plaintext)), offset + HEADER_LEN);
      out.set(plaintext, body);
    } else {
      // ciphertext lands in place, the tag right after it; move the tag to its slot.
      aeadSealInto(c.key, nonce, plaintext, ad, out.subarray(body, body + len + TAG_LEN));
      out.copyWithin(offset + HEADER_LEN, body + len, body + len + TAG_LEN);
    }
    c.prevTag = out.slice(offset + HEADER_LEN, body);
    c.index++;
    if (last) this.#done = true;
    return RECORD_OVERHEAD + len;
  }

  /** Seals the FINAL record (possibly empty). */
  finish(plaintext: Uint8Array = new Uint8Array(0), clear = false): Uint8Array {
    return this.seal(plaintext, true, clear);
  }
}

/** Seals a whole plaintext as records of at most `recordSize` bytes (the last one FINAL). */
export function sealAll(sealer: Sealer, plaintext: Uint8Array, recordSize: number): Uint8Array {
  const size = Math.max(1, recordSize);
  const records = Math.max(1, Math.ceil(plaintext.length / size));
  const total = plaintext.length + records * RECORD_OVERHEAD;
  const out = new Uint8Array(total + TAG_LEN);
  let off = 0;
  let o = 0;
  while (plaintext.length - off > size) {
    o += sealer.sealInto(plaintext.subarray(off, off + size), out, o);
    off += size;
  }
  o += sealer.sealInto(plaintext.subarray(off), out, o, true);
  return out.subarray(0, o);
}

/** What an `Opener` yields. */
export type StreamEvent = { type: 'data'; plaintext: Uint8Array; clear: boolean } | { type: 'end' };

type OpenerState = 'nonce' | 'records' | 'end_pending' | 'done' | 'failed';

/**
 * Opens one stream. `receive` takes input in any slices; `nextEvent`
 * yields verified plaintext per record, then `end`; `finish` at the end of
 * input catches truncation. It holds at most one record beyond what was
 * pushed, and releases plaintext only after its tag verified.
 */
export class Opener {
  readonly #chain: Chain;
  readonly #maxRecord: number;
  #buf: Uint8Array = new Uint8Array(0);
  #start = 0;
  #end = 0;
  #state: OpenerState;
  #error: HttpCryptError | null = null;

  private constructor(chain: Chain, maxRecord: number, state: OpenerState) {
    this.#chain = chain;
    this.#maxRecord = clampMaxRecord(maxRecord);
    this.#state = state;
  }

  /** A request stream whose nonce `n0` came from the outer path. */
  static request(key: Uint8Array, n0: Uint8Array, maxRecord = DEFAULT_MAX_RECORD): Opener {
    return new Opener(new Chain(key, n0, { kind: 'request' }), maxRecord, 'records');
  }

  /** A response body (`n0 || stream`) answering the request with nonce `requestN0`. */
  static response(key: Uint8Array, requestN0: Uint8Array, maxRecord = DEFAULT_MAX_RECORD): Opener {
    return new Opener(new Chain(key, new Uint8Array(NONCE_LEN), { kind: 'response', requestN0 }), maxRecord, 'nonce');
  }

  /** A profile-2 request stream (spec §4.5): nonce `n0` from the path, record 0 bound to the outer `Host` value. */
  static compactRequest(key: Uint8Array, n0: Uint8Array, host: string, maxRecord = DEFAULT_MAX_RECORD): Opener {
    return new Opener(new Chain(key, n0, { kind: 'request', profile: 2, host: hostBytes(host) }), maxRecord, 'records');
  }

  /** A profile-2 response body (`r || stream`, 16 bytes of `r`) answering the request with nonce `requestN0`. */
  static compactResponse(key: Uint8Array, requestN0: Uint8Array, maxRecord = DEFAULT_MAX_RECORD): Opener {
    return new Opener(new Chain(key, new Uint8Array(NONCE_LEN), { kind: 'response', requestN0, profile: 2 }), maxRecord, 'nonce');
  }

  /** Records verified so far. */
  get records(): number {
    return this.#chain.index;
  }

  /** Whether the FINAL record has verified. */
  get isComplete(): boolean {
    return this.#state === 'end_pending' || this.#state === 'done';
  }

  #fail(e: HttpCryptError): never {
    this.#state = 'failed';
    this.#error = e;
    this.#buf = new Uint8Array(0);
    this.#start = this.#end = 0;
    throw e;
  }

  /** Pushes received bytes. Bytes after the FINAL record are `trailing_data`. */
  receive(bytes: Uint8Array): void {
    if (this.#error) throw this.#error;
    if (bytes.length === 0) return;
    if (this.#state === 'end_pending' || this.#state === 'done') {
      this.#fail(new HttpCryptError('trailing_data'));
    }
    const have = this.#end - this.#start;
    if (this.#end + bytes.length > this.#buf.length) {
      if (have + bytes.length <= this.#buf.length && this.#start > 0) {
        this.#buf.copyWithin(0, this.#start, this.#end);
      } else {
        const grown = new Uint8Array(Math.max(have + bytes.length, this.#buf.length * 2, 4096));
        grown.set(this.#buf.subarray(this.#start, this.#end));
        this.#buf = grown;
      }
      this.#start = 0;
      this.#end = have;
    }
    this.#buf.set(bytes, this.#end);
    this.#end += bytes.length;
  }

  /** The next event, or `null` when more input is needed (or after `end`). */
  nextEvent(): StreamEvent | null {
    for (;;) {
      if (this.#error) throw this.#error;
      switch (this.#state) {
        case 'done':
          return null;
        case 'end_pending':
          this.#state = 'done';
          return { type: 'end' };
        case 'nonce': {
          // v1: the 24-byte nonce; profile 2: the 16-byte r of the nonce 0xff^8 || r.
          const d = this.#chain.direction;
          const compact = d.kind === 'response' && d.profile === 2;
          const len = compact ? RESPONSE_RANDOM_LEN : NONCE_LEN;
          if (this.#end - this.#start < len) return null;
          const head = this.#buf.slice(this.#start, this.#start + len);
          this.#chain.n0 = compact ? compactResponseNonce(head) : head;
          this.#start += len;
          this.#state = 'records';
          continue;
        }
        default: {
          const rec = this.#openRecord();
          if (rec === null) return null;
          if (rec.last) {
            this.#state = rec.plaintext.length === 0 ? 'done' : 'end_pending';
            if (rec.plaintext.length === 0) return { type: 'end' };
          } else if (rec.plaintext.length === 0) {
            continue;
          }
          return { type: 'data', plaintext: rec.plaintext, clear: rec.clear };
        }
      }
    }
  }

  #openRecord(): { plaintext: Uint8Array; clear: boolean; last: boolean } | null {
    const avail = this.#end - this.#start;
    if (avail < HEADER_LEN) return null;
    const b = this.#buf;
    const s = this.#start;
    const w = ((b[s]! << 24) | (b[s + 1]! << 16) | (b[s + 2]! << 8) | b[s + 3]!) >>> 0;
    const last = (w & FINAL) !== 0;
    const clear = (w & CLEAR) !== 0;
    const len = w & LEN_MASK;
    // Spec §11.2: judge the header before waiting for the payload.
    if (len > this.#maxRecord) this.#fail(new HttpCryptError('record_too_large'));
    if (clear && this.#chain.direction.kind === 'request') this.#fail(new HttpCryptError('clear_in_request'));
    if (this.#chain.index >= MAX_RECORDS) this.#fail(new HttpCryptError('too_many_records'));
    const total = RECORD_OVERHEAD + len;
    if (avail < total) return null;
    const header = b.slice(s, s + HEADER_LEN);
    const tag = b.slice(s + HEADER_LEN, s + RECORD_OVERHEAD);
    const payload = b.subarray(s + RECORD_OVERHEAD, s + total);
    const c = this.#chain;
    const ad = c.ad(header);
    const nonce = c.nonce();
    let plaintext: Uint8Array | null;
    if (clear) {
      const ok = aeadOpen(c.key, nonce, tag, concat(ad, payload));
      plaintext = ok === null ? null : payload.slice();
    } else {
      const sealed = new Uint8Array(len + TAG_LEN);
      sealed.set(payload, 0);
      sealed.set(tag, len);
      plaintext = aeadOpenInPlace(c.key, nonce, sealed, ad) ? sealed.subarray(0, len) : null;
    }
    if (plaintext === null) this.#fail(new HttpCryptError('integrity'));
    c.prevTag = tag;
    c.index++;
    this.#start = s + total;
    if (last && this.#start !== this.#end) this.#fail(new HttpCryptError('trailing_data'));
    return { plaintext, clear, last };
  }

  /** Ends the input: succeeds only if the FINAL record verified (else `truncated`). */
  finish(): void {
    if (this.#error) throw this.#error;
    if (!this.isComplete) this.#fail(new HttpCryptError('truncated'));
  }
}

/** Opens a whole stream held in memory and returns its plaintext. */
export function openAll(opener: Opener, bytes: Uint8Array): Uint8Array {
  opener.receive(bytes);
  const parts: Uint8Array[] = [];
  for (let ev = opener.nextEvent(); ev !== null; ev = opener.nextEvent()) {
    if (ev.type === 'data') parts.push(ev.plaintext);
    else break;
  }
  opener.finish();
  return concat(...parts);
}
