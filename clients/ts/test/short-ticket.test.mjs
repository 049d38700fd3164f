// Short tickets (spec §7.3) without a network: the engine's policy (ask on
// the first request, present on later ones, ask again on the R-th use and
// after T seconds, no second ask from a concurrent request, a new ticket
// restarts the count), the refusal of a short ticket (drop it, one retry
// with a key), the option that turns it off, and the driver against the
// in-memory server (src/server.ts), which issues short tickets when asked.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as hc from '../dist/index.js';
import { Engine } from '../dist/engine.js';
import { Retries } from '../dist/retry.js';
import { NOW, ORIGIN, fakeFetch, makeServer } from './fake.mjs';

const certsBody = (srv) => hc.utf8(hc.formatCertList(hc.server.validCerts(srv.cfg, NOW)));
const problem = (doc) => hc.utf8(JSON.stringify(doc));
const sealedOf = (log) => log.filter((l) => l.method !== 'OPTIONS');
const bytesEqual = (a, b) => hc.toHex(a) === hc.toHex(b);

/** An engine on a clock the test moves (`clock.t`) that took `srv`'s certificates. */
function engineFor(srv, options = {}) {
  const clock = { t: NOW };
  const e = new Engine({ mount: '/hc', now: () => clock.t, ...options });
  e.storeCerts(ORIGIN, '/hc', 200, 'application/httpcrypt-certs', 'max-age=7200', certsBody(srv));
  return { e, clock };
}

function plan(e, path = '/x') {
  const u = new URL(`${ORIGIN}${path}`);
  return e.plan(u, 'GET', new Headers(), { bytes: new Uint8Array(0), stream: null }, false, e.cachedCert(u.origin, e.now()));
}

/** The server's view of attempt `a`: what it accepted and the inner request it opened. */
function serve(srv, a) {
  const u = new URL(a.outerUrl);
  const req = { method: 'GET', target: u.pathname + u.search, host: u.host, cookies: [a.prepared.cookie], contentLength: null, body: new Uint8Array(0), fields: [] };
  const r = hc.server.accept(srv.cfg, req, NOW);
  assert.equal(r.kind, 'request');
  return { accepted: r.accepted, ...hc.server.openRequest(r.accepted, req.body) };
}

/** The server answers attempt `a` with a new short ticket, as the Rust server does when asked. */
function answerWithShortTicket(srv, e, a) {
  const { accepted, head } = serve(srv, a);
  assert.equal(hc.fieldValue(head.fields, 'ticket'), 'short', 'the attempt asked');
  const tk = hc.server.ticketKeyFor(srv.cfg, accepted.kid, NOW);
  const t = hc.issueShortTicket(tk.tid, tk.key, accepted.kid, hc.randomBytes(16));
  e.answered(a, { status: 200, reason: 'OK', fields: [['Ticket', hc.formatShortTicketField(t)]] });
  return t;
}

/** The cookie value's ticket part (the 22 characters of h, before the pad). */
const hOf = (a) => a.prepared.cookie.split('=')[1].slice(0, 22);

