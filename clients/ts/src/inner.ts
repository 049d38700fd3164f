/**
 * The inner HTTP/1.1 messages a stream carries (spec §4.3): formatting,
 * and an incremental parser under the inner limits with the rules of
 * §4.3 (version, CRLF only, no folding, forbidden fields, Content-Length).
 */
import { HttpCryptError, fail } from './errors.js';
import { concat } from './suite.js';

/** One header field: `[name, value]`, value as a Latin-1 string of its bytes. */
export type Field = [name: string, value: string];

/** Limits on inner heads (spec §4.3). */
export interface InnerLimits {
  maxInnerHead: number;
  maxInnerFields: number;
}
export const DEFAULT_INNER_LIMITS: InnerLimits = { maxInnerHead: 64 * 1024, maxInnerFields: 100 };

/** Inner fields that must not appear (the stream frames the message). */
export const FORBIDDEN = ['transfer-encoding', 'connection', 'keep-alive', 'upgrade'];

export interface RequestHead {
  method: string;
  target: string;
  fields: Field[];
}
export interface ResponseHead {
  status: number;
  reason: string;
  fields: Field[];
}

/** The value of the first field named `name` (case-insensitive). */
export function fieldValue(fields: Field[], name: string): string | undefined {
  const l = name.toLowerCase();
  for (const [n, v] of fields) if (n.toLowerCase() === l) return v;
  return undefined;
}

/** Bytes of a Latin-1 string (each char one byte). */
export function latin1(s: string): Uint8Array {
  const b = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) b[i] = s.charCodeAt(i) & 0xff;
  return b;
}

/** A Latin-1 string of bytes. */
export function fromLatin1(b: Uint8Array): string {
  let s = '';
  for (let i = 0; i < b.length; i += 8192) s += String.fromCharCode(...b.subarray(i, i + 8192));
  return s;
}

function formatFields(fields: Field[]): string {
  let s = '';
  for (const [n, v] of fields) s += `${n}: ${v}\r\n`;
  return s + '\r\n';
}

/** `METHOD SP target SP HTTP/1.1 CRLF fields CRLF`. */
export function formatRequestHead(h: RequestHead): Uint8Array {
  return latin1(`${h.method} ${h.target} HTTP/1.1\r\n${formatFields(h.fields)}`);
}

/** `HTTP/1.1 SP status SP reason CRLF fields CRLF`. */
export function formatResponseHead(h: ResponseHead): Uint8Array {
  return latin1(`HTTP/1.1 ${h.status} ${h.reason}\r\n${formatFields(h.fields)}`);
}

const TCHAR = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
// Request target, reason phrase and field values: what httparse admits.
const TARGET = /^[\x21-\x7e\x80-\xff]+$/;
const REASON = /^[\t \x21-\x7e\x80-\xff]*$/;
const VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;

/** CR only before LF, LF only after CR, no leading whitespace (spec §4.3). */
function checkLineEnds(head: string): void {
  for (let i = 0; i < head.length; i++) {
    const c = head.charCodeAt(i);
    if (c === 10) fail('malformed_inner', 'bare LF');
    if (c === 13) {
      if (head.charCodeAt(i + 1) !== 10) fail('malformed_inner', 'bare CR');
      i++;
    }
  }
  if (/^[\t\n\f\r ]/.test(head)) fail('malformed_inner', 'leading whitespace');
}

/** 1–19 ASCII digits (spec D20). */
function parseContentLength(v: string): bigint | null {
  if (!/^[0-9]{1,19}$/.test(v)) return null;
  return BigInt(v);
}

function parseFields(lines: string[], limits: InnerLimits): Field[] {
  const fields: Field[] = [];
  for (const line of lines) {
    if (fields.length >= limits.maxInnerFields) fail('inner_head_too_large', 'too many fields');
    const colon = line.indexOf(':');
    if (colon <= 0) fail('malformed_inner', 'field line');
    const name = line.slice(0, colon);
    if (!TCHAR.test(name)) fail('malformed_inner', 'field name');
    const value = line.slice(colon + 1).replace(/^[ \t]+|[ \t]+$/g, '');
    if (!VALUE.test(value)) fail('malformed_inner', 'field value');
    fields.push([name, value]);
  }
  return fields;
}

