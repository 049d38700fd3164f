// Suite 2 (spec/hybrid.md) end to end in memory: the client (`pq` option)
// against the in-memory server (src/server.ts) behind a fake transport, and
// the engine's plan of a hybrid attempt. Hybrid requests, ticket
// resumption of a hybrid session, the pin refusing a downgrade, `require`
// against a v1-only server, `prefer` falling back, `unknown-key` with
// `hybrid_certs`, and `hybrid_required` from a suite-2-only server.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as hc from '../dist/index.js';
import { Engine } from '../dist/engine.js';
import { NOW, ORIGIN, addHybridKey, fakeFetch, makeServer, pqListBody } from './fake.mjs';

const sealedOf = (log) => log.filter((l) => l.method !== 'OPTIONS');
const optionsOf = (log) => log.filter((l) => l.method === 'OPTIONS').map((l) => l.path);

async function rejectsWith(p, code) {
  await assert.rejects(p, (e) => {
    assert.ok(e instanceof hc.HttpCryptError, `expected HttpCryptError, got ${e}`);
    assert.equal(e.code, code, e.message);
    return true;
  });
}

test('prefer: OPTIONS {mount}/pq, a hybrid GET then a hybrid POST resumed by the ticket of the hybrid session', async () => {
  const srv = makeServer({ pq: 'on' });
  const log = [];
  const c = hc.createClient({ mount: '/hc', identity: srv.identity, pq: 'prefer', fetch: fakeFetch(srv, { log }) });
  const r1 = await c.fetch(`${ORIGIN}/a?b=1`);
  assert.equal(r1.status, 200);
  assert.deepEqual(await r1.json().then((d) => [d.method, d.target]), ['GET', '/a?b=1']);
  const i1 = hc.exchangeInfo(r1);
  assert.deepEqual([i1.suite, i1.credential, i1.form], [2, 'key', 'get'], 'a small hybrid request fits the GET form');
  assert.deepEqual(optionsOf(log), ['/hc/pq'], 'suite 2 is asked first, and v1 discovery is not needed');
  assert.deepEqual([sealedOf(log)[0].suite, sealedOf(log)[0].credential], [2, 'key']);
  // the cookie names the suite-2 key ID
  const kid = hc.b64uEncode(hc.hybridCertKid(srv.hybridCert));
  assert.ok(sealedOf(log)[0].cookies[0].startsWith(kid), 'the cookie names the suite-2 kid');

  const body = hc.randomBytes(40_000);
  const r2 = await c.fetch(`${ORIGIN}/up`, { method: 'POST', body });
  assert.equal((await r2.json()).length, body.length);
  const i2 = hc.exchangeInfo(r2);
  assert.deepEqual([i2.suite, i2.credential, i2.ticketForm, i2.form], [2, 'ticket', 'short', 'post'], 'the (short) ticket of a hybrid session resumes it');
  assert.deepEqual([sealedOf(log)[1].suite, sealedOf(log)[1].credential], [2, 'short_ticket']);
  assert.equal(optionsOf(log).length, 1, 'the suite-2 certificate is cached');
});

test('prefer without tickets: every request is a fresh hybrid one, GET while the line fits and POST (streamed too) otherwise', async () => {
  const srv = makeServer({ pq: 'on' });
  const log = [];
  const c = hc.createClient({ mount: '/hc', pq: 'prefer', tickets: false, fetch: fakeFetch(srv, { log }) });
  // 500 bytes fit the v1 GET form, not the hybrid one (the 1,088-byte ciphertext counts too)
  const r = await c.fetch(`${ORIGIN}/p`, { method: 'PUT', body: new Uint8Array(500) });
  assert.equal((await r.json()).length, 500);
  assert.deepEqual([hc.exchangeInfo(r).suite, hc.exchangeInfo(r).form], [2, 'post']);
  const v1 = hc.createClient({ mount: '/hc', tickets: false, fetch: fakeFetch(makeServer()) });
  assert.equal(hc.exchangeInfo(await v1.fetch(`${ORIGIN}/p`, { method: 'PUT', body: new Uint8Array(500) })).form, 'get');
  // a streamed body: ct_M goes first, then the records
  const chunks = [hc.randomBytes(20_000), hc.randomBytes(30_000)];
  const stream = new ReadableStream({
    pull(ctl) {
      const next = chunks.shift();
      if (next) ctl.enqueue(next);
      else ctl.close();
    },
  });
  const rs = await c.fetch(`${ORIGIN}/s`, { method: 'POST', body: stream, duplex: 'half' });
  assert.equal((await rs.json()).length, 50_000);
  assert.ok(sealedOf(log).every((l) => l.suite === 2 && l.credential === 'key'));
});

