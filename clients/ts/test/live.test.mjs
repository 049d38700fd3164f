// Live tests against the real Rust server (`httpcrypt serve` and
// `httpcrypt gateway`) on loopback. A missing binary FAILS these tests.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { writeFileSync, mkdirSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import {
  b64uDecode,
  certFromText,
  chooseCert,
  compactNonce,
  createClient,
  exchangeInfo,
  formatHttpDate,
  HttpCryptError,
  noncePath,
  nonceTime,
  openResponse,
  parseCertList,
  prepareRequest,
  randomBytes,
  sealMessage,
} from '../dist/index.js';
import { cleanup, httpcryptBin, keygen, startGateway, startServe, startUpstream, tempDir } from './harness.mjs';

const MiB = 1 << 20;
let dir, identity, otherIdentity, serve, otherServe, upstream, gateway, bigFile;
const started = [];

function pattern(n) {
  const b = new Uint8Array(n);
  for (let i = 0; i < n; i++) b[i] = i % 251;
  return b;
}
const sha256 = (b) => createHash('sha256').update(b).digest('hex');

before(async () => {
  httpcryptBin(); // fails the suite clearly when the binary is missing
  dir = tempDir('hc-live-');
  const root = path.join(dir, 'root');
  mkdirSync(root);
  writeFileSync(path.join(root, 'hello.txt'), 'hello from httpcrypt\n');
  bigFile = pattern(8 * MiB);
  writeFileSync(path.join(root, 'big.bin'), bigFile);
  writeFileSync(path.join(root, 'medium.bin'), bigFile.subarray(0, MiB));
  identity = keygen(path.join(dir, 'keys'));
  otherIdentity = keygen(path.join(dir, 'other-keys'));
  serve = await startServe({ keys: path.join(dir, 'keys'), root });
  started.push(serve);
  otherServe = await startServe({ keys: path.join(dir, 'other-keys'), root });
  started.push(otherServe);
  upstream = await startUpstream();
  started.push(upstream);
  gateway = await startGateway({ keys: path.join(dir, 'keys'), upstreamPort: upstream.port });
  started.push(gateway);
});

after(async () => {
  for (const p of started.reverse()) await p.stop();
  if (dir) cleanup(dir);
});

test('GET a file, decrypted; the outer request is GET form, the answer verified', async () => {
  const c = createClient({ mount: '/hc' });
  const rsp = await c.fetch(`http://${serve.addr}/hello.txt`);
  assert.equal(rsp.status, 200);
  assert.equal(await rsp.text(), 'hello from httpcrypt\n');
  const info = exchangeInfo(rsp);
  assert.equal(info.credential, 'key');
  assert.equal(info.form, 'get');
  assert.match(info.outerUrl, /\/hc\/[A-Za-z0-9_-]{32}\?/);
  const missing = await c.fetch(`http://${serve.addr}/missing.txt`);
  assert.equal(missing.status, 404, 'an inner 404 is an authenticated response, not an error');
});

test('pinned identity: the right pin works, a wrong pin fails with bad_signature', async () => {
  const good = createClient({ mount: '/hc', identity });
  assert.equal(await (await good.fetch(`http://${serve.addr}/hello.txt`)).text(), 'hello from httpcrypt\n');
  const wrong = createClient({ mount: '/hc', identity: otherIdentity });
  await assert.rejects(wrong.fetch(`http://${serve.addr}/hello.txt`), (e) => e instanceof HttpCryptError && e.code === 'bad_signature');
});

test('streaming 8 MiB download through the file server', async () => {
  const c = createClient({ mount: '/hc' });
  const rsp = await c.fetch(`http://${serve.addr}/big.bin`);
  assert.equal(rsp.status, 200);
  let n = 0;
  let chunks = 0;
  const h = createHash('sha256');
  for await (const chunk of rsp.body) {
    h.update(chunk);
    n += chunk.length;
    chunks++;
  }
  assert.equal(n, 8 * MiB);
  assert.ok(chunks > 1, 'delivered incrementally');
  assert.equal(h.digest('hex'), sha256(bigFile));
});

