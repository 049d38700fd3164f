// Profile 2 (spec §4.5) in memory: the byte layouts (nonce, target,
// associated data of record 0 in both directions, response body), the
// server-side checks of the in-memory server, and hcFetch choosing profile 2
// from a version-2 certificate against the fake server (fake.mjs).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as hc from '../dist/index.js';
import { NOW, ORIGIN, fakeFetch, installBrowser, makeServer } from './fake.mjs';

const { fromHex: hex, toHex, utf8, concat } = hc;
const KEY = hex('11'.repeat(32));
const u32be = (n) => Uint8Array.of(n >>> 24, (n >>> 16) & 0xff, (n >>> 8) & 0xff, n & 0xff);

test('certificate version byte: 1 and 2 read back, anything else is bad_certificate', () => {
  const seed = hex('01'.repeat(32));
  const kex = hc.x25519Public(hex('02'.repeat(32)));
  for (const version of [1, 2]) {
    const c = hc.signCert(seed, 5, 100, 200, kex, version);
    const bytes = hc.encodeCert(c);
    assert.equal(bytes[0], version);
    const back = hc.certFromText(hc.certToText(c));
    assert.equal(hc.certVersion(back), version);
    hc.verifyCert(back, hc.ed25519Public(seed)); // the version byte is signed
  }
  const v2 = hc.encodeCert(hc.signCert(seed, 5, 100, 200, kex, 2));
  for (const bad of [0, 3, 255]) {
    const b = v2.slice();
    b[0] = bad;
    assert.throws(() => hc.decodeCert(b), (e) => e.code === 'bad_certificate');
  }
  // Flipping 1 <-> 2 keeps the layout but breaks the signature.
  const flipped = v2.slice();
  flipped[0] = 1;
  assert.throws(() => hc.verifyCert(hc.decodeCert(flipped), hc.ed25519Public(seed)), (e) => e.code === 'bad_signature');
  // A certificate object without the field is version 1, as before profile 2.
  const legacy = { ...hc.signCert(seed, 5, 100, 200, kex) };
  delete legacy.version;
  assert.equal(hc.encodeCert(legacy)[0], 1);
});

test('request nonce: u40(t) || 19 random bytes; the time reads back; freshness window closed', () => {
  const r = hex('ab'.repeat(19));
  const n0 = hc.compactNonce(0x0102030405, r);
  assert.equal(toHex(n0), '0102030405' + 'ab'.repeat(19));
  assert.equal(hc.nonceTime(n0), 0x0102030405);
  const now = 1_800_000_000;
  const t = hc.compactNonce(now);
  assert.equal(toHex(t.subarray(0, 5)), '006b49d200');
  assert.equal(t.length, 24);
  assert.notEqual(toHex(hc.compactNonce(now).subarray(5)), toHex(t.subarray(5)), 'the rest is random');
  assert.equal(hc.checkNonceTime(t, now + 60, 60), now);
  assert.equal(hc.checkNonceTime(t, now - 60, 60), now);
  assert.throws(() => hc.checkNonceTime(t, now + 61, 60), (e) => e.code === 'stale');
  assert.throws(() => hc.checkNonceTime(t, now - 61, 60), (e) => e.code === 'stale');
  assert.throws(() => hc.compactNonce(2 ** 40), (e) => e.code === 'config');
});