test('prefer against a v1-only server: OPTIONS {mount}/pq answers 404, v1 is used and /pq is not asked again soon', async () => {
  const srv = makeServer();
  const log = [];
  const c = hc.createClient({ mount: '/hc', pq: 'prefer', fetch: fakeFetch(srv, { log }) });
  const r = await c.fetch(`${ORIGIN}/x`);
  assert.equal(hc.exchangeInfo(r).suite, 1);
  await c.fetch(`${ORIGIN}/y`);
  // (the fake transport logs only the OPTIONS of /pq)
  assert.deepEqual(optionsOf(log), ['/hc/pq']);
  assert.ok(sealedOf(log).every((l) => l.suite === 1));
});

test('prefer: a large 404 page at /pq (above the list bound) still means "no suite 2"', async () => {
  const srv = makeServer();
  const base = fakeFetch(srv);
  const big = async (url, init = {}) =>
    init.method === 'OPTIONS' && new URL(url).pathname === '/hc/pq' ? new Response(new Uint8Array(200_000), { status: 404, headers: { 'content-type': 'text/html' } }) : base(url, init);
  const r = await hc.createClient({ mount: '/hc', pq: 'prefer', fetch: big }).fetch(`${ORIGIN}/x`);
  assert.equal(hc.exchangeInfo(r).suite, 1);
});

test('prefer: a 200 without a type at /pq that is no list (another service) means "no suite 2"; with the list type it is an error', async () => {
  const srv = makeServer();
  const base = fakeFetch(srv);
  const page = (type) => async (url, init = {}) =>
    init.method === 'OPTIONS' && new URL(url).pathname === '/hc/pq' ? new Response(hc.utf8('<html>hi</html>'), { status: 200, headers: type ? { 'content-type': type } : {} }) : base(url, init);
  const untyped = page(null);
  assert.equal((await untyped(`${ORIGIN}/hc/pq`, { method: 'OPTIONS' })).headers.get('content-type'), null);
  const r = await hc.createClient({ mount: '/hc', pq: 'prefer', fetch: untyped }).fetch(`${ORIGIN}/x`);
  assert.equal(hc.exchangeInfo(r).suite, 1);
  await rejectsWith(hc.createClient({ mount: '/hc', pq: 'prefer', fetch: page('application/httpcrypt-certs') }).fetch(`${ORIGIN}/x`), 'bad_certificate');
});

test('require against a v1-only server: hybrid_downgrade, and nothing is sent sealed', async () => {
  const srv = makeServer();
  const log = [];
  const c = hc.createClient({ mount: '/hc', pq: 'require', fetch: fakeFetch(srv, { log }) });
  await rejectsWith(c.fetch(`${ORIGIN}/x`), 'hybrid_downgrade');
  assert.deepEqual(optionsOf(log), ['/hc/pq']);
  assert.equal(sealedOf(log).length, 0);
});

