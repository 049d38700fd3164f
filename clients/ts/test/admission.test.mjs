// The client's side of the admission defence (spec §14.5) against the
// in-memory server behind a gate that plays a server under load: it checks
// every echo with `verifyEcho` (as the vectors pin it), answers outer 429
// `admission` / `busy` problems, and logs what each outer request carried.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as hc from '../dist/index.js';
import { NOW, ORIGIN, fakeFetch, installBrowser, makeServer } from './fake.mjs';

const ADDR = hc.addr16('127.0.0.1');

function problem(doc, retryAfter = 0) {
  return new Response(JSON.stringify({ title: 'under load', status: 429, ...doc }), {
    status: 429,
    headers: { 'content-type': 'application/problem+json', 'cache-control': 'no-store', 'retry-after': String(retryAfter) },
  });
}

/**
 * A server under load in front of `inner`. `decide(req)` returns a Response
 * to answer instead (or null to serve); by default: fresh-key requests need
 * a valid echo of difficulty `difficulty`, tickets pass.
 */
function underLoad(srv, { difficulty = 8, decide = null, cookiesFor = null } = {}) {
  const secret = hc.randomBytes(32);
  const step = Math.floor(NOW / 30);
  const log = [];
  const challenge = (d = difficulty) => problem({ type: 'urn:httpcrypt:admission', admit: hc.b64uEncode(hc.admitCookie(secret, step, d, ADDR)), difficulty: d });
  const valid = (echo, n0) => {
    try {
      hc.verifyEcho(echo, n0, ADDR, [secret], step);
      return true;
    } catch (e) {
      assert.equal(e.code, 'bad_admission');
      return false;
    }
  };
  const standard = (r) => (r.ticket || (r.echo !== null && r.valid) ? null : challenge());
  const inner = fakeFetch(srv, cookiesFor ? { cookiesFor } : {});
  const transport = async (url, init = {}) => {
    if ((init.method ?? 'GET') === 'OPTIONS') return inner(url, init);
    const u = new URL(url);
    const text = cookiesFor ? cookiesFor(u.pathname).join('; ') : (new Headers(init.headers).get('cookie') ?? '');
    const pairs = text.split(';').map((x) => x.trim()).filter(Boolean);
    const echoPair = pairs.find((x) => x.startsWith('hc1-admit='));
    const echo = echoPair ? echoPair.slice('hc1-admit='.length) : null;
    const cred = pairs.find((x) => !x.startsWith('hc1-admit='));
    // A v1 ticket (115–131 characters) or a short one (22–38, spec §7.3); a key is 43–59.
    const valueLen = cred.split('=')[1].length;
    const ticket = valueLen >= 115 || valueLen <= 38;
    const n0 = hc.b64uDecode(u.pathname.split('/').pop());
    const r = { index: log.length, echo, ticket, n0, pairs: pairs.length, valid: echo !== null && valid(echo, n0), status: 200 };
    log.push(r);
    const answer = decide ? decide(r, { challenge, standard }) : standard(r);
    if (answer) {
      r.status = answer.status;
      return answer;
    }
    return inner(url, init);
  };
  return { transport, log, challenge };
}

test('a challenge is solved and the request resent under a new n0 with the echo; later fresh-key requests echo at once', async () => {
  const srv = makeServer();
  const gate = underLoad(srv, { difficulty: 8 });
  const c = hc.createClient({ mount: '/hc', tickets: false, fetch: gate.transport });
  const r = await c.fetch(`${ORIGIN}/a`);
  assert.equal(r.status, 200);
  assert.equal((await r.json()).target, '/a');
  const info = hc.exchangeInfo(r);
  assert.equal(info.attempts, 2);
  assert.deepEqual(info.admission, { challenges: 1, busy: 0, echoDifficulty: 8 });
  assert.deepEqual(gate.log.map((l) => [l.status, l.echo !== null, l.valid]), [[429, false, false], [200, true, true]]);
  assert.notEqual(hc.toHex(gate.log[0].n0), hc.toHex(gate.log[1].n0), 'a new n0');
  // The cookie is kept for the host: the next fresh-key request echoes it with a new solution, no round trip.
  const again = await c.fetch(`${ORIGIN}/b`, { method: 'POST', body: 'x' });
  assert.equal(again.status, 200);
  assert.equal(hc.exchangeInfo(again).attempts, 1);
  assert.deepEqual(hc.exchangeInfo(again).admission, { challenges: 0, busy: 0, echoDifficulty: 8 });
  assert.ok(gate.log[2].valid);
  assert.notEqual(gate.log[2].echo, gate.log[1].echo, 'a solution per n0');
  await again.arrayBuffer();
});