test('streaming 8 MiB download and upload through the gateway', async () => {
  const c = createClient({ mount: '/hc' });
  const gen = await c.fetch(`http://${gateway.addr}/gen?n=${8 * MiB}`);
  assert.equal(gen.status, 200);
  const got = new Uint8Array(await gen.arrayBuffer());
  assert.equal(got.length, 8 * MiB);
  assert.equal(sha256(got), sha256(bigFile));

  // A ReadableStream body: sealed record by record as it is read (duplex: 'half').
  let offset = 0;
  let pulls = 0;
  const body = new ReadableStream({
    pull(controller) {
      pulls++;
      if (offset >= bigFile.length) return controller.close();
      const n = Math.min(100_000, bigFile.length - offset);
      controller.enqueue(bigFile.slice(offset, offset + n));
      offset += n;
    },
  });
  const sink = await c.fetch(`http://${gateway.addr}/sink`, { method: 'POST', body });
  assert.equal(sink.status, 200);
  assert.equal(await sink.text(), `${8 * MiB} ${sha256(bigFile)}`);
  assert.ok(pulls > 10);
  assert.equal(exchangeInfo(sink).form, 'post');
});

test('a POST with an in-memory body reaches the upstream with its inner fields', async () => {
  const c = createClient({ mount: '/hc' });
  const rsp = await c.fetch(`http://${gateway.addr}/echo?x=1`, { method: 'POST', body: 'abc', headers: { 'X-Test': 'yes' } });
  assert.equal(rsp.status, 200);
  assert.equal(rsp.headers.get('x-upstream'), 'yes');
  const doc = await rsp.json();
  assert.equal(doc.method, 'POST');
  assert.equal(doc.target, '/echo?x=1');
  assert.equal(doc.length, 3);
  const names = doc.headers.map(([n]) => n.toLowerCase());
  assert.ok(names.includes('x-test'));
  assert.ok(!names.includes('cookie'), 'the outer cookie is not passed on');
});

test('the second request to a host presents the ticket of the first', async () => {
  const c = createClient({ mount: '/hc' });
  const first = await c.fetch(`http://${serve.addr}/hello.txt`);
  await first.text();
  assert.equal(exchangeInfo(first).credential, 'key');
  assert.ok(first.headers.get('ticket'), 'the server issued a ticket');
  const second = await c.fetch(`http://${serve.addr}/hello.txt`);
  assert.equal(await second.text(), 'hello from httpcrypt\n');
  assert.equal(exchangeInfo(second).credential, 'ticket');
});

test('unknown-key: one retry with the certificates from the problem', async () => {
  // Certificates of another server: this server does not know their key.
  const opts = await fetch(`http://${otherServe.addr}/hc/`, { method: 'OPTIONS' });
  const foreign = (await opts.text()).split('\n').filter(Boolean);
  assert.ok(foreign.length > 0);
  const c = createClient({ mount: '/hc', certs: foreign, identity });
  // Pinned to this server's identity, the foreign certificates do not count: discovery runs instead.
  const pinned = await c.fetch(`http://${serve.addr}/hello.txt`);
  assert.equal(exchangeInfo(pinned).attempts, 1);
  await pinned.text();

  const opportunistic = createClient({ mount: '/hc', certs: foreign, tickets: false });
  const rsp = await opportunistic.fetch(`http://${serve.addr}/hello.txt`);
  assert.equal(rsp.status, 200);
  assert.equal(await rsp.text(), 'hello from httpcrypt\n');
  assert.equal(exchangeInfo(rsp).attempts, 2, 'one retry after unknown-key');
  const again = await opportunistic.fetch(`http://${serve.addr}/hello.txt`);
  assert.equal(exchangeInfo(again).attempts, 1, 'the new certificates are cached');
  await again.text();
});

test('stale: one retry with the clock corrected from the inner Date', async () => {
  // The clock hook runs 300 s ahead (still inside the certificates' validity, outside the 60 s window).
  const late = createClient({ mount: '/hc', now: () => Date.now() / 1000 + 300 });
  const rsp = await late.fetch(`http://${serve.addr}/hello.txt`);
  assert.equal(rsp.status, 200);
  assert.equal(exchangeInfo(rsp).attempts, 2, 'one retry after stale');
  assert.equal(await rsp.text(), 'hello from httpcrypt\n');
  const next = await late.fetch(`http://${serve.addr}/hello.txt`);
  assert.equal(exchangeInfo(next).attempts, 1, 'the offset is kept for the host');
  await next.text();
  // 50 s of skew is inside the window: no retry.
  const small = createClient({ mount: '/hc', now: () => Date.now() / 1000 - 50 });
  const ok = await small.fetch(`http://${serve.addr}/hello.txt`);
  assert.equal(exchangeInfo(ok).attempts, 1);
  await ok.text();
});