/** Field rules applied after the start line is judged (forbidden fields, Content-Length). */
function checkFields(fields: Field[]): Field[] {
  let cl = 0;
  for (const [n, v] of fields) {
    const l = n.toLowerCase();
    if (FORBIDDEN.includes(l)) fail('forbidden_header', n);
    if (l === 'content-length') {
      cl++;
      if (cl > 1 || parseContentLength(v) === null) fail('content_length_mismatch');
    }
  }
  return fields;
}

/** Splits a complete head (ending in CRLF CRLF) into its start line and field lines. */
function splitHead(head: string): [string, string[]] {
  checkLineEnds(head);
  const lines = head.slice(0, -4).split('\r\n');
  return [lines[0]!, lines.slice(1)];
}

/** Parses a complete request head (through the blank line). */
export function parseRequestHead(head: string, limits: InnerLimits = DEFAULT_INNER_LIMITS): RequestHead {
  const [start, rest] = splitHead(head);
  const m = /^([^ ]+) ([^ ]+) HTTP\/(\d)\.(\d)$/.exec(start);
  if (!m || !TCHAR.test(m[1]!) || !TARGET.test(m[2]!)) fail('malformed_inner', 'request line');
  const fields = parseFields(rest, limits);
  if (m[3] !== '1' || m[4] !== '1') fail('malformed_inner', 'version');
  return { method: m[1]!, target: m[2]!, fields: checkFields(fields) };
}

/** Parses a complete response head (through the blank line). */
export function parseResponseHead(head: string, limits: InnerLimits = DEFAULT_INNER_LIMITS): ResponseHead {
  const [start, rest] = splitHead(head);
  const m = /^HTTP\/(\d)\.(\d) (\d{3})(?: (.*))?$/.exec(start);
  if (!m || !REASON.test(m[4] ?? '')) fail('malformed_inner', 'status line');
  const fields = parseFields(rest, limits);
  if (m[1] !== '1' || m[2] !== '1') fail('malformed_inner', 'version');
  const status = Number(m[3]);
  if (status < 200) fail('malformed_inner', 'informational status');
  return { status, reason: m[4] ?? '', fields: checkFields(fields) };
}

export type InnerEvent<H> = { type: 'head'; head: H } | { type: 'body'; bytes: Uint8Array };

/**
 * Incremental inner-message decoder: `receive` stream plaintext,
 * `nextEvent` yields the head once, then body chunks; `finish` at the end
 * of the stream checks completeness and Content-Length.
 */
export class InnerDecoder<H extends RequestHead | ResponseHead> {
  readonly #parse: (head: string, limits: InnerLimits) => H;
  readonly #limits: InnerLimits;
  /** Head bytes so far: `#headBuf[0..#headLen]`, grown by doubling (no quadratic copying on tiny pushes). */
  #headBuf: Uint8Array = new Uint8Array(0);
  #headLen = 0;
  #pending: Uint8Array[] = [];
  #headDone = false;
  #contentLength: bigint | null = null;
  #bodyLen = 0n;
  #error: HttpCryptError | null = null;
  /** The message answers a HEAD request: its Content-Length is the representation's, its body empty (erratum E2). */
  readonly #answersHead: boolean;

  constructor(parse: (head: string, limits: InnerLimits) => H, limits: InnerLimits = DEFAULT_INNER_LIMITS, answersHead = false) {
    this.#parse = parse;
    this.#limits = limits;
    this.#answersHead = answersHead;
  }

  static request(limits?: InnerLimits): InnerDecoder<RequestHead> {
    return new InnerDecoder(parseRequestHead, limits);
  }
  /**
   * A decoder for the answer to a request with method `requestMethod`
   * (default GET). The answer to HEAD, and any 304, carry the length the
   * representation would have with an empty body (erratum E2, spec §4.3):
   * their Content-Length is checked for syntax only, and a body byte is
   * `content_length_mismatch`.
   */
  static response(limits?: InnerLimits, requestMethod = 'GET'): InnerDecoder<ResponseHead> {
    return new InnerDecoder(parseResponseHead, limits, requestMethod === 'HEAD');
  }