test('policy: ask on the first request, present on later ones, ask again on the R-th use; a new ticket restarts the count', async () => {
  const srv = makeServer();
  const { e } = engineFor(srv, { shortTickets: { reuse: 3 } });
  assert.deepEqual(e.shortTickets, { reuse: 3, maxAge: 600 });
  const a1 = await plan(e);
  assert.deepEqual([a1.prepared.credential, a1.prepared.ticketForm, a1.askTicket], ['key', null, true]);
  const t1 = answerWithShortTicket(srv, e, a1);

  const uses = [];
  for (let i = 0; i < 3; i++) {
    const a = await plan(e);
    assert.deepEqual([a.prepared.credential, a.prepared.ticketForm], ['ticket', 'short']);
    const value = a.prepared.cookie.split('=')[1];
    assert.ok(value.length >= 22 && value.length <= 38, `a short ticket's cookie value: ${value}`);
    assert.deepEqual(a.prepared.sessionKey, t1.key, "sealed under k'");
    const { accepted, head, body } = serve(srv, a);
    assert.deepEqual(accepted.sessionKey, t1.key, "the server derives the same k'");
    assert.equal(accepted.credential.kind, 'short_ticket');
    assert.equal(hc.fieldValue(head.fields, 'ticket'), a.askTicket ? 'short' : undefined);
    assert.equal(body.length, 0);
    uses.push(a);
  }
  assert.deepEqual(
    uses.map((a) => a.askTicket),
    [false, false, true],
    'the third use (R = 3) asks',
  );
  assert.equal(new Set(uses.map(hOf)).size, 1, 'one ticket');
  assert.equal(e.info(uses[2], 1, { challenges: 0, busy: 0 }).ticketForm, 'short');

  // Sent before the answer to the ask arrives (concurrently): the held ticket, without asking again.
  const concurrent = await plan(e);
  assert.deepEqual([concurrent.prepared.ticketForm, concurrent.askTicket, hOf(concurrent)], ['short', false, hOf(uses[0])]);

  const t2 = answerWithShortTicket(srv, e, uses[2]);
  const next = [await plan(e), await plan(e), await plan(e)];
  assert.ok(next.every((a) => bytesEqual(a.prepared.sessionKey, t2.key)), 'the new ticket is presented');
  assert.notEqual(hOf(next[0]), hOf(uses[0]));
  assert.deepEqual(
    next.map((a) => a.askTicket),
    [false, false, true],
    'its count starts again',
  );
});

test('policy: ask again once T seconds have passed since the first use; R = 1 asks every time', async () => {
  const srv = makeServer();
  const { e, clock } = engineFor(srv, { shortTickets: { reuse: 100, maxAge: 60 } });
  answerWithShortTicket(srv, e, await plan(e));
  clock.t = NOW + 10;
  assert.equal((await plan(e)).askTicket, false, 'the first use starts the clock');
  clock.t = NOW + 69;
  assert.equal((await plan(e)).askTicket, false);
  clock.t = NOW + 70;
  const asks = await plan(e);
  assert.deepEqual([asks.prepared.ticketForm, asks.askTicket], ['short', true], 'T = 60 s after the first use');
  assert.equal((await plan(e)).askTicket, false, 'the ask restarts the clock');

  const every = engineFor(srv, { shortTickets: { reuse: 1 } }).e;
  answerWithShortTicket(srv, every, await plan(every));
  for (let i = 0; i < 3; i++) {
    const a = await plan(every);
    assert.deepEqual([a.prepared.ticketForm, a.askTicket], ['short', true]);
    answerWithShortTicket(srv, every, a);
  }
});

test('refused: a 400 malformed answer to a short ticket drops it and retries once with a key; unknown-key drops it too', async () => {
  const srv = makeServer();
  const { e } = engineFor(srv);
  answerWithShortTicket(srv, e, await plan(e));
  const a = await plan(e);
  assert.equal(a.prepared.ticketForm, 'short');
  // The server no longer holds the ticket key: the cookie scan finds nothing, and 22–38 characters have no HTTPCrypt shape.
  srv.cfg.ticketKeys = [{ tid: hc.randomBytes(10), key: hc.randomBytes(32), expires: NOW + 7200, kid: hc.keyId(srv.cert.kexPublic) }];
  assert.throws(() => serve(srv, a), (err) => err.code === 'no_cookie');
  assert.deepEqual(e.refused(a, 400, null, problem({ type: 'urn:httpcrypt:malformed', status: 400 })), { kind: 'retry_short' });
  assert.equal(a.host.short, null);
  const retry = await plan(e);
  assert.deepEqual([retry.prepared.credential, retry.askTicket], ['key', true], 'a key, asking for a new ticket');
  serve(srv, retry);

  // Only a short ticket is dropped on malformed; a key request's malformed answer is an error.
  assert.throws(() => e.refused(retry, 400, null, problem({ type: 'urn:httpcrypt:malformed', status: 400 })), (err) => err.problem?.type === 'urn:httpcrypt:malformed');
  // unknown-key (the ticket key's kex key is gone) drops the short ticket with the v1 one.
  answerWithShortTicket(srv, e, retry);
  const b = await plan(e);
  assert.equal(b.prepared.ticketForm, 'short');
  const doc = problem({ type: 'urn:httpcrypt:unknown-key', status: 400, certs: hc.server.validCerts(srv.cfg, NOW).map(hc.certToText) });
  assert.deepEqual(e.refused(b, 400, null, doc), { kind: 'retry_key' });
  assert.equal(b.host.short, null);

  // One such retry per call; a streamed body gets none.
  const r = new Retries(true);
  assert.equal(r.allow({ kind: 'retry_short' }), null);
  assert.equal(r.allow({ kind: 'retry_key' }), null, 'the key retry is counted apart');
  assert.throws(() => r.allow({ kind: 'retry_short' }), (err) => err.code === 'no_cookie');
  assert.throws(() => new Retries(false).allow({ kind: 'retry_short' }), (err) => err.code === 'no_cookie');
});