/** An HTTP proxy that forwards each request to `target` twice and answers with the second response. */
function replayingProxy(target) {
  let requests = 0;
  const server = http.createServer((req, res) => {
    requests++;
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', async () => {
      const body = Buffer.concat(chunks);
      const send = () =>
        fetch(`http://${target}${req.url}`, {
          method: req.method,
          headers: { cookie: req.headers.cookie ?? '', 'content-type': 'application/octet-stream' },
          body: req.method === 'POST' ? body : undefined,
        });
      await (await send()).arrayBuffer();
      const second = await send();
      res.writeHead(second.status, { 'content-type': second.headers.get('content-type') ?? '' });
      res.end(Buffer.from(await second.arrayBuffer()));
    });
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve({ server, addr: `127.0.0.1:${server.address().port}`, count: () => requests })));
}

test('replay: a replayed request is refused by the server, and the client does not retry', async () => {
  const opts = await fetch(`http://${serve.addr}/hc/`, { method: 'OPTIONS' });
  const certs = (await opts.text()).split('\n').filter(Boolean);
  const proxy = await replayingProxy(serve.addr);
  try {
    const c = createClient({ mount: '/hc', certs });
    await assert.rejects(c.fetch(`http://${proxy.addr}/hello.txt`), (e) => {
      assert.ok(e instanceof HttpCryptError);
      assert.equal(e.code, 'replay');
      assert.equal(e.problem.type, 'urn:httpcrypt:replay');
      assert.equal(e.problem.scope, 'inner');
      return true;
    });
    assert.equal(proxy.count(), 1, 'never retried on replay');
  } finally {
    proxy.server.close();
  }
});

/** A TCP proxy that flips one byte of the first response on each connection, `at` bytes after its head. */
function tamperingProxy(target, at) {
  const [host, port] = target.split(':');
  const server = net.createServer((client) => {
    const upstreamSock = net.connect(Number(port), host);
    let seen = 0;
    let headEnd = -1;
    let head = Buffer.alloc(0);
    let flipped = false;
    client.pipe(upstreamSock);
    upstreamSock.on('data', (d) => {
      if (!flipped) {
        if (headEnd < 0) {
          head = Buffer.concat([head, d]);
          const i = head.indexOf('\r\n\r\n');
          if (i >= 0) headEnd = i + 4;
        }
        if (headEnd >= 0) {
          const pos = headEnd + at - seen;
          if (pos >= 0 && pos < d.length) {
            d = Buffer.from(d);
            d[pos] ^= 0x01;
            flipped = true;
          }
        }
      }
      seen += d.length;
      client.write(d);
    });
    const close = () => {
      client.destroy();
      upstreamSock.destroy();
    };
    client.on('error', close);
    upstreamSock.on('error', close);
    client.on('close', close);
    upstreamSock.on('close', close);
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve({ server, addr: `127.0.0.1:${server.address().port}` })));
}

test('a flipped byte in the response: integrity error, no unverified byte released', async () => {
  const opts = await fetch(`http://${serve.addr}/hc/`, { method: 'OPTIONS' });
  const certs = (await opts.text()).split('\n').filter(Boolean);
  // In the first record (holds the inner head): the fetch itself fails, nothing is released.
  const early = await tamperingProxy(serve.addr, 60);
  try {
    const c = createClient({ mount: '/hc', certs });
    await assert.rejects(c.fetch(`http://${early.addr}/hello.txt`), (e) => e instanceof HttpCryptError && e.code === 'integrity');
  } finally {
    early.server.close();
  }
  // Deep in a 1 MiB body: only verified records come out, then the body errors.
  const late = await tamperingProxy(serve.addr, 600_000);
  try {
    const c = createClient({ mount: '/hc', certs });
    const rsp = await c.fetch(`http://${late.addr}/medium.bin`);
    assert.equal(rsp.status, 200);
    const got = [];
    await assert.rejects(
      (async () => {
        for await (const chunk of rsp.body) got.push(chunk);
      })(),
      (e) => e instanceof HttpCryptError && e.code === 'integrity',
    );
    const released = Buffer.concat(got);
    assert.ok(released.length < 600_000, 'nothing at or after the flipped record');
    assert.ok(released.equals(Buffer.from(bigFile.subarray(0, released.length))), 'every released byte is authentic');
  } finally {
    late.server.close();
  }
});

test('a non-200 outer answer is an unauthenticated error', async () => {
  const opts = await fetch(`http://${serve.addr}/hc/`, { method: 'OPTIONS' });
  const certs = (await opts.text()).split('\n').filter(Boolean);
  // Sealed correctly, but sent outside the server's mount: the plain 404 is not data.
  const c = createClient({ mount: '/wrong-mount', certs });
  await assert.rejects(c.fetch(`http://${serve.addr}/hello.txt`), (e) => {
    assert.ok(e instanceof HttpCryptError);
    assert.equal(e.code, 'refused');
    assert.equal(e.problem.scope, 'outer');
    assert.equal(e.problem.status, 404);
    return true;
  });
});