test('target: {mount}/2{b64u(n0)}, 33 characters; routing tells the profiles apart', () => {
  const n0 = hex('00'.repeat(5) + 'ff'.repeat(19));
  const seg = hc.b64uEncode(n0);
  assert.equal(hc.noncePath('/hc', n0, 2), `/hc/2${seg}`);
  assert.equal(hc.noncePath('/hc', n0), `/hc/${seg}`);
  assert.equal(hc.getTarget('', n0, Uint8Array.of(1, 2, 3), 2), `/2${seg}?AQID`);
  assert.deepEqual(
    (({ route, profile, n0: x, query }) => ({ route, profile, n0: toHex(x), query }))(hc.route('GET', `/hc/2${seg}?AQID`, '/hc')),
    { route: 'get', profile: 2, n0: toHex(n0), query: 'AQID' },
  );
  assert.equal(hc.route('POST', `/hc/2${seg}`, '/hc').profile, 2);
  assert.equal(hc.route('POST', `/hc/${seg}`, '/hc').profile, 1);
  for (const bad of [`/hc/1${seg}`, `/hc/3${seg}`, `/hc/${seg}A`, `/hc/2${seg.slice(0, 31)}+`, `/hc/22${seg}`]) {
    assert.throws(() => hc.route('POST', bad, '/hc'), (e) => e.code === 'bad_nonce_path', bad);
  }
  // The GET-form limit counts the extra character: 'GET /hcx/{32} ?{1948} HTTP/1.1' is 1999 bytes.
  assert.equal(hc.encodedLen(1461), 1948);
  assert.ok(hc.fitsGetForm('/hcx', 1461, 1) && !hc.fitsGetForm('/hcx', 1461, 2));
  assert.ok(hc.fitsGetForm('/hcx', 1460, 2));
});

test('record 0 of a profile-2 request: AD = "hc2-req" || u16(len(host)) || host || header_0', () => {
  const n0 = hc.compactNonce(1_800_000_000, hex('cd'.repeat(19)));
  const host = 'example.com:8080';
  const plaintext = utf8('GET / HTTP/1.1\r\n\r\n');
  const rec = hc.Sealer.compactRequest(KEY, n0, host).finish(plaintext);
  const header = rec.subarray(0, 4);
  assert.equal(toHex(header), toHex(u32be((0x80000000 | plaintext.length) >>> 0)));
  const ad = concat(utf8('hc2-req'), Uint8Array.of(0, 16), utf8(host), header);
  assert.equal(toHex(hc.firstRecordAdPrefix({ kind: 'request', profile: 2, host: utf8(host) })), toHex(ad.subarray(0, ad.length - 4)));
  // Open with the raw AEAD: payload || tag under n0 and exactly that AD.
  const sealed = concat(rec.subarray(20), rec.subarray(4, 20));
  assert.equal(toHex(hc.aeadOpen(KEY, n0, sealed, ad)), toHex(plaintext));
  // The v1 AD does not open it, nor another Host, nor the same Host with other case.
  assert.equal(hc.aeadOpen(KEY, n0, sealed, concat(utf8('hc1-req'), header)), null);
  for (const other of ['example.com', 'Example.com:8080', 'example.com:8080 ']) {
    assert.throws(() => hc.openAll(hc.Opener.compactRequest(KEY, n0, other), rec), (e) => e.code === 'integrity', other);
  }
  assert.equal(toHex(hc.openAll(hc.Opener.compactRequest(KEY, n0, host), rec)), toHex(plaintext));
  // Later records chain on the previous tag, as in v1.
  const s = hc.Sealer.compactRequest(KEY, n0, host);
  const r0 = s.seal(utf8('ab'));
  const r1 = s.finish(utf8('cd'));
  const ad1 = concat(r0.subarray(4, 20), r1.subarray(0, 4));
  assert.equal(hc.fromLatin1(hc.aeadOpen(KEY, hc.nonceAdd(n0, 1), concat(r1.subarray(20), r1.subarray(4, 20)), ad1)), 'cd');
  // A Host longer than 65535 bytes cannot be bound.
  assert.throws(() => hc.Sealer.compactRequest(KEY, n0, 'a'.repeat(65536)), (e) => e.code === 'bad_host');
  assert.doesNotThrow(() => hc.Sealer.compactRequest(KEY, n0, 'a'.repeat(65535)));
});