test('off: shortTickets false never asks and presents v1 tickets; tickets false turns both off; R below 1 is a config error', async () => {
  const srv = makeServer();
  const { e } = engineFor(srv, { shortTickets: false });
  assert.equal(e.shortTickets, null);
  const a = await plan(e);
  assert.equal(a.askTicket, false);
  assert.equal(hc.fieldValue(serve(srv, a).head.fields, 'ticket'), undefined, 'no Ticket field');
  const tk = srv.cfg.ticketKeys[0];
  const v1 = hc.sealTicket(tk.tid, tk.key, { sessionKey: a.prepared.sessionKey, kid: hc.keyId(srv.cert.kexPublic), expiry: NOW + 7200 }, hc.randomBytes(24));
  e.answered(a, { status: 200, reason: 'OK', fields: [['Ticket', hc.formatTicketField(v1)]] });
  const b = await plan(e);
  assert.deepEqual([b.prepared.credential, b.prepared.ticketForm, b.askTicket], ['ticket', 'v1', false]);
  assert.ok(b.prepared.cookie.split('=')[1].length >= 115);
  serve(srv, b);

  assert.equal(new Engine({ tickets: false }).shortTickets, null);
  assert.deepEqual(new Engine().shortTickets, { reuse: hc.SHORT_TICKET_REUSE, maxAge: hc.SHORT_TICKET_MAX_AGE });
  assert.deepEqual([hc.SHORT_TICKET_REUSE, hc.SHORT_TICKET_MAX_AGE], [16, 600]);
  for (const bad of [{ reuse: 0 }, { reuse: 1.5 }, { maxAge: -1 }, { maxAge: NaN }]) {
    assert.throws(() => new Engine({ shortTickets: bad }), (err) => err.code === 'config', JSON.stringify(bad));
  }
});

test('a short ticket is held apart from a v1 one and presented first; a v1 session\'s short ticket is not presented where suite 2 is required', async () => {
  const srv = makeServer();
  const { e } = engineFor(srv);
  const a = await plan(e);
  const tk = srv.cfg.ticketKeys[0];
  const v1 = hc.sealTicket(tk.tid, tk.key, { sessionKey: a.prepared.sessionKey, kid: hc.keyId(srv.cert.kexPublic), expiry: NOW + 7200 }, hc.randomBytes(24));
  e.answered(a, { status: 200, reason: 'OK', fields: [['Ticket', hc.formatTicketField(v1)]] });
  const b = await plan(e);
  assert.deepEqual([b.prepared.ticketForm, b.askTicket], ['v1', true], 'no short ticket yet: the v1 one, asking');
  answerWithShortTicket(srv, e, b);
  assert.ok(b.host.ticket !== null && b.host.short !== null, 'both held');
  assert.equal((await plan(e)).prepared.ticketForm, 'short');
  // A malformed Ticket field is ignored: what is held stays.
  e.answered(b, { status: 200, reason: 'OK', fields: [['Ticket', 'x'.repeat(78)]] });
  assert.equal((await plan(e)).prepared.ticketForm, 'short');

  // pq 'require': neither ticket of a v1 session resumes it (spec/hybrid.md H5).
  const strict = new Engine({ mount: '/hc', now: () => NOW, pq: 'require' });
  strict.host(ORIGIN).short = b.host.short;
  strict.host(ORIGIN).ticket = b.host.ticket;
  const s = await strict.plan(new URL(`${ORIGIN}/x`), 'GET', new Headers(), { bytes: new Uint8Array(0), stream: null }, false, srv.cert);
  assert.deepEqual([s.prepared.credential, s.prepared.ticketForm], ['key', null]);
});

