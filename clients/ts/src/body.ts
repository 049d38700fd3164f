/**
 * The bodies of the fetch driver: the caller's body as bytes or a stream,
 * the sealed request stream produced record by record as the transport
 * takes it, and the response opened incrementally so that only verified
 * bytes come out. Every wait on the network arms the call's `Watchdog`.
 */
import { type Watchdog } from './diagnose.js';
import { HttpCryptError, fail } from './errors.js';
import { type PreparedRequest, requestSealer } from './exchange.js';
import { InnerDecoder, type ResponseHead } from './inner.js';
import { type Opener } from './stream.js';
import { concat } from './suite.js';

/** A view typed as backed by a plain ArrayBuffer (what BodyInit/BlobPart want). */
export function own(b: Uint8Array): Uint8Array<ArrayBuffer> {
  return b.buffer instanceof ArrayBuffer ? (b as Uint8Array<ArrayBuffer>) : new Uint8Array(b);
}

/** Reads a whole body, failing with `body_too_large` past `limit` bytes. */
export async function readLimited(body: ReadableStream<Uint8Array> | null, limit: number): Promise<Uint8Array> {
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
export async function normalizeBody(body: BodyInit | null | undefined): Promise<{ bytes: Uint8Array | null; stream: ReadableStream<Uint8Array> | null; type: string | null }> {
  if (body === null || body === undefined) return { bytes: null, stream: null, type: null };
  if (body instanceof ReadableStream) return { bytes: null, stream: body as ReadableStream<Uint8Array>, type: null };
  if (body instanceof Uint8Array) return { bytes: body, stream: null, type: null };
  const r = new Response(body);
  return { bytes: new Uint8Array(await r.arrayBuffer()), stream: null, type: r.headers.get('content-type') };
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
export function outerBody(rsp: Response): ReadableStream<Uint8Array> | null {
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

/** Seals `head` then the caller's body stream, as records of `recordSize`, the last FINAL; in suite 2 after `ct_M`. */
export function sealStream(p: PreparedRequest, head: Uint8Array, input: ReadableStream<Uint8Array>, recordSize: number, watchdog: Watchdog): ReadableStream<Uint8Array> {
  const sealer = requestSealer(p);
  const reader = input.getReader();
  let pending: Uint8Array = head;
  let ended = false;
  // Suite 2: the ML-KEM ciphertext goes first (spec/hybrid.md H3).
  let prefix = p.kemCiphertext;
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (prefix !== null) {
        controller.enqueue(prefix);
        prefix = null;
        return;
      }
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
export function openBody(
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