test('profile-2 response: body r || stream, nonce 0xff^8 || r, AD = "hc2-rsp" || request_n0 || header_0', () => {
  const requestN0 = hc.compactNonce(1_800_000_000, hex('cd'.repeat(19)));
  const r = hex('5a'.repeat(16));
  const inner = utf8('HTTP/1.1 200 OK\r\n\r\nhi');
  const rec = hc.Sealer.compactResponse(KEY, r, requestN0).finish(inner);
  const body = concat(r, rec);
  const header = rec.subarray(0, 4);
  const ad = concat(utf8('hc2-rsp'), requestN0, header);
  const nonce = concat(hex('ff'.repeat(8)), r);
  assert.equal(toHex(hc.compactResponseNonce(r)), toHex(nonce));
  assert.equal(toHex(hc.aeadOpen(KEY, nonce, concat(rec.subarray(20), rec.subarray(4, 20)), ad)), toHex(inner));
  // The client opens it through the prepared request, head and body.
  const p = hc.prepareRequest(hc.x25519Public(KEY), { kind: 'ticket', ticket: new Uint8Array(96), sessionKey: KEY }, requestN0, '', '', { profile: 2, host: 'h' });
  const back = hc.openResponse(p, body);
  assert.equal(back.head.status, 200);
  assert.deepEqual(back.head.fields, [], 'no Date, no Content-Length needed');
  assert.equal(hc.fromLatin1(back.body), 'hi');
  // Every split opens the same way; a v1 opener or another request's n0 does not open it.
  for (let i = 0; i <= body.length; i++) {
    const o = hc.Opener.compactResponse(KEY, requestN0);
    o.receive(body.subarray(0, i));
    o.receive(body.subarray(i));
    const parts = [];
    for (let ev = o.nextEvent(); ev !== null; ev = o.nextEvent()) if (ev.type === 'data') parts.push(ev.plaintext);
    o.finish();
    assert.equal(toHex(concat(...parts)), toHex(inner));
  }
  assert.throws(() => hc.openAll(hc.Opener.response(KEY, requestN0), body), (e) => ['integrity', 'truncated', 'record_too_large'].includes(e.code));
  assert.throws(() => hc.openAll(hc.Opener.compactResponse(KEY, hc.compactNonce(1)), body), (e) => e.code === 'integrity');
  assert.throws(() => hc.openAll(hc.Opener.compactResponse(KEY, requestN0), r.subarray(0, 15)), (e) => e.code === 'truncated');
  assert.throws(() => hc.openAll(hc.Opener.compactResponse(KEY, requestN0), r), (e) => e.code === 'truncated');
});

test('exchange in memory: outer request bytes, server accept (Host bound, bad_host), response', () => {
  const srv = makeServer({ version: 2 });
  const clientSecret = hex('07'.repeat(32));
  const n0 = hc.compactNonce(NOW);
  const host = 'app.test:8080';
  const p = hc.prepareRequest(srv.cert.kexPublic, { kind: 'key', secret: clientSecret }, n0, 'AbC', '', { profile: 2, host });
  assert.equal(p.profile, 2);
  const inner = utf8('GET /x HTTP/1.1\r\n\r\n');
  const stream = hc.sealMessage(p, inner, 16384);
  const outer = hc.encodeOuterRequest(p, 'post', '/hc', host, stream);
  const head = hc.fromLatin1(outer.subarray(0, outer.length - stream.length));
  assert.equal(
    head,
    `POST /hc/2${hc.b64uEncode(n0)} HTTP/1.1\r\nHost: ${host}\r\nCookie: ${p.cookie}\r\nContent-Type: application/octet-stream\r\nContent-Length: ${stream.length}\r\n\r\n`,
  );
  assert.throws(() => hc.encodeOuterRequest(p, 'post', '/hc', 'other.test', stream), (e) => e.code === 'config');
  const req = hc.server.parseOuterRequest(outer);
  const a = hc.server.accept(srv.cfg, req, NOW).accepted;
  assert.equal(a.profile, 2);
  assert.equal(a.host, host);
  const opened = hc.server.openRequest(a, req.body);
  assert.equal(opened.head.target, '/x');
  assert.deepEqual(opened.head.fields, []);
  // A rewritten Host breaks record 0.
  assert.throws(() => hc.server.openRequest(hc.server.accept(srv.cfg, { ...req, host: 'app.test' }, NOW).accepted, req.body), (e) => e.code === 'integrity');
  // Host above 65535 bytes: bad_host for profile 2 (after the nonce path), nothing for v1.
  const long = 'h'.repeat(65536);
  assert.throws(() => hc.server.accept(srv.cfg, { ...req, host: long }, NOW), (e) => e.code === 'bad_host');
  assert.throws(() => hc.server.accept(srv.cfg, { ...req, host: long, target: '/hc/2' + 'A'.repeat(30) }, NOW), (e) => e.code === 'bad_nonce_path');
  // Step 3 before step 4: a profile-2 GET without a query and with a long Host is bad_host; v1 bad_query.
  const getNoQuery = { ...req, method: 'GET', body: new Uint8Array(0), contentLength: null };
  assert.throws(() => hc.server.accept(srv.cfg, { ...getNoQuery, host: long, target: hc.noncePath('/hc', n0, 2) }, NOW), (e) => e.code === 'bad_host');
  assert.throws(() => hc.server.accept(srv.cfg, { ...getNoQuery, target: hc.noncePath('/hc', n0, 2) }, NOW), (e) => e.code === 'bad_query');
  assert.throws(() => hc.server.accept(srv.cfg, { ...getNoQuery, host: long, target: hc.noncePath('/hc', n0) }, NOW), (e) => e.code === 'bad_query');
  const v1 = hc.prepareRequest(srv.cert.kexPublic, { kind: 'key', secret: clientSecret }, hc.randomBytes(24), '', '');
  const v1req = hc.server.parseOuterRequest(hc.encodeOuterRequest(v1, 'post', '/hc', host, hc.sealMessage(v1, inner, 16384)));
  assert.equal(hc.server.accept(srv.cfg, { ...v1req, host: long }, NOW).accepted.profile, 1);
  // The response: 16 random bytes, then the stream.
  assert.equal(hc.server.responseNonceLen(a), 16);
  assert.throws(() => hc.server.sealResponse(a, hc.randomBytes(24), inner, 100), (e) => e.code === 'config');
  const rsp = hc.server.sealResponse(a, hex('99'.repeat(16)), utf8('HTTP/1.1 204 No Content\r\n\r\n'), 100);
  assert.equal(toHex(rsp.subarray(0, 16)), '99'.repeat(16));
  assert.equal(hc.openResponse(p, rsp).head.status, 204);
});