test('ticket requests never carry the echo and are not challenged', async () => {
  const srv = makeServer();
  const gate = underLoad(srv, { difficulty: 6 });
  const c = hc.createClient({ mount: '/hc', fetch: gate.transport });
  await (await c.fetch(`${ORIGIN}/1`)).arrayBuffer(); // challenged, solved, ticket issued
  for (let i = 0; i < 3; i++) {
    const r = await c.fetch(`${ORIGIN}/t${i}`);
    assert.equal(hc.exchangeInfo(r).credential, 'ticket');
    assert.equal(hc.exchangeInfo(r).attempts, 1);
    assert.equal(hc.exchangeInfo(r).admission.echoDifficulty, null);
    await r.arrayBuffer();
  }
  assert.deepEqual(gate.log.map((l) => [l.ticket, l.echo !== null, l.status]), [
    [false, false, 429],
    [false, true, 200],
    [true, false, 200],
    [true, false, 200],
    [true, false, 200],
  ]);
});

test('the echo lapses 25 s after the challenge (client clock)', async () => {
  const srv = makeServer();
  let offset = 0;
  const gate = underLoad(srv, { difficulty: 4 });
  const c = hc.createClient({ mount: '/hc', tickets: false, fetch: gate.transport, now: () => Date.now() / 1000 + offset });
  await (await c.fetch(`${ORIGIN}/1`)).arrayBuffer();
  offset = 20;
  await (await c.fetch(`${ORIGIN}/2`)).arrayBuffer();
  offset = 26;
  const late = await c.fetch(`${ORIGIN}/3`);
  await late.arrayBuffer();
  assert.equal(hc.exchangeInfo(late).attempts, 2, 'the lapsed cookie was not sent: challenged again');
  assert.deepEqual(gate.log.map((l) => [l.echo !== null, l.status]), [[false, 429], [true, 200], [true, 200], [false, 429], [true, 200]]);
});

test('three retries at most: a server that keeps challenging ends in admission_required', async () => {
  const srv = makeServer();
  const gate = underLoad(srv, { difficulty: 2, decide: (_r, { challenge }) => challenge() });
  const c = hc.createClient({ mount: '/hc', tickets: false, fetch: gate.transport });
  await assert.rejects(c.fetch(`${ORIGIN}/x`), (e) => {
    assert.ok(e instanceof hc.HttpCryptError);
    assert.equal(e.code, 'admission_required');
    assert.deepEqual({ type: e.problem.type, status: e.problem.status, scope: e.problem.scope }, { type: 'urn:httpcrypt:admission', status: 429, scope: 'outer' });
    return true;
  });
  assert.equal(gate.log.length, 4, 'the first send and three retries');
  assert.ok(gate.log.slice(1).every((l) => l.valid), 'every retry carried a valid echo');
});

test('a difficulty above 24 is not attempted: bad_admission at once', async () => {
  const srv = makeServer();
  const gate = underLoad(srv, { decide: (r, { challenge }) => (r.echo === null ? challenge(25) : null) });
  const c = hc.createClient({ mount: '/hc', tickets: false, fetch: gate.transport });
  const t = performance.now();
  await assert.rejects(c.fetch(`${ORIGIN}/x`), (e) => e instanceof hc.HttpCryptError && e.code === 'bad_admission' && e.problem?.type === 'urn:httpcrypt:admission');
  assert.ok(performance.now() - t < 2000);
  assert.equal(gate.log.length, 1);
  // A challenge without a usable cookie cannot be answered either.
  const junk = hc.createClient({ mount: '/hc', fetch: async (url, init) => (init?.method === 'OPTIONS' ? fakeFetch(srv)(url, init) : problem({ type: 'urn:httpcrypt:admission', admit: 'short', difficulty: 1 })) });
  await assert.rejects(junk.fetch(`${ORIGIN}/x`), (e) => e.code === 'admission_required');
});

test('busy: waits min(retry_after, 5 s) and sends again; busy and challenges share the bound of three', async () => {
  const srv = makeServer();
  // retry_after 1, then served.
  let gate = underLoad(srv, { decide: (r, { standard }) => (r.index === 1 ? problem({ type: 'urn:httpcrypt:busy', retry_after: 1 }, 1) : standard(r)) });
  let c = hc.createClient({ mount: '/hc', tickets: false, fetch: gate.transport });
  let t = performance.now();
  let r = await c.fetch(`${ORIGIN}/x`);
  let waited = performance.now() - t;
  await r.arrayBuffer();
  assert.deepEqual(gate.log.map((l) => l.status), [429, 429, 200]);
  assert.deepEqual(hc.exchangeInfo(r).admission, { challenges: 1, busy: 1, echoDifficulty: 8 });
  assert.ok(waited >= 950 && waited < 4000, `waited ${waited} ms`);
  // retry_after 100 is capped at 5 s.
  gate = underLoad(srv, { decide: (r) => (r.index === 0 ? problem({ type: 'urn:httpcrypt:busy', retry_after: 100 }, 100) : null) });
  c = hc.createClient({ mount: '/hc', tickets: false, fetch: gate.transport });
  t = performance.now();
  r = await c.fetch(`${ORIGIN}/y`);
  waited = performance.now() - t;
  await r.arrayBuffer();
  assert.ok(waited >= 4950 && waited < 9000, `waited ${waited} ms (cap 5 s)`);
  // challenge, busy, busy, busy: the fourth 429 is the error.
  gate = underLoad(srv, { decide: (r, { challenge }) => (r.index === 0 ? challenge(3) : problem({ type: 'urn:httpcrypt:busy', retry_after: 0 }, 1)) });
  c = hc.createClient({ mount: '/hc', tickets: false, fetch: gate.transport });
  await assert.rejects(c.fetch(`${ORIGIN}/z`), (e) => e.code === 'busy' && e.problem.type === 'urn:httpcrypt:busy');
  assert.equal(gate.log.length, 4);
});

