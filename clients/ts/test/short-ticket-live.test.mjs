// Short tickets (spec §7.3) live against the real Rust server (`httpcrypt
// serve`) on loopback: the first request presents a key and asks, later ones
// present the short ticket (a cookie value of 22–38 characters), a new one
// after R uses; with short tickets off, v1 tickets as before; a server that
// no longer knows the held ticket (a restart with a new key directory)
// refuses it and the client recovers with a key; a hybrid session's short
// ticket resumes it in suite 2; under `serve --require-token` the token that
// comes with a short ticket is bound to its k' (spec §7.3, §8.4), so the
// first POST takes one retry and later ones none, as with v1 tickets. A
// missing binary FAILS these tests.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { createClient, exchangeInfo } from '../dist/index.js';
import { cleanup, httpcryptBin, keygen, startServe, tempDir } from './harness.mjs';

const HELLO = 'hello from httpcrypt\n';
let dir, identity, serve, other, pqServe, pqIdentity, tokenServe;
const started = [];

before(async () => {
  httpcryptBin(); // fails the suite clearly when the binary is missing
  dir = tempDir('hc-short-live-');
  const root = path.join(dir, 'root');
  mkdirSync(root);
  writeFileSync(path.join(root, 'hello.txt'), HELLO);
  identity = keygen(path.join(dir, 'keys'));
  keygen(path.join(dir, 'other-keys'));
  pqIdentity = keygen(path.join(dir, 'pq-keys'));
  serve = await startServe({ keys: path.join(dir, 'keys'), root });
  started.push(serve);
  other = await startServe({ keys: path.join(dir, 'other-keys'), root });
  started.push(other);
  pqServe = await startServe({ keys: path.join(dir, 'pq-keys'), root, extraArgs: ['--pq', 'on'] });
  started.push(pqServe);
  tokenServe = await startServe({ keys: path.join(dir, 'keys'), root, extraArgs: ['--require-token'] });
  started.push(tokenServe);
});

after(async () => {
  for (const p of started.reverse()) await p.stop();
  if (dir) cleanup(dir);
});

/**
 * A transport that records every sealed request (its outer cookie value and status), and sends it
 * to the server `target.addr` whatever the URL's authority, so that one origin can change servers.
 */
function recording(target) {
  const log = [];
  const transport = async (url, init = {}) => {
    const rsp = await fetch(String(url).replace(/^http:\/\/[^/]+/, `http://${target.addr}`), init);
    if ((init.method ?? 'GET') !== 'OPTIONS') {
      const cookie = new Headers(init.headers).get('cookie') ?? '';
      log.push({ value: cookie.split(';')[0].split('=')[1] ?? '', status: rsp.status });
    }
    return rsp;
  };
  return { log, transport };
}

/** What a cookie value presents, by its length (spec §7.3): a short ticket, a key, or a v1 ticket. */
function form(value) {
  const n = value.length;
  if (n >= 22 && n <= 38) return 'short';
  if (n >= 43 && n <= 59) return 'key';
  if (n >= 115 && n <= 131) return 'v1';
  return `?${n}`;
}

test('one client: a key first, then the short ticket it asked for, a new one on the R-th use', async () => {
  const tap = recording(serve);
  const c = createClient({ mount: '/hc', identity, shortTickets: { reuse: 3 }, fetch: tap.transport });
  const url = `http://${serve.addr}/hello.txt`;
  for (let i = 0; i < 6; i++) {
    const r = await c.fetch(url, i % 2 ? { method: 'POST', body: new Uint8Array(3000) } : {});
    // The file server answers a GET with the file and a POST with an authenticated 405.
    const text = await r.text();
    if (i % 2) assert.equal(r.status, 405);
    else assert.equal(text, HELLO);
    const info = exchangeInfo(r);
    assert.deepEqual([info.credential, info.ticketForm, info.attempts], i === 0 ? ['key', null, 1] : ['ticket', 'short', 1]);
  }
  assert.deepEqual(
    tap.log.map((l) => [form(l.value), l.status]),
    [['key', 200], ...Array(5).fill(['short', 200])],
  );
  // Requests 2–4 carry the first ticket (the 4th, its third use, asks again), 5–6 the second.
  const h = tap.log.map((l) => l.value.slice(0, 22));
  assert.equal(new Set(h.slice(1, 4)).size, 1);
  assert.equal(new Set(h.slice(4, 6)).size, 1);
  assert.notEqual(h[1], h[4], 'a new short ticket after R = 3 uses');
});

test('short tickets off: v1 tickets as before', async () => {
  const tap = recording(serve);
  const c = createClient({ mount: '/hc', identity, shortTickets: false, fetch: tap.transport });
  for (let i = 0; i < 3; i++) {
    const r = await c.fetch(`http://${serve.addr}/hello.txt`);
    assert.equal(await r.text(), HELLO);
    assert.deepEqual([exchangeInfo(r).credential, exchangeInfo(r).ticketForm], i === 0 ? ['key', null] : ['ticket', 'v1']);
  }
  assert.deepEqual(
    tap.log.map((l) => form(l.value)),
    ['key', 'v1', 'v1'],
  );
});