test('hcFetch: a version-2 certificate means profile 2 on the wire (segment, pads, inner head, Host bound)', async () => {
  const srv = makeServer({ version: 2 });
  const log = [];
  const c = hc.createClient({ mount: '/hc', identity: srv.identity, fetch: fakeFetch(srv, { log }) });
  const sizes = { name: new Set(), value: new Set() };
  for (let i = 0; i < 30; i++) {
    const method = i % 2 ? 'POST' : 'GET';
    const rsp = await c.fetch(`${ORIGIN}/p/${i}`, method === 'POST' ? { method, body: 'xyz', headers: { 'X-A': 'b' } } : {});
    assert.equal(rsp.status, 200);
    const d = await rsp.json();
    assert.equal(d.target, `/p/${i}`);
    const names = d.fields.map(([n]) => n.toLowerCase());
    assert.ok(!names.includes('host') && !names.includes('date'), `no inner Host or Date: ${names}`);
    if (method === 'POST') assert.ok(names.includes('x-a') && names.includes('content-length'));
    const info = hc.exchangeInfo(rsp);
    assert.equal(info.profile, 2);
    assert.equal(info.credential, i === 0 ? 'key' : 'ticket');
    const segment = new URL(info.outerUrl).pathname.slice('/hc/'.length);
    assert.match(segment, /^2[A-Za-z0-9_-]{32}$/);
    assert.ok(Math.abs(hc.nonceTime(hc.b64uDecode(segment.slice(1))) - Date.now() / 1000) < 5, 'n0 carries the clock');
    const entry = log.filter((l) => l.method !== 'OPTIONS').at(-1);
    assert.equal(entry.profile, 2, 'the server saw profile 2');
    const [name, value] = entry.cookies[0].split('=');
    sizes.name.add(name.length - 14);
    assert.equal(entry.credential, i === 0 ? 'key' : 'short_ticket');
    sizes.value.add(value.length - (i === 0 ? 43 : 22));
  }
  for (const s of [sizes.name, sizes.value]) assert.ok(Math.max(...s) <= 7 && Math.min(...s) >= 0 && s.size > 2, `pads 0-7: ${[...s]}`);
  // The same server with a version-1 certificate gets v1.
  const v1 = makeServer();
  const c1 = hc.createClient({ mount: '/hc', fetch: fakeFetch(v1) });
  const r1 = await c1.fetch(`${ORIGIN}/a`);
  const d1 = await r1.json();
  assert.equal(hc.exchangeInfo(r1).profile, 1);
  assert.match(new URL(hc.exchangeInfo(r1).outerUrl).pathname, /^\/hc\/[A-Za-z0-9_-]{32}$/);
  assert.ok(d1.fields.some(([n]) => n === 'Host') && d1.fields.some(([n]) => n === 'Date'));
  // `compact: false` keeps v1 with a version-2 key; the server takes both.
  const c2 = hc.createClient({ mount: '/hc', compact: false, fetch: fakeFetch(srv) });
  const r2 = await c2.fetch(`${ORIGIN}/b`);
  assert.equal((await r2.json()).target, '/b');
  assert.equal(hc.exchangeInfo(r2).profile, 1);
  assert.match(new URL(hc.exchangeInfo(r2).outerUrl).pathname, /^\/hc\/[A-Za-z0-9_-]{32}$/);
});

