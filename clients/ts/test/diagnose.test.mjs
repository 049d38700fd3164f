// What the client tells its caller when something is wrong, and what it
// puts where, against the real Rust server on loopback (a missing binary
// FAILS these tests): the shared client diagnoses of spec §12
// (connect_failed, timeout, not_httpcrypt, no_endpoint, bad_signature),
// inner and outer 413, the answer to HEAD (erratum E2), the mount found
// without configuration, and erratum E1: every field the caller sets
// travels inside; outside only what the network needs.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { createClient, exchangeInfo, HttpCryptError } from '../dist/index.js';
import { cleanup, keygen, startGateway, startServe, startUpstream, tempDir } from './harness.mjs';

let dir, identity, otherIdentity, serve, rootServe, smallServe, upstream, gateway;
const started = [];
const closers = [];

before(async () => {
  dir = tempDir('hc-diagnose-');
  const root = path.join(dir, 'root');
  mkdirSync(root);
  writeFileSync(path.join(root, 'hello.txt'), 'hello from httpcrypt\n');
  identity = keygen(path.join(dir, 'keys'));
  otherIdentity = keygen(path.join(dir, 'other-keys'));
  serve = await startServe({ keys: path.join(dir, 'keys'), root });
  started.push(serve);
  rootServe = await startServe({ keys: path.join(dir, 'keys'), root, mount: '' });
  started.push(rootServe);
  smallServe = await startServe({ keys: path.join(dir, 'keys'), root, extraArgs: ['--max-body', '4096'] });
  started.push(smallServe);
  upstream = await startUpstream();
  started.push(upstream);
  gateway = await startGateway({ keys: path.join(dir, 'keys'), upstreamPort: upstream.port });
  started.push(gateway);
});

after(async () => {
  for (const c of closers.reverse()) await c();
  for (const p of started.reverse()) await p.stop();
  if (dir) cleanup(dir);
});

/** A loopback server for `handler`, closed after the suite; resolves with its port. */
async function listen(server) {
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  closers.push(() => new Promise((resolve) => (server.closeAllConnections?.(), server.close(() => resolve()))));
  return server.address().port;
}

async function rejects(promise, code, message) {
  await assert.rejects(promise, (e) => {
    assert.ok(e instanceof HttpCryptError, `not an HttpCryptError: ${e}`);
    assert.equal(e.code, code, e.message);
    if (message instanceof RegExp) assert.match(e.message, message);
    else if (message !== undefined) assert.equal(e.message, message);
    return true;
  });
}

test('connect_failed names the host, port and reason', async () => {
  const probe = net.createServer();
  const port = await new Promise((resolve) => probe.listen(0, '127.0.0.1', () => resolve(probe.address().port)));
  await new Promise((resolve) => probe.close(resolve));
  await rejects(createClient({ mount: '/hc' }).fetch(`http://127.0.0.1:${port}/x`), 'connect_failed', `cannot connect to 127.0.0.1:${port}: connection refused`);
});

test('timeout: a server that accepts and never answers, in discovery and on the sealed request', async () => {
  const silent = net.createServer((socket) => {
    socket.on('error', () => undefined);
    closers.push(() => socket.destroy());
  });
  const port = await listen(silent);
  const t0 = Date.now();
  await rejects(createClient({ mount: '/hc', timeout: 1 }).fetch(`http://127.0.0.1:${port}/x`), 'timeout', 'timed out after 1 s while fetching the certificates (OPTIONS /hc/)');
  assert.ok(Date.now() - t0 < 5000, 'the timeout ends the call');
  // Keys known in advance (as from DNS): the sealed request itself waits.
  const certs = (await (await fetch(`http://${serve.addr}/hc/`, { method: 'OPTIONS' })).text()).trim().split('\n');
  await rejects(createClient({ mount: '/hc', timeout: 1, certs }).fetch(`http://127.0.0.1:${port}/x`), 'timeout', 'timed out after 1 s while waiting for the response');
});

test('not_httpcrypt: a plain HTTP server answers OPTIONS with 501, or with a page', async () => {
  const plain = http.createServer((req, res) => {
    if (req.method === 'OPTIONS' && req.url === '/page/') {
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end('<!doctype html><title>hello</title>');
      return;
    }
    res.writeHead(501, { 'content-type': 'text/plain' });
    res.end('not implemented');
  });
  const port = await listen(plain);
  await rejects(createClient({ mount: '/hc' }).fetch(`http://127.0.0.1:${port}/x`), 'not_httpcrypt', `127.0.0.1:${port} is not an HTTPCrypt server (OPTIONS /hc/ answered 501)`);
  await rejects(createClient({ mount: '/page' }).fetch(`http://127.0.0.1:${port}/x`), 'not_httpcrypt', `127.0.0.1:${port} is not an HTTPCrypt server (OPTIONS /page/ answered 200)`);
});

test('no_endpoint: the wrong mount on an HTTPCrypt server', async () => {
  await rejects(createClient({ mount: '/api' }).fetch(`http://${serve.addr}/hello.txt`), 'no_endpoint', `no HTTPCrypt endpoint at /api on ${serve.addr}: wrong mount?`);
});

test('bad_signature: the certificates are not signed by the pinned identity', async () => {
  await rejects(createClient({ mount: '/hc', identity: otherIdentity }).fetch(`http://${serve.addr}/hello.txt`), 'bad_signature', 'the certificates are not signed by the pinned identity');
  const good = await createClient({ mount: '/hc', identity }).fetch(`http://${serve.addr}/hello.txt`);
  assert.equal(await good.text(), 'hello from httpcrypt\n');
});