test('a server that does not know the held ticket: a short one is refused (no_cookie) and the client recovers with a key; a v1 one likewise (unknown-key)', async () => {
  // One origin, answered first by one server and then by another with other keys: a server
  // restarted with a new key directory. Opportunistic mode, since their identities differ.
  const origin = 'http://restarted.test:1';
  const target = { addr: serve.addr };
  const tap = recording(target);
  const c = createClient({ mount: '/hc', fetch: tap.transport });
  await (await c.fetch(`${origin}/hello.txt`)).arrayBuffer();
  const held = await c.fetch(`${origin}/hello.txt`);
  await held.arrayBuffer();
  assert.equal(exchangeInfo(held).ticketForm, 'short');

  target.addr = other.addr;
  const r = await c.fetch(`${origin}/hello.txt`);
  assert.equal(r.status, 200);
  assert.equal(await r.text(), HELLO);
  // The short ticket (400 malformed: no_cookie), then a key under the old certificates
  // (400 unknown-key, with the new ones), then a key the new server holds.
  assert.deepEqual([exchangeInfo(r).attempts, exchangeInfo(r).credential], [3, 'key']);
  assert.deepEqual(
    tap.log.slice(-3).map((l) => [form(l.value), l.status]),
    [['short', 400], ['key', 400], ['key', 200]],
  );
  const next = await c.fetch(`${origin}/hello.txt`);
  assert.equal(await next.text(), HELLO);
  assert.deepEqual([exchangeInfo(next).attempts, exchangeInfo(next).ticketForm], [1, 'short'], "the new server's short ticket");

  // The same with v1 tickets: the ticket has the HTTPCrypt shape, so unknown-key and one retry.
  const v1Target = { addr: serve.addr };
  const v1Tap = recording(v1Target);
  const v1 = createClient({ mount: '/hc', shortTickets: false, fetch: v1Tap.transport });
  for (let i = 0; i < 2; i++) await (await v1.fetch(`${origin}/hello.txt`)).arrayBuffer();
  v1Target.addr = other.addr;
  const v1r = await v1.fetch(`${origin}/hello.txt`);
  assert.equal(await v1r.text(), HELLO);
  assert.deepEqual([exchangeInfo(v1r).attempts, exchangeInfo(v1r).credential], [2, 'key']);
  assert.deepEqual(
    v1Tap.log.slice(-2).map((l) => [form(l.value), l.status]),
    [['v1', 400], ['key', 200]],
  );
});

test('serve --pq on: the short ticket of a hybrid session resumes it in suite 2', async () => {
  const tap = recording(pqServe);
  const c = createClient({ mount: '/hc', identity: pqIdentity, pq: 'require', fetch: tap.transport });
  for (let i = 0; i < 3; i++) {
    const r = await c.fetch(`http://${pqServe.addr}/hello.txt`);
    assert.equal(await r.text(), HELLO);
    const info = exchangeInfo(r);
    assert.deepEqual([info.suite, info.credential, info.ticketForm], i === 0 ? [2, 'key', null] : [2, 'ticket', 'short']);
  }
  assert.deepEqual(
    tap.log.map((l) => [form(l.value), l.status]),
    [['key', 200], ['short', 200], ['short', 200]],
  );
});

test('serve --require-token: the first POST takes exactly two attempts (the token comes bound to the short ticket\'s k\'), later POSTs one, presenting the short ticket; the same with v1 tickets', async () => {
  for (const shortTickets of [true, { reuse: 2 }, false]) {
    const what = JSON.stringify(shortTickets);
    const tap = recording(tokenServe);
    const c = createClient({ mount: '/hc', identity, shortTickets, fetch: tap.transport });
    const expected = shortTickets === false ? 'v1' : 'short';
    for (let i = 0; i < 5; i++) {
      const r = await c.fetch(`http://${tokenServe.addr}/hello.txt`, { method: 'POST', body: new Uint8Array(i * 1000) });
      // Past the token check the file server answers a POST with an authenticated 405 (425 token-required before it).
      assert.equal(r.status, 405, `${what}: POST ${i}`);
      await r.arrayBuffer();
      const info = exchangeInfo(r);
      assert.deepEqual([info.attempts, info.credential, info.ticketForm], [i === 0 ? 2 : 1, 'ticket', expected], `${what}: POST ${i}`);
    }
    // The key request (its sealed answer the 425), then the ticket on every request.
    assert.deepEqual(
      tap.log.map((l) => [form(l.value), l.status]),
      [['key', 200], ...Array(5).fill([expected, 200])],
      what,
    );
  }
});