// Profile 2 (spec §4.5) against `httpcrypt serve --compact`, which issues
// version-2 certificates. Started on first use so that a binary without
// `--compact` fails these tests (with its message) and not the ones above.
let compactServer = null;
async function compactServe() {
  if (compactServer === null) {
    const keys = path.join(dir, 'compact-keys');
    keygen(keys);
    compactServer = startServe({ keys, root: path.join(dir, 'root'), extraArgs: ['--compact'] }).then((s) => {
      started.push(s);
      return s;
    });
  }
  return compactServer;
}

/** A transport that records every outer request it carries. */
function recordingFetch(log) {
  return (url, init = {}) => {
    log.push({ url: String(url), method: init.method ?? 'GET', cookie: new Headers(init.headers).get('cookie') });
    return fetch(url, init);
  };
}

test('serve --compact: a fresh-key round trip and a ticket round trip in profile 2', async () => {
  const srv = await compactServe();
  const opts = await fetch(`http://${srv.addr}/hc/`, { method: 'OPTIONS' });
  const lines = (await opts.text()).split('\n').filter(Boolean);
  assert.ok(lines.length > 0);
  for (const line of lines) assert.equal(certFromText(line).version, 2, 'the server announces profile 2');

  const log = [];
  const c = createClient({ mount: '/hc', fetch: recordingFetch(log) });
  const first = await c.fetch(`http://${srv.addr}/hello.txt`);
  assert.equal(first.status, 200);
  assert.equal(await first.text(), 'hello from httpcrypt\n');
  const info1 = exchangeInfo(first);
  assert.equal(info1.credential, 'key');
  assert.equal(info1.profile, 2);
  assert.equal(info1.attempts, 1);
  assert.ok(first.headers.get('ticket'), 'the server issued a ticket');
  assert.equal(first.headers.get('date'), null, 'a profile-2 inner response carries no Date');

  const second = await c.fetch(`http://${srv.addr}/hello.txt`, { method: 'POST', body: 'ignored' });
  await second.arrayBuffer();
  const info2 = exchangeInfo(second);
  assert.equal(info2.credential, 'ticket');
  assert.equal(info2.profile, 2);
  const third = await c.fetch(`http://${srv.addr}/hello.txt`);
  assert.equal(await third.text(), 'hello from httpcrypt\n');
  assert.equal(exchangeInfo(third).credential, 'ticket');

  // What went on the wire: a 33-character segment "2" + b64u(n0) whose first 5 bytes are the time,
  // and cookie pads of at most 7 characters after a key (43 characters), then after the short
  // ticket it asked for (22, spec §7.3).
  const sealed = log.filter((l) => l.method !== 'OPTIONS');
  assert.equal(sealed.length, 3);
  for (const [i, l] of sealed.entries()) {
    const segment = new URL(l.url).pathname.slice('/hc/'.length);
    assert.match(segment, /^2[A-Za-z0-9_-]{32}$/);
    assert.ok(Math.abs(nonceTime(b64uDecode(segment.slice(1))) - Date.now() / 1000) < 30);
    const [name, value] = l.cookie.split('=');
    assert.ok(name.length >= 14 && name.length <= 21, `name pad 0-7: ${name}`);
    const base = i === 0 ? 43 : 22;
    assert.ok(value.length >= base && value.length <= base + 7, `value pad 0-7: ${value.length}`);
  }
  assert.deepEqual(
    sealed.map((l) => l.method),
    ['GET', 'GET', 'GET'],
    'small requests take the GET form',
  );

  // The POST form (sealed body) in profile 2, fresh key then ticket.
  const postLog = [];
  const p = createClient({ mount: '/hc', form: 'post', fetch: recordingFetch(postLog) });
  for (const credential of ['key', 'ticket']) {
    const rsp = await p.fetch(`http://${srv.addr}/hello.txt`);
    assert.equal(await rsp.text(), 'hello from httpcrypt\n');
    assert.deepEqual([exchangeInfo(rsp).form, exchangeInfo(rsp).profile, exchangeInfo(rsp).credential], ['post', 2, credential]);
  }
  for (const l of postLog.filter((x) => x.method !== 'OPTIONS')) {
    assert.equal(l.method, 'POST');
    assert.match(new URL(l.url).pathname, /^\/hc\/2[A-Za-z0-9_-]{32}$/);
  }
});