test('no mount configured: the client finds /hc, and the root mount', async () => {
  for (const addr of [serve.addr, rootServe.addr]) {
    const c = createClient();
    const rsp = await c.fetch(`http://${addr}/hello.txt`);
    assert.equal(await rsp.text(), 'hello from httpcrypt\n');
    const again = await c.fetch(`http://${addr}/hello.txt`);
    assert.equal(await again.text(), 'hello from httpcrypt\n');
    const prefix = addr === serve.addr ? '/hc/' : '/';
    assert.ok(new URL(exchangeInfo(again).outerUrl).pathname.startsWith(prefix));
  }
});

test('an inner 413 (a request record above the server limit) is record_too_large', async () => {
  const c = createClient({ mount: '/hc', recordSize: 2 << 20 });
  await assert.rejects(c.fetch(`http://${serve.addr}/hello.txt`, { method: 'POST', body: new Uint8Array(1_500_000) }), (e) => {
    assert.equal(e.code, 'record_too_large');
    assert.equal(e.problem.scope, 'inner');
    assert.equal(e.problem.status, 413);
    return true;
  });
});

test('an outer 413 sent early, before the server closes: body_too_large, not a connection reset', async () => {
  // A server that refuses the body and closes races the client's writes (its
  // reset may arrive before the answer is read); the client gives the
  // connection an I/O turn between records, so it hears the answer. Six tries
  // of each body kind; a streamed body was never heard before that.
  const c = createClient({ mount: '/hc' });
  const seen = { stream: [], bytes: [] };
  for (let i = 0; i < 6; i++) {
    for (const kind of ['stream', 'bytes']) {
      const body = kind === 'stream' ? new Blob([new Uint8Array(8 << 20)]).stream() : new Uint8Array(8 << 20);
      try {
        const r = await c.fetch(`http://${smallServe.addr}/hello.txt`, { method: 'POST', body });
        seen[kind].push(`status ${r.status}`);
      } catch (e) {
        seen[kind].push(e.code);
        if (e.code === 'body_too_large') assert.equal(e.problem.scope, 'outer');
      }
    }
  }
  for (const kind of ['stream', 'bytes']) {
    assert.deepEqual(
      seen[kind].filter((s) => s !== 'body_too_large' && s !== 'transport'),
      [],
    );
    assert.ok(seen[kind].filter((s) => s === 'body_too_large').length >= 4, `${kind}: the 413 heard only in ${seen[kind]}`);
  }
});

test('HEAD: the answer carries no body, whatever its Content-Length says (erratum E2)', async () => {
  const c = createClient({ mount: '/hc' });
  const rsp = await c.fetch(`http://${serve.addr}/hello.txt`, { method: 'HEAD' });
  assert.equal(rsp.status, 200);
  assert.equal(rsp.body, null);
  const get = await c.fetch(`http://${serve.addr}/hello.txt`);
  assert.equal(await get.text(), 'hello from httpcrypt\n');
});

test('E1: every field the caller sets travels inside; the outer request carries only what the network needs', async () => {
  // A forwarding proxy in front of the gateway records the outer requests as they travel.
  const outer = [];
  const [gwHost, gwPort] = gateway.addr.split(':');
  const relay = http.createServer((req, res) => {
    outer.push({ method: req.method, url: req.url, headers: req.headers });
    const up = http.request({ host: gwHost, port: Number(gwPort), method: req.method, path: req.url, headers: req.headers }, (ur) => {
      res.writeHead(ur.statusCode, ur.headers);
      ur.pipe(res);
    });
    up.on('error', () => res.destroy());
    req.pipe(up);
  });
  const port = await listen(relay);
  const caller = {
    Authorization: 'Bearer caller-token',
    Cookie: 'session=caller-session',
    'User-Agent': 'caller-agent/1.0',
    Accept: 'application/x-caller+json',
    'Accept-Language': 'fr-CA-caller',
    'X-Custom': 'caller-value',
    'If-None-Match': '"etag-caller-1"',
    Range: 'bytes=0-10',
  };
  const cases = [];
  for (const form of ['auto', 'post']) {
    const c = createClient({ mount: '/hc', form });
    cases.push([c, { method: 'GET', headers: caller }], [c, { method: 'POST', headers: { ...caller, 'Content-Type': 'application/json' }, body: '{"a":1}' }]);
  }
  for (const [c, init] of cases) {
    outer.length = 0;
    const rsp = await c.fetch(`http://127.0.0.1:${port}/echo/e1`, init);
    assert.equal(rsp.status, 200);
    const seen = await rsp.json();
    const fields = Object.fromEntries((seen.fields ?? seen.headers).map(([n, v]) => [n.toLowerCase(), v]));
    for (const [n, v] of Object.entries(caller)) assert.equal(fields[n.toLowerCase()], v, `the service sees the caller's ${n}`);
    if (init.method === 'POST') assert.equal(fields['content-type'], 'application/json');

    const sealed = outer.filter((r) => /^\/hc\/2?[A-Za-z0-9_-]{32}/.test(r.url));
    assert.equal(sealed.length, 1);
    const h = sealed[0].headers;
    // Outside: no caller value at all, and the Cookie is the HTTPCrypt pair alone.
    const wire = JSON.stringify(sealed[0]);
    for (const v of Object.values(caller)) assert.ok(!wire.includes(v), `${v} travels outside: ${wire}`);
    assert.equal(h.authorization, undefined);
    assert.equal(h['x-custom'], undefined);
    assert.equal(h['if-none-match'], undefined);
    assert.equal(h.range, undefined);
    assert.equal(h.cookie.split(';').length, 1, `outer Cookie: ${h.cookie}`);
    assert.ok(!('referer' in h));
    if (sealed[0].method === 'POST') assert.equal(h['content-type'], 'application/octet-stream');
    else assert.equal(h['content-type'], undefined);
  }
});