test('hcFetch: key then short tickets in memory; a server that lost its ticket key costs one retry with a key', async () => {
  const srv = makeServer();
  const log = [];
  const c = hc.createClient({ mount: '/hc', identity: srv.identity, shortTickets: { reuse: 2 }, fetch: fakeFetch(srv, { log }) });
  const infos = [];
  for (let i = 0; i < 4; i++) {
    const r = await c.fetch(`${ORIGIN}/n/${i}`);
    assert.equal((await r.json()).target, `/n/${i}`);
    assert.equal(r.headers.get('ticket') !== null, sealedOf(log).at(-1).asked, 'a ticket exactly when asked');
    infos.push(hc.exchangeInfo(r));
  }
  assert.deepEqual(
    infos.map((i) => [i.credential, i.ticketForm]),
    [['key', null], ['ticket', 'short'], ['ticket', 'short'], ['ticket', 'short']],
  );
  assert.deepEqual(
    sealedOf(log).map((l) => [l.credential, l.asked]),
    [['key', true], ['short_ticket', false], ['short_ticket', true], ['short_ticket', false]],
  );

  // The server forgets its ticket keys (a restart with new state): no_cookie, then a key, asking again.
  srv.cfg.ticketKeys = [{ tid: hc.randomBytes(10), key: hc.randomBytes(32), expires: NOW + 7200, kid: hc.keyId(srv.cert.kexPublic) }];
  const r = await c.fetch(`${ORIGIN}/after`);
  assert.equal((await r.json()).target, '/after');
  assert.deepEqual([hc.exchangeInfo(r).attempts, hc.exchangeInfo(r).credential], [2, 'key']);
  assert.deepEqual(
    sealedOf(log).slice(-2).map((l) => [l.credential ?? 'refused', l.asked ?? null]),
    [['refused', null], ['key', true]],
  );
  const again = await c.fetch(`${ORIGIN}/again`);
  await again.arrayBuffer();
  assert.deepEqual([hc.exchangeInfo(again).attempts, hc.exchangeInfo(again).ticketForm], [1, 'short'], 'the new short ticket');

  // A streamed body cannot be sent again: the refusal ends the call.
  srv.cfg.ticketKeys = [{ tid: hc.randomBytes(10), key: hc.randomBytes(32), expires: NOW + 7200, kid: hc.keyId(srv.cert.kexPublic) }];
  const body = new ReadableStream({
    pull(ctrl) {
      ctrl.enqueue(new Uint8Array(10));
      ctrl.close();
    },
  });
  await assert.rejects(c.fetch(`${ORIGIN}/s`, { method: 'POST', body, duplex: 'half' }), (e) => e.code === 'no_cookie');
});

