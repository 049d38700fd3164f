// hcFetch against the in-memory server (src/server.ts) through a fake
// transport: both cookie modes (the browser one with a simulated cookie
// jar that attaches cookies by path, as browsers do), concurrency,
// refusal of cross-origin and https, tampering and truncation, retries.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as hc from '../dist/index.js';
import { NOW, ORIGIN, fakeFetch, installBrowser, makeServer } from './fake.mjs';

test('header mode (Node): the Cookie field carries the pair; GET form then POST form', async () => {
  const srv = makeServer();
  const log = [];
  const c = hc.createClient({ mount: '/hc', identity: srv.identity, fetch: fakeFetch(srv, { log }) });
  const small = await c.fetch(`${ORIGIN}/a?b=1`);
  assert.equal(small.status, 200);
  assert.deepEqual(await small.json().then((d) => [d.method, d.target, d.length]), ['GET', '/a?b=1', 0]);
  assert.equal(hc.exchangeInfo(small).form, 'get');
  const big = await c.fetch(`${ORIGIN}/upload`, { method: 'POST', body: new Uint8Array(5000) });
  const d = await big.json();
  assert.equal(d.length, 5000);
  assert.equal(hc.exchangeInfo(big).form, 'post');
  assert.equal(hc.exchangeInfo(big).credential, 'ticket');
  const fields = Object.fromEntries(d.fields.map(([n, v]) => [n.toLowerCase(), v]));
  assert.equal(fields['content-length'], '5000');
  assert.match(fields['client-random'], /^[A-Za-z0-9_-]{32}$/, 'unsafe methods ask for a token');
  assert.ok(fields.date && fields.host === 'app.test:8080');
  assert.equal(log.filter((l) => l.method !== 'OPTIONS').length, 2);
});

test('document mode (browsers): a cookie per nonce path, sent same-origin, removed afterwards, no collisions', async () => {
  const srv = makeServer();
  const b = installBrowser(ORIGIN);
  try {
    const log = [];
    const c = hc.createClient({ mount: '/hc', tickets: false, fetch: fakeFetch(srv, { cookiesFor: b.cookiesFor, log }) });
    const results = await Promise.all(Array.from({ length: 12 }, (_, i) => c.fetch(`/item/${i}`).then((r) => r.json())));
    results.forEach((d, i) => assert.equal(d.target, `/item/${i}`));
    const sealed = log.filter((l) => l.method !== 'OPTIONS');
    assert.equal(sealed.length, 12);
    for (const l of sealed) {
      assert.equal(l.credentials, 'same-origin');
      assert.equal(l.cookies.length, 1);
      assert.equal(l.cookies[0].split(';').length, 1, 'exactly one HTTPCrypt pair: its own');
    }
    for (const w of b.writes) assert.match(w, /; path=\/hc\/[A-Za-z0-9_-]{32}; max-age=(60|0); samesite=strict$/);
    assert.equal(b.jar.size, 0, 'every per-request cookie was deleted');
  } finally {
    b.uninstall();
  }
});

test('document mode refuses cross-origin requests (the cookie cannot travel there)', async () => {
  const srv = makeServer();
  const b = installBrowser('http://other.test');
  try {
    const c = hc.createClient({ mount: '/hc', certs: hc.server.validCerts(srv.cfg, NOW).map(hc.certToText), fetch: fakeFetch(srv, { cookiesFor: b.cookiesFor }) });
    await assert.rejects(c.fetch(`${ORIGIN}/x`), (e) => e instanceof hc.HttpCryptError && e.code === 'config');
    assert.equal(b.jar.size, 0);
  } finally {
    b.uninstall();
  }
});

test('https URLs are refused: HTTPCrypt replaces TLS', async () => {
  const c = hc.createClient({ fetch: () => assert.fail('no request expected') });
  await assert.rejects(c.fetch('https://example.com/'), (e) => e.code === 'config');
});