  #fail(e: unknown): never {
    this.#error = e instanceof HttpCryptError ? e : new HttpCryptError('malformed_inner');
    this.#headBuf = new Uint8Array(0);
    this.#headLen = 0;
    this.#pending = [];
    throw this.#error;
  }

  receive(bytes: Uint8Array): void {
    if (this.#error) throw this.#error;
    if (bytes.length > 0) this.#pending.push(bytes);
  }

  nextEvent(): InnerEvent<H> | null {
    if (this.#error) throw this.#error;
    if (!this.#headDone) {
      if (this.#pending.length === 0) return null;
      const scanFrom = Math.max(0, this.#headLen - 3);
      for (const p of this.#pending) {
        if (this.#headLen + p.length > this.#headBuf.length) {
          const grown = new Uint8Array(Math.max(this.#headLen + p.length, this.#headBuf.length * 2, 1024));
          grown.set(this.#headBuf.subarray(0, this.#headLen));
          this.#headBuf = grown;
        }
        this.#headBuf.set(p, this.#headLen);
        this.#headLen += p.length;
      }
      this.#pending = [];
      const buf = this.#headBuf.subarray(0, this.#headLen);
      const end = findHeadEnd(buf, scanFrom);
      if (end < 0) {
        if (buf.length >= this.#limits.maxInnerHead) this.#fail(new HttpCryptError('inner_head_too_large'));
        return null;
      }
      if (end > this.#limits.maxInnerHead) this.#fail(new HttpCryptError('inner_head_too_large'));
      let head: H;
      try {
        head = this.#parse(fromLatin1(buf.subarray(0, end)), this.#limits);
      } catch (e) {
        this.#fail(e);
      }
      const cl = fieldValue(head.fields, 'content-length');
      const bodiless = this.#answersHead || (head as Partial<ResponseHead>).status === 304;
      this.#contentLength = bodiless ? 0n : cl === undefined ? null : parseContentLength(cl);
      this.#headDone = true;
      const rest = buf.slice(end);
      this.#headBuf = new Uint8Array(0);
      this.#headLen = 0;
      if (rest.length > 0) this.#pending.push(rest);
      return { type: 'head', head };
    }
    if (this.#pending.length === 0) return null;
    const bytes = this.#pending.length === 1 ? this.#pending[0]! : concat(...this.#pending);
    this.#pending = [];
    this.#bodyLen += BigInt(bytes.length);
    if (this.#contentLength !== null && this.#bodyLen > this.#contentLength) {
      this.#fail(new HttpCryptError('content_length_mismatch'));
    }
    return { type: 'body', bytes };
  }

  /** Call at the end of the stream, after pulling every event. */
  finish(): void {
    if (this.#error) throw this.#error;
    if (!this.#headDone) this.#fail(new HttpCryptError('malformed_inner', 'incomplete head'));
    if (this.#pending.length > 0) this.#fail(new HttpCryptError('malformed_inner'));
    if (this.#contentLength !== null && this.#contentLength !== this.#bodyLen) {
      this.#fail(new HttpCryptError('content_length_mismatch'));
    }
  }
}

function findHeadEnd(b: Uint8Array, from: number): number {
  for (let i = from; i + 3 < b.length; i++) {
    if (b[i] === 13 && b[i + 1] === 10 && b[i + 2] === 13 && b[i + 3] === 10) return i + 4;
  }
  return -1;
}

/** Decodes a whole inner message held in memory. */
export function decodeAll<H extends RequestHead | ResponseHead>(dec: InnerDecoder<H>, plaintext: Uint8Array): { head: H; body: Uint8Array } {
  dec.receive(plaintext);
  let head: H | null = null;
  const body: Uint8Array[] = [];
  for (let ev = dec.nextEvent(); ev !== null; ev = dec.nextEvent()) {
    if (ev.type === 'head') head = ev.head;
    else body.push(ev.bytes);
  }
  dec.finish();
  if (head === null) fail('malformed_inner');
  return { head, body: concat(...body) };
}