test('the pin: after a suite-2 certificate was seen, a discovery offering only suite 1 is hybrid_downgrade until its not_after', async () => {
  const srv = makeServer({ pq: 'on' });
  const log = [];
  let t = NOW;
  const c = hc.createClient({ mount: '/hc', pq: 'prefer', tickets: false, now: () => t, fetch: fakeFetch(srv, { log }) });
  assert.equal(hc.exchangeInfo(await c.fetch(`${ORIGIN}/1`)).suite, 2);
  // the server (or an attacker on the path) stops offering suite 2; the cached list expires (max-age 3600)
  srv.cfg.hybridKeys = [];
  t = NOW + 4000;
  await rejectsWith(c.fetch(`${ORIGIN}/2`), 'hybrid_downgrade');
  assert.equal(sealedOf(log).length, 1, 'no v1 request was sent');
  // past the seen certificate's not_after, the pin is gone and v1 is used (the server still has its v1 key)
  t = srv.hybridCert.notAfter + 1;
  srv.cfg.keys[0].cert.notAfter = t + 3600;
  const fresh = hc.createClient({ mount: '/hc', pq: 'prefer', now: () => NOW, fetch: fakeFetch(srv) });
  assert.equal(hc.exchangeInfo(await fresh.fetch(`${ORIGIN}/3`)).suite, 1, 'a client that never saw suite 2 is not pinned');
});

test('the pin also holds against an unknown-key answer without hybrid_certs (suite 2 removed): no fallback', async () => {
  const srv = makeServer({ pq: 'on' });
  const log = [];
  const c = hc.createClient({ mount: '/hc', pq: 'prefer', tickets: false, fetch: fakeFetch(srv, { log }) });
  assert.equal(hc.exchangeInfo(await c.fetch(`${ORIGIN}/1`)).suite, 2);
  srv.cfg.hybridKeys = [];
  await rejectsWith(c.fetch(`${ORIGIN}/2`), 'hybrid_downgrade');
  assert.deepEqual(optionsOf(log), ['/hc/pq', '/hc/pq']);
});

test('unknown-key with hybrid_certs naming a new ML-KEM key: the client fetches its key text and retries once', async () => {
  const srv = makeServer({ pq: 'on' });
  const log = [];
  const c = hc.createClient({ mount: '/hc', identity: srv.identity, pq: 'prefer', tickets: false, fetch: fakeFetch(srv, { log }) });
  await c.fetch(`${ORIGIN}/1`);
  // a new suite-2 key replaces the old one on the server
  srv.cfg.hybridKeys = [];
  addHybridKey(srv, { serial: 8 });
  const r = await c.fetch(`${ORIGIN}/2`);
  assert.deepEqual([hc.exchangeInfo(r).suite, hc.exchangeInfo(r).attempts], [2, 2]);
  assert.deepEqual(optionsOf(log), ['/hc/pq', '/hc/pq']);
});

test('a v1 request to a suite-2-only server is hybrid_required; prefer and require succeed there', async () => {
  const srv = makeServer({ pq: 'only' });
  // a v1 client given the (suite-1) certificate in advance
  const v1 = hc.createClient({ mount: '/hc', certs: [hc.certToText(srv.cert)], fetch: fakeFetch(srv) });
  await rejectsWith(v1.fetch(`${ORIGIN}/x`), 'hybrid_required');
  for (const pq of ['prefer', 'require']) {
    const c = hc.createClient({ mount: '/hc', pq, identity: srv.identity, fetch: fakeFetch(srv) });
    assert.equal(hc.exchangeInfo(await c.fetch(`${ORIGIN}/x`)).suite, 2);
  }
});

test('a key text that does not match the certificate is kem_mismatch', async () => {
  const srv = makeServer({ pq: 'on' });
  const other = hc.kemKeyPair(hc.randomBytes(64)).ek;
  const body = pqListBody(srv).split('\n').map((l) => (l.startsWith('hck1 ') ? hc.formatKemText(other) : l)).join('\n');
  const base = fakeFetch(srv);
  const tampered = async (url, init = {}) =>
    init.method === 'OPTIONS' && new URL(url).pathname === '/hc/pq' ? new Response(body, { status: 200, headers: { 'content-type': 'application/httpcrypt-certs' } }) : base(url, init);
  const c = hc.createClient({ mount: '/hc', pq: 'prefer', fetch: tampered });
  await rejectsWith(c.fetch(`${ORIGIN}/x`), 'kem_mismatch');
});