test('a flipped response byte: the fetch rejects with integrity (nothing released)', async () => {
  const srv = makeServer();
  for (const at of [0, 24, 30, 60, 100]) {
    const c = hc.createClient({ mount: '/hc', fetch: fakeFetch(srv, { tamper: (b) => ((b[at] ^= 1), b) }) });
    await assert.rejects(
      c.fetch(`${ORIGIN}/x`).then((r) => r.arrayBuffer()),
      (e) => e instanceof hc.HttpCryptError && ['integrity', 'record_too_large'].includes(e.code),
      `flip at ${at}`,
    );
  }
});

test('a truncated response: the body errors with truncated, never ends cleanly', async () => {
  const srv = makeServer();
  const c = hc.createClient({ mount: '/hc', fetch: fakeFetch(srv, { tamper: (b) => b.subarray(0, b.length - 1) }) });
  await assert.rejects(
    c.fetch(`${ORIGIN}/x`).then((r) => r.text()),
    (e) => e instanceof hc.HttpCryptError && e.code === 'truncated',
  );
  const c2 = hc.createClient({ mount: '/hc', fetch: fakeFetch(srv, { tamper: (b) => hc.concat(b, Uint8Array.of(0)) }) });
  await assert.rejects(
    c2.fetch(`${ORIGIN}/x`).then((r) => r.text()),
    (e) => e instanceof hc.HttpCryptError && e.code === 'trailing_data',
  );
});

test('unknown-key: one retry with the certificates of the problem document', async () => {
  const srv = makeServer();
  const stale = makeServer(); // another server's certificate: unknown here
  const staleLines = hc.server.validCerts(stale.cfg, NOW).map(hc.certToText);
  const c = hc.createClient({ mount: '/hc', certs: staleLines, tickets: false, fetch: fakeFetch(srv) });
  const r = await c.fetch(`${ORIGIN}/x`);
  assert.equal(r.status, 200);
  assert.equal(hc.exchangeInfo(r).attempts, 2);
  await r.arrayBuffer();
});

test('a streamed body is sealed record by record', async () => {
  const srv = makeServer();
  const c = hc.createClient({ mount: '/hc', recordSize: 1000, fetch: fakeFetch(srv) });
  const chunks = [new Uint8Array(700), new Uint8Array(2500), new Uint8Array(1)];
  const body = new ReadableStream({
    pull(ctrl) {
      const next = chunks.shift();
      if (next) ctrl.enqueue(next);
      else ctrl.close();
    },
  });
  const d = await (await c.fetch(`${ORIGIN}/s`, { method: 'POST', body, duplex: 'half' })).json();
  assert.equal(d.length, 3201);
});

test('keyReuse: one client key pair per host; without it, a fresh one per request', async () => {
  const srv = makeServer();
  const cookieValues = async (opts) => {
    const log = [];
    const c = hc.createClient({ mount: '/hc', tickets: false, fetch: fakeFetch(srv, { log }), ...opts });
    for (let i = 0; i < 3; i++) await (await c.fetch(`${ORIGIN}/k`)).arrayBuffer();
    // the first 43 characters of the value are the client public key (the pad follows)
    return log.filter((l) => l.method !== 'OPTIONS').map((l) => l.cookies[0].split('=')[1].slice(0, 43));
  };
  const reused = await cookieValues({ keyReuse: true });
  assert.equal(new Set(reused).size, 1);
  const fresh = await cookieValues({});
  assert.equal(new Set(fresh).size, 3);
});

test("form: 'post' always POSTs; 'get' refuses what does not fit", async () => {
  const srv = makeServer();
  const post = hc.createClient({ mount: '/hc', form: 'post', fetch: fakeFetch(srv) });
  const r = await post.fetch(`${ORIGIN}/small`);
  assert.equal(hc.exchangeInfo(r).form, 'post');
  assert.equal((await r.json()).target, '/small');
  const get = hc.createClient({ mount: '/hc', form: 'get', fetch: fakeFetch(srv) });
  const g = await get.fetch(`${ORIGIN}/small`, { method: 'PUT', body: 'x' });
  assert.equal(hc.exchangeInfo(g).form, 'get');
  assert.equal((await g.json()).method, 'PUT');
  await assert.rejects(get.fetch(`${ORIGIN}/big`, { method: 'POST', body: new Uint8Array(3000) }), (e) => e.code === 'config');
});