test('hcFetch: a short ticket of a hybrid session resumes it as hybrid (no ciphertext, the suite-2 kid)', async () => {
  const srv = makeServer({ pq: 'on' });
  const log = [];
  const c = hc.createClient({ mount: '/hc', identity: srv.identity, pq: 'prefer', fetch: fakeFetch(srv, { log }) });
  for (let i = 0; i < 3; i++) {
    const r = await c.fetch(`${ORIGIN}/h/${i}`, { method: 'POST', body: new Uint8Array(3000) });
    assert.equal((await r.json()).length, 3000);
    const info = hc.exchangeInfo(r);
    assert.deepEqual([info.suite, info.credential, info.ticketForm], i === 0 ? [2, 'key', null] : [2, 'ticket', 'short']);
  }
  const sealed = sealedOf(log);
  assert.deepEqual(
    sealed.map((l) => [l.suite, l.credential]),
    [[2, 'key'], [2, 'short_ticket'], [2, 'short_ticket']],
  );
  const hybridTicketKey = hc.server.ticketKeyFor(srv.cfg, hc.hybridCertKid(srv.hybridCert), NOW);
  assert.ok(sealed[1].cookies[0].startsWith(hc.b64uEncode(hybridTicketKey.tid)), 'issued under the ticket key of the suite-2 key');

  // Without short tickets the hybrid session resumes with its v1 ticket, as before.
  const v1log = [];
  const v1 = hc.createClient({ mount: '/hc', identity: srv.identity, pq: 'prefer', shortTickets: false, fetch: fakeFetch(srv, { log: v1log }) });
  for (let i = 0; i < 2; i++) await (await v1.fetch(`${ORIGIN}/v/${i}`)).arrayBuffer();
  assert.deepEqual(
    sealedOf(v1log).map((l) => [l.suite, l.credential, l.asked]),
    [[2, 'key', false], [2, 'ticket', false]],
  );
});

/** A POST of `bytes` to `path` (small enough for the GET form, which `serve` takes). */
function planPost(e, path = '/p', bytes = new Uint8Array(3)) {
  const u = new URL(`${ORIGIN}${path}`);
  return e.plan(u, 'POST', new Headers(), { bytes, stream: null }, false, e.cachedCert(u.origin, e.now()));
}

test("tokens (spec §7.3, §8.4): a Random that comes with a short ticket is bound to k' and presented under k', never under k", async () => {
  const srv = makeServer();
  const secret = hc.randomBytes(32);
  // keyReuse: a later key request runs under the same k, so "not under k" can be seen.
  const { e } = engineFor(srv, { keyReuse: true });
  const a = await planPost(e);
  assert.equal(a.form, 'get');
  const { accepted, head } = serve(srv, a);
  assert.equal(hc.fieldValue(head.fields, 'ticket'), 'short', 'the first request asks');
  assert.equal(hc.fieldValue(head.fields, 'random'), undefined, 'no token yet');
  const cr = hc.b64uDecodeExact(hc.fieldValue(head.fields, 'client-random'), 24);
  // The server's 425 token-required: a short ticket, and the token computed under its k'.
  const tk = hc.server.ticketKeyFor(srv.cfg, accepted.kid, NOW);
  const t = hc.issueShortTicket(tk.tid, tk.key, accepted.kid, hc.randomBytes(16));
  const random = hc.formatRandom(secret, t.key, cr);
  e.answered(a, { status: 425, reason: 'Too Early', fields: [['Ticket', hc.formatShortTicketField(t)], ['Random', random]] });
  assert.ok(bytesEqual(a.host.token.sessionKey, t.key), "the token is kept with k'");
  assert.ok(!bytesEqual(t.key, a.prepared.sessionKey));

  // The retry presents the short ticket and, under k', the token, which verifies where the server opens it.
  const b = await planPost(e);
  assert.deepEqual([b.prepared.ticketForm, b.askTicket], ['short', false]);
  const got = serve(srv, b);
  assert.equal(hc.fieldValue(got.head.fields, 'random'), random, "the token rides along under k'");
  assert.deepEqual(hc.verifyRandom(secret, got.accepted.sessionKey, random), cr);
  assert.throws(() => hc.verifyRandom(secret, a.prepared.sessionKey, random), (err) => err.code === 'bad_token', 'it would not verify under k');

  // Not under k: once the short ticket is gone, the reused key pair seals under k again, without the token.
  assert.deepEqual(e.refused(b, 400, null, problem({ type: 'urn:httpcrypt:malformed', status: 400 })), { kind: 'retry_short' });
  const c = await planPost(e);
  assert.equal(c.prepared.credential, 'key');
  assert.ok(bytesEqual(c.prepared.sessionKey, a.prepared.sessionKey), 'the same k');
  const gotC = serve(srv, c);
  assert.equal(hc.fieldValue(gotC.head.fields, 'random'), undefined, 'no token under k');

  // An answer without a short ticket (a v1 one here) binds its token to the request's key, as before.
  const v1 = hc.sealTicket(tk.tid, tk.key, { sessionKey: c.prepared.sessionKey, kid: accepted.kid, expiry: NOW + 7200 }, hc.randomBytes(24));
  const crC = hc.b64uDecodeExact(hc.fieldValue(gotC.head.fields, 'client-random'), 24);
  const randomC = hc.formatRandom(secret, c.prepared.sessionKey, crC);
  e.answered(c, { status: 425, reason: 'Too Early', fields: [['Ticket', hc.formatTicketField(v1)], ['Random', randomC]] });
  assert.ok(bytesEqual(c.host.token.sessionKey, c.prepared.sessionKey));
  const d = await planPost(e);
  assert.equal(d.prepared.ticketForm, 'v1');
  const gotD = serve(srv, d);
  assert.equal(hc.fieldValue(gotD.head.fields, 'random'), randomC);
  hc.verifyRandom(secret, gotD.accepted.sessionKey, randomC);
});