test('authenticated mode: suite-2 certificates by another identity are bad_signature, and pin nothing', async () => {
  const srv = makeServer({ pq: 'on' });
  const stranger = makeServer();
  for (const pq of ['prefer', 'require']) {
    const c = hc.createClient({ mount: '/hc', pq, identity: stranger.identity, fetch: fakeFetch(srv) });
    await rejectsWith(c.fetch(`${ORIGIN}/x`), 'bad_signature');
  }
});

test('prefer: a server that became suite-2-only answers hybrid_required; the client asks /pq again and retries in suite 2', async () => {
  const srv = makeServer();
  const log = [];
  const c = hc.createClient({ mount: '/hc', pq: 'prefer', tickets: false, fetch: fakeFetch(srv, { log }) });
  assert.equal(hc.exchangeInfo(await c.fetch(`${ORIGIN}/1`)).suite, 1);
  // the same kex key now serves suite 2 only
  addHybridKey(srv);
  srv.cfg.keys = [];
  const r = await c.fetch(`${ORIGIN}/2`);
  assert.deepEqual([hc.exchangeInfo(r).suite, hc.exchangeInfo(r).attempts], [2, 2]);
  assert.deepEqual(optionsOf(log), ['/hc/pq', '/hc/pq']);
});

test('engine: a hybrid attempt carries ct_M before the stream, names the suite-2 kid, and the server agrees on the key', async () => {
  const srv = makeServer({ pq: 'on' });
  const e = new Engine({ mount: '/hc', now: () => NOW, pq: 'prefer', tickets: false });
  const key = e.storeHybrid(ORIGIN, '/hc', 'application/httpcrypt-certs', 'max-age=60', hc.utf8(pqListBody(srv)));
  assert.ok(key !== null);
  assert.equal(e.hybrid.pinnedUntil(ORIGIN), srv.hybridCert.notAfter);
  const bytes = hc.randomBytes(3000);
  const a = await e.plan(new URL(`${ORIGIN}/u`), 'POST', new Headers(), { bytes, stream: null }, false, key);
  assert.deepEqual([a.suite, a.form, a.prepared.kemCiphertext.length], [2, 'post', hc.KEM_CIPHERTEXT_LEN]);
  const body = e.sealWhole(a, bytes);
  assert.deepEqual(body.subarray(0, hc.KEM_CIPHERTEXT_LEN), a.prepared.kemCiphertext);
  const u = new URL(a.outerUrl);
  const req = { method: 'POST', target: u.pathname, host: u.host, cookies: [a.prepared.cookie], contentLength: body.length, body, fields: [] };
  const r = hc.server.accept(srv.cfg, req, NOW);
  assert.equal(r.accepted.suite, 2);
  assert.deepEqual(r.accepted.sessionKey, a.prepared.sessionKey);
  assert.deepEqual(hc.server.openRequest(r.accepted, body).body, bytes);
  // a truncated ciphertext is bad_ciphertext at the server
  assert.throws(() => hc.server.accept(srv.cfg, { ...req, body: body.subarray(0, 1000), contentLength: 1000 }, NOW), (err) => err.code === 'bad_ciphertext');
});

test('a version-2 suite-2 certificate: hybrid requests in profile 2 (time in n0, bound Host), GET and POST', async () => {
  const srv = makeServer({ version: 2, pq: 'on' });
  const log = [];
  const c = hc.createClient({ mount: '/hc', identity: srv.identity, pq: 'require', tickets: false, fetch: fakeFetch(srv, { log, freshness: true }) });
  const g = await c.fetch(`${ORIGIN}/g`);
  assert.equal((await g.json()).target, '/g');
  const p = await c.fetch(`${ORIGIN}/p`, { method: 'POST', body: new Uint8Array(4000) });
  assert.equal((await p.json()).length, 4000);
  for (const r of [g, p]) assert.deepEqual([hc.exchangeInfo(r).suite, hc.exchangeInfo(r).profile], [2, 2]);
  assert.deepEqual(sealedOf(log).map((l) => [l.suite, l.profile]), [[2, 2], [2, 2]]);
});