test('serve --compact: stale in profile 2, one retry with the corrected time in n0', async () => {
  const srv = await compactServe();
  const log = [];
  const late = createClient({ mount: '/hc', now: () => Date.now() / 1000 + 300, fetch: recordingFetch(log) });
  const rsp = await late.fetch(`http://${srv.addr}/hello.txt`);
  assert.equal(rsp.status, 200);
  assert.equal(await rsp.text(), 'hello from httpcrypt\n');
  assert.equal(exchangeInfo(rsp).attempts, 2, 'one retry after stale');
  assert.equal(exchangeInfo(rsp).profile, 2);
  const times = log.filter((l) => l.method !== 'OPTIONS').map((l) => nonceTime(b64uDecode(new URL(l.url).pathname.slice('/hc/2'.length))));
  assert.equal(times.length, 2);
  assert.ok(Math.abs(times[0] - Date.now() / 1000 - 300) < 30, 'first n0: the skewed clock');
  assert.ok(Math.abs(times[1] - Date.now() / 1000) < 30, 'second n0: the corrected clock');
});

/** POSTs a sealed stream with exactly the given outer Host and Cookie (node:http lets a test choose Host). */
function postSealed(addr, target, host, cookie, body) {
  const [hostname, port] = addr.split(':');
  return new Promise((resolve, reject) => {
    const req = http.request({ hostname, port: Number(port), method: 'POST', path: target, headers: { Host: host, Cookie: cookie, 'Content-Type': 'application/octet-stream', 'Content-Length': body.length } }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, body: new Uint8Array(Buffer.concat(chunks)) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(Buffer.from(body));
  });
}

test('serve --compact: a v1 request still works on the same key; a rewritten Host breaks profile 2', async () => {
  const srv = await compactServe();
  const opts = await fetch(`http://${srv.addr}/hc/`, { method: 'OPTIONS' });
  const cert = chooseCert(parseCertList(await opts.text()), Math.floor(Date.now() / 1000));
  assert.equal(cert.version, 2);
  const enc = (s) => new TextEncoder().encode(s);
  const fresh = () => ({ kind: 'key', secret: randomBytes(32) });

  // v1 on a version-2 key (the client may use v1 anyway): inner Host and Date, 24-byte response nonce.
  const v1 = prepareRequest(cert.kexPublic, fresh(), randomBytes(24), '', '');
  const v1Inner = enc(`GET /hello.txt HTTP/1.1\r\nHost: ${srv.addr}\r\nDate: ${formatHttpDate(Date.now() / 1000)}\r\n\r\n`);
  const a = await postSealed(srv.addr, noncePath('/hc', v1.n0), srv.addr, v1.cookie, sealMessage(v1, v1Inner, 16384));
  assert.equal(a.status, 200);
  const openedV1 = openResponse(v1, a.body);
  assert.equal(openedV1.head.status, 200);
  assert.equal(new TextDecoder().decode(openedV1.body), 'hello from httpcrypt\n');

  // Profile 2 by hand: no inner Host or Date; the Host on the wire is the bound one.
  const p2Inner = enc('GET /hello.txt HTTP/1.1\r\n\r\n');
  const good = prepareRequest(cert.kexPublic, fresh(), compactNonce(Date.now() / 1000), '', '', { profile: 2, host: srv.addr });
  const b = await postSealed(srv.addr, noncePath('/hc', good.n0, 2), srv.addr, good.cookie, sealMessage(good, p2Inner, 16384));
  assert.equal(b.status, 200);
  const openedV2 = openResponse(good, b.body);
  assert.equal(openedV2.head.status, 200);
  assert.equal(new TextDecoder().decode(openedV2.body), 'hello from httpcrypt\n');

  // The same kind of request with another Host on the wire than the one sealed: inner 500 integrity.
  const bad = prepareRequest(cert.kexPublic, fresh(), compactNonce(Date.now() / 1000), '', '', { profile: 2, host: srv.addr });
  const other = `localhost:${srv.addr.split(':')[1]}`;
  const c = await postSealed(srv.addr, noncePath('/hc', bad.n0, 2), other, bad.cookie, sealMessage(bad, p2Inner, 16384));
  assert.equal(c.status, 200, 'errors after the key agreement travel sealed');
  const openedBad = openResponse(bad, c.body);
  assert.equal(openedBad.head.status, 500);
  assert.equal(JSON.parse(new TextDecoder().decode(openedBad.body)).type, 'urn:httpcrypt:integrity');
});