test('hcFetch under a token demand (serve --require-token): the first POST takes exactly two attempts, later ones one, with short tickets and with v1 ones', async () => {
  for (const shortTickets of [{ reuse: 2 }, true, false]) {
    const srv = makeServer();
    const log = [];
    const c = hc.createClient({ mount: '/hc', identity: srv.identity, shortTickets, fetch: fakeFetch(srv, { log, tokenSecret: hc.randomBytes(32) }) });
    const infos = [];
    for (let i = 0; i < 5; i++) {
      const r = await c.fetch(`${ORIGIN}/t/${i}`, { method: 'POST', body: new Uint8Array(i * 1000) });
      assert.equal(r.status, 200, `${JSON.stringify(shortTickets)}: POST ${i}`);
      assert.equal((await r.json()).length, i * 1000);
      infos.push(hc.exchangeInfo(r));
    }
    const form = shortTickets === false ? 'v1' : 'short';
    assert.deepEqual(
      infos.map((i) => [i.attempts, i.credential, i.ticketForm]),
      [[2, 'ticket', form], ...Array(4).fill([1, 'ticket', form])],
      `${JSON.stringify(shortTickets)}: one retry, then the token with the ticket at once`,
    );
    assert.deepEqual(
      sealedOf(log).map((l) => [l.credential, l.token]),
      [['key', 'none'], ...Array(5).fill([form === 'short' ? 'short_ticket' : 'ticket', 'valid'])],
      JSON.stringify(shortTickets),
    );
    if (shortTickets !== false) {
      // reuse 2 asks for a new ticket every other request: its token comes bound to the new k'.
      const asks = sealedOf(log).map((l) => l.asked);
      assert.deepEqual(asks, shortTickets === true ? [true, false, false, false, false, false] : [true, false, true, false, true, false]);
    }
  }
});

test('a one-shot client declines tickets on safe requests and presents none', async () => {
  const srv = makeServer();
  const { e } = engineFor(srv, { oneShot: true });
  assert.equal(e.shortTickets, null);
  for (let i = 0; i < 2; i++) {
    const a = await plan(e);
    assert.deepEqual([a.prepared.credential, a.askTicket], ['key', false]);
    const { accepted, head } = serve(srv, a);
    assert.equal(hc.fieldValue(head.fields, 'ticket'), 'none');
    // Even a ticket that came anyway is not presented next.
    const tk = hc.server.ticketKeyFor(srv.cfg, accepted.kid, NOW);
    const t = hc.issueShortTicket(tk.tid, tk.key, accepted.kid, hc.randomBytes(16));
    e.answered(a, { status: 200, reason: 'OK', fields: [['Ticket', hc.formatShortTicketField(t)]] });
  }
  // An unsafe request does not decline: its token retry needs a ticket.
  const u = new URL(`${ORIGIN}/x`);
  const p = await e.plan(u, 'POST', new Headers(), { bytes: new Uint8Array(1), stream: null }, false, e.cachedCert(u.origin, e.now()));
  assert.ok(!/\r\nticket:/i.test(new TextDecoder().decode(p.head)), 'a POST declined');
  assert.ok(/^POST /.test(new TextDecoder().decode(p.head)));
});