test('hcFetch profile 2: a middlebox rewriting Host gets an inner integrity error', async () => {
  const srv = makeServer({ version: 2 });
  const c = hc.createClient({ mount: '/hc', fetch: fakeFetch(srv, { host: (h) => h.replace(':8080', '') }) });
  await assert.rejects(c.fetch(`${ORIGIN}/x`), (e) => {
    assert.ok(e instanceof hc.HttpCryptError);
    assert.equal(e.code, 'integrity');
    assert.equal(e.problem.scope, 'inner');
    return true;
  });
  // A v1 request through the same middlebox still works (its Host is not bound).
  const v1 = makeServer();
  const c1 = hc.createClient({ mount: '/hc', fetch: fakeFetch(v1, { host: (h) => h.replace(':8080', '') }) });
  assert.equal((await c1.fetch(`${ORIGIN}/x`)).status, 200);
});

test('hcFetch profile 2: stale answer, one retry with the corrected time in a new n0', async () => {
  const srv = makeServer({ version: 2 });
  const log = [];
  const late = hc.createClient({ mount: '/hc', now: () => NOW + 300, fetch: fakeFetch(srv, { log, freshness: true }) });
  const rsp = await late.fetch(`${ORIGIN}/s`);
  assert.equal(rsp.status, 200);
  assert.equal(hc.exchangeInfo(rsp).attempts, 2);
  const times = log.filter((l) => l.method !== 'OPTIONS').map((l) => hc.nonceTime(hc.b64uDecode(l.path.slice('/hc/2'.length))));
  assert.deepEqual(times, [NOW + 300, NOW]);
  const next = await late.fetch(`${ORIGIN}/s`);
  assert.equal(hc.exchangeInfo(next).attempts, 1, 'the offset is kept');
  await next.arrayBuffer();
  // Without correction possible (the clock keeps running away) the second stale is the error.
  let skew = 300;
  const runaway = hc.createClient({ mount: '/hc', now: () => NOW + (skew += 300), fetch: fakeFetch(srv, { freshness: true }) });
  await assert.rejects(runaway.fetch(`${ORIGIN}/s`), (e) => e.code === 'stale');
});

test('hcFetch profile 2 in document mode: the cookie path is the 33-character segment', async () => {
  const srv = makeServer({ version: 2 });
  const b = installBrowser(ORIGIN);
  try {
    const c = hc.createClient({ mount: '/hc', tickets: false, fetch: fakeFetch(srv, { cookiesFor: b.cookiesFor }) });
    const results = await Promise.all(Array.from({ length: 6 }, (_, i) => c.fetch(`/item/${i}`).then((r) => r.json())));
    results.forEach((d, i) => assert.equal(d.target, `/item/${i}`));
    for (const w of b.writes) assert.match(w, /; path=\/hc\/2[A-Za-z0-9_-]{32}; max-age=(60|0); samesite=strict$/);
    assert.equal(b.jar.size, 0);
  } finally {
    b.uninstall();
  }
});