test('a streamed body cannot be sent again: the challenge is an error, the cookie serves the next call', async () => {
  const srv = makeServer();
  const gate = underLoad(srv, { difficulty: 5 });
  const c = hc.createClient({ mount: '/hc', tickets: false, fetch: gate.transport });
  const body = new ReadableStream({
    pull(ctrl) {
      ctrl.enqueue(new Uint8Array(10));
      ctrl.close();
    },
  });
  await assert.rejects(c.fetch(`${ORIGIN}/s`, { method: 'POST', body, duplex: 'half' }), (e) => e.code === 'admission_required');
  assert.equal(gate.log.length, 1);
  const body2 = new ReadableStream({
    pull(ctrl) {
      ctrl.enqueue(new Uint8Array(10));
      ctrl.close();
    },
  });
  const r = await c.fetch(`${ORIGIN}/s`, { method: 'POST', body: body2, duplex: 'half' });
  assert.equal((await r.json()).length, 10);
  assert.deepEqual(gate.log.map((l) => [l.echo !== null, l.status]), [[false, 429], [true, 200]]);
});

test('document mode: the echo is one more cookie on the nonce path, set and removed with the key cookie', async () => {
  const srv = makeServer();
  const b = installBrowser(ORIGIN);
  try {
    const gate = underLoad(srv, { difficulty: 6, cookiesFor: b.cookiesFor });
    const c = hc.createClient({ mount: '/hc', tickets: false, fetch: gate.transport });
    const results = await Promise.all(Array.from({ length: 4 }, (_, i) => c.fetch(`/d/${i}`).then((r) => r.json())));
    results.forEach((d, i) => assert.equal(d.target, `/d/${i}`));
    const echoed = gate.log.filter((l) => l.echo !== null);
    assert.ok(echoed.length >= 4 && echoed.every((l) => l.valid && l.pairs === 2), 'each echo travelled alone with its own key pair');
    const admitWrites = b.writes.filter((w) => w.startsWith('hc1-admit='));
    assert.equal(admitWrites.length, 2 * echoed.length, 'set and removed once per echoing request');
    for (const w of admitWrites) assert.match(w, /^hc1-admit=([A-Za-z0-9_-]{39})?; path=\/hc\/[A-Za-z0-9_-]{32}; max-age=(60|0); samesite=strict$/);
    assert.equal(b.jar.size, 0, 'nothing left in the jar');
  } finally {
    b.uninstall();
  }
});

test('the solver yields to the event loop every yieldEvery hashes, and its solutions verify', async () => {
  const secret = hc.randomBytes(32);
  const cookie = hc.admitCookie(secret, 7, 12, ADDR);
  let checked = 0;
  for (let round = 0; round < 50 && checked < 3; round++) {
    const n0 = hc.randomBytes(24);
    let ticks = 0;
    let running = true;
    const tick = () => {
      ticks++;
      if (running) setImmediate(tick);
    };
    setImmediate(tick);
    const s = await hc.solvePuzzle(cookie, n0, 12, { yieldEvery: 256 });
    running = false;
    const tries = Number(new DataView(s.buffer, s.byteOffset).getBigUint64(0)) + 1;
    assert.ok(hc.leadingZeroBits(hc.puzzleHash(cookie, n0, s)) >= 12);
    assert.equal(hc.verifyEcho(hc.formatEcho(cookie, s), n0, ADDR, [secret], 8).difficulty, 12);
    if (tries < 2048) continue;
    // the other task ran about once per 256 hashes
    assert.ok(ticks >= Math.floor(tries / 256) - 1, `${ticks} ticks over ${tries} hashes`);
    checked++;
  }
  assert.equal(checked, 3, 'found three searches long enough to observe');
  // Bounded: a search that runs out is bad_admission; above 24 nothing is tried.
  await assert.rejects(hc.solvePuzzle(cookie, hc.randomBytes(24), 24, { maxTries: 100 }), (e) => e.code === 'bad_admission');
  await assert.rejects(hc.solvePuzzle(cookie, hc.randomBytes(24), 25), (e) => e.code === 'bad_admission');
  // Abortable.
  const ac = new AbortController();
  ac.abort();
  await assert.rejects(hc.solvePuzzle(cookie, hc.randomBytes(24), 24, { signal: ac.signal, yieldEvery: 16 }), (e) => e.code === 'transport');
});
