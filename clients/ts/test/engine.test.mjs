// The client's engine without any network: what it plans for an attempt
// (credential, profile, inner head, outer form), and what it makes of each
// answer (certificates, unknown-key, admission, busy, sealed problems),
// checked against the in-memory server (src/server.ts); and the retry rules.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as hc from '../dist/index.js';
import { Engine } from '../dist/engine.js';
import { Retries } from '../dist/retry.js';
import { NOW, ORIGIN, makeServer } from './fake.mjs';

const certsBody = (srv) => hc.utf8(hc.formatCertList(hc.server.validCerts(srv.cfg, NOW)));
const problem = (doc) => hc.utf8(JSON.stringify(doc));
const at = (t) => () => t;

/** An engine that took `srv`'s certificates from an OPTIONS answer. */
function engineFor(srv, options = {}) {
  const e = new Engine({ mount: '/hc', now: at(NOW), ...options });
  e.storeCerts(ORIGIN, '/hc', 200, 'application/httpcrypt-certs', 'max-age=100', certsBody(srv));
  return e;
}

/** The server's view of attempt `a`: the inner request it opens. */
function serve(srv, e, a, bytes = new Uint8Array(0)) {
  const u = new URL(a.outerUrl);
  const body = a.form === 'post' ? e.sealWhole(a, bytes) : new Uint8Array(0);
  const cookies = [a.echo === null ? a.prepared.cookie : `${a.prepared.cookie}; hc1-admit=${a.echo}`];
  const req = { method: a.form === 'get' ? 'GET' : 'POST', target: u.pathname + u.search, host: u.host, cookies, contentLength: a.form === 'post' ? body.length : null, body, fields: [] };
  const r = hc.server.accept(srv.cfg, req, NOW);
  assert.equal(r.kind, 'request');
  return hc.server.openRequest(r.accepted, body);
}

async function plan(e, url, { method = 'GET', headers = {}, bytes = new Uint8Array(0), ownDate = false } = {}) {
  const u = new URL(url);
  return e.plan(u, method, new Headers(headers), { bytes, stream: null }, ownDate, e.cachedCert(u.origin, e.now()));
}

test('plan: GET form with Host and Date; the ticket and token of an answer serve the next attempt, a large body goes as POST', async () => {
  const srv = makeServer();
  const e = engineFor(srv, { identity: srv.identity });
  const a = await plan(e, `${ORIGIN}/x?y=1`, { headers: { accept: '*/*' } });
  assert.equal(a.form, 'get');
  assert.equal(a.prepared.credential, 'key');
  assert.equal(a.profile, 1);
  const got = serve(srv, e, a);
  assert.equal(got.head.target, '/x?y=1');
  assert.equal(hc.fieldValue(got.head.fields, 'host'), 'app.test:8080');
  assert.equal(hc.fieldValue(got.head.fields, 'date'), hc.formatHttpDate(NOW));
  assert.equal(hc.fieldValue(got.head.fields, 'accept'), '*/*');

  const tk = srv.cfg.ticketKeys[0];
  const ticket = hc.sealTicket(tk.tid, tk.key, { sessionKey: a.prepared.sessionKey, kid: hc.keyId(srv.cert.kexPublic), expiry: NOW + 7200 }, hc.randomBytes(24));
  e.answered(a, { status: 200, reason: 'OK', fields: [['Ticket', hc.formatTicketField(ticket)], ['Random', 'tok']] });

  const big = hc.randomBytes(5000);
  const a2 = await plan(e, `${ORIGIN}/up`, { method: 'PUT', bytes: big });
  assert.equal(a2.form, 'post');
  assert.equal(a2.prepared.credential, 'ticket');
  const got2 = serve(srv, e, a2, big);
  assert.deepEqual(got2.body, big);
  assert.equal(hc.fieldValue(got2.head.fields, 'content-length'), '5000');
  assert.equal(hc.fieldValue(got2.head.fields, 'random'), 'tok', 'the token bound to this session key rides along');
  assert.match(hc.fieldValue(got2.head.fields, 'client-random'), /^[A-Za-z0-9_-]{32}$/);
  assert.equal(e.info(a2, 1, { challenges: 0, busy: 0 }).credential, 'ticket');
});

test('plan: a version-2 certificate gives profile 2, without inner Host or Date', async () => {
  const srv = makeServer({ version: 2 });
  const e = engineFor(srv);
  const a = await plan(e, `${ORIGIN}/c`);
  assert.equal(a.profile, 2);
  assert.match(new URL(a.outerUrl).pathname, /^\/hc\/2/);
  const got = serve(srv, e, a);
  assert.equal(hc.fieldValue(got.head.fields, 'host'), undefined);
  assert.equal(hc.fieldValue(got.head.fields, 'date'), undefined);
  const v1 = await plan(engineFor(srv, { compact: false }), `${ORIGIN}/c`);
  assert.equal(v1.profile, 1);
});

test("plan: form 'post' always POSTs; 'get' refuses what does not fit", async () => {
  const srv = makeServer();
  assert.equal((await plan(engineFor(srv, { form: 'post' }), `${ORIGIN}/a`)).form, 'post');
  await assert.rejects(plan(engineFor(srv, { form: 'get' }), `${ORIGIN}/a`, { method: 'POST', bytes: new Uint8Array(3000) }), (err) => err.code === 'config');
});

test('certificates: an OPTIONS answer is a list, no_endpoint or not_httpcrypt; the cache follows max-age', () => {
  const srv = makeServer();
  const e = new Engine({ now: at(NOW) });
  assert.equal(e.optionsRefusal(ORIGIN, '', 404, null).code, 'no_endpoint');
  assert.equal(e.optionsRefusal(ORIGIN, '', 200, 'text/html').code, 'not_httpcrypt');
  assert.equal(e.optionsRefusal(ORIGIN, '', 500, null).code, 'not_httpcrypt');
  assert.equal(e.optionsRefusal(ORIGIN, '', 200, 'application/httpcrypt-certs; charset=utf-8'), null);
  assert.throws(() => e.storeCerts(ORIGIN, '', 200, null, null, hc.utf8('<html>')), (err) => err.code === 'not_httpcrypt');
  assert.equal(e.cachedCert(ORIGIN, NOW), null);
  assert.deepEqual(e.mounts(ORIGIN), ['', '/hc']);
  e.storeCerts(ORIGIN, '/hc', 200, null, 'max-age=100', certsBody(srv));
  assert.deepEqual(e.mounts(ORIGIN), ['/hc'], 'the mount that answered is kept');
  assert.ok(e.cachedCert(ORIGIN, NOW + 99));
  assert.equal(e.cachedCert(ORIGIN, NOW + 100), null, 'after max-age the certificates are fetched again');
  // Authenticated mode: certificates another identity signed are refused.
  const pinned = new Engine({ now: at(NOW), identity: makeServer().identity });
  assert.throws(() => pinned.storeCerts(ORIGIN, '', 200, null, null, certsBody(srv)), (err) => err.code === 'bad_signature');
});

test('refused: unknown-key takes the certificates and drops the ticket; others are errors', async () => {
  const srv = makeServer();
  const other = makeServer();
  const e = engineFor(srv);
  const a = await plan(e, `${ORIGIN}/`);
  a.host.ticket = { ticket: hc.randomBytes(10), sessionKey: hc.randomBytes(32) };
  const doc = problem({ type: 'urn:httpcrypt:unknown-key', status: 400, title: 'x', certs: hc.server.validCerts(other.cfg, NOW).map(hc.certToText) });
  assert.deepEqual(e.refused(a, 400, null, doc), { kind: 'retry_key' });
  assert.equal(a.host.ticket, null);
  assert.deepEqual(e.cachedCert(ORIGIN, NOW).kexPublic, other.cert.kexPublic);
  assert.throws(() => e.refused(a, 400, null, problem({ type: 'urn:httpcrypt:malformed', status: 400 })), (err) => err instanceof hc.HttpCryptError && err.problem.type === 'urn:httpcrypt:malformed' && err.problem.status === 400);
  assert.throws(() => e.refused(a, 502, null, hc.utf8('<html>')), (err) => err.code === 'refused' && err.problem.status === 502);
});

test('refused: an admission challenge is echoed by the next fresh-key attempt; busy waits at most 5 s', async () => {
  const srv = makeServer();
  const e = engineFor(srv);
  const a = await plan(e, `${ORIGIN}/`);
  const cookie = hc.admitCookie(hc.randomBytes(32), 1, 2, hc.addr16('127.0.0.1'));
  const challenge = problem({ type: 'urn:httpcrypt:admission', status: 429, admit: hc.b64uEncode(cookie), difficulty: 2 });
  const r = e.refused(a, 429, null, challenge);
  assert.equal(r.kind, 'retry_admission');
  const a2 = await plan(e, `${ORIGIN}/`);
  assert.equal(a2.echoDifficulty, 2);
  assert.equal(a2.echo.length, hc.ADMIT_ECHO_B64_LEN);
  const hard = problem({ type: 'urn:httpcrypt:admission', status: 429, admit: hc.b64uEncode(cookie), difficulty: 30 });
  assert.throws(() => e.refused(a, 429, null, hard), (err) => err.code === 'bad_admission');
  const busy = (doc, header) => e.refused(a, 429, header, problem({ type: 'urn:httpcrypt:busy', status: 429, ...doc }));
  assert.equal(busy({ retry_after: 2 }, null).wait, 2);
  assert.equal(busy({ retry_after: 60 }, null).wait, 5);
  assert.equal(busy({}, '3').wait, 3);
});

test('judgeProblem: stale corrects the clock, token-required retries, other protocol problems throw', async () => {
  const srv = makeServer();
  const e = engineFor(srv, { now: at(NOW - 50) }); // 50 s behind the server
  const a = await plan(e, `${ORIGIN}/`);
  const head = { status: 425, reason: 'Too Early', fields: [['Content-Type', 'application/problem+json'], ['Date', hc.formatHttpDate(NOW)]] };
  assert.equal(e.wholeBodyLimit(a, head), 64 * 1024);
  assert.deepEqual(e.judgeProblem(a, head, problem({ type: 'urn:httpcrypt:stale', status: 425 })), { kind: 'retry_stale' });
  const a2 = await plan(e, `${ORIGIN}/`, { ownDate: true });
  assert.equal(hc.fieldValue(serve(srv, e, a2).head.fields, 'date'), hc.formatHttpDate(NOW), 'the corrected clock');
  assert.deepEqual(e.judgeProblem(a, head, problem({ type: 'urn:httpcrypt:token-required', status: 425 })), { kind: 'retry_token' });
  assert.throws(() => e.judgeProblem(a, head, problem({ type: 'urn:httpcrypt:replay', status: 425 })), (err) => err.code === 'replay' && err.problem.scope === 'inner');
  assert.equal(e.judgeProblem(a, head, problem({ type: 'https://example.com/app-error' })), null);
  assert.equal(e.wholeBodyLimit(a, { status: 200, reason: 'OK', fields: [['Content-Type', 'text/plain']] }), null);
  assert.equal(e.wholeBodyLimit(a, { status: 304, reason: 'Not Modified', fields: [] }), e.maxRecord);
});

test('Retries: one retry each on unknown-key, stale and token; three admission answers; none for a stream', () => {
  const info = { type: 'urn:httpcrypt:busy', status: 429, scope: 'outer' };
  const r = new Retries(true);
  assert.equal(r.allow({ kind: 'retry_key' }), null);
  assert.equal(r.ownDate, false);
  assert.equal(r.allow({ kind: 'retry_stale' }), null);
  assert.equal(r.ownDate, true);
  assert.throws(() => r.allow({ kind: 'retry_stale' }), (err) => err.code === 'stale');
  assert.throws(() => r.allow({ kind: 'retry_key' }), (err) => err.code === 'unknown_key');
  assert.equal(r.allow({ kind: 'retry_busy', wait: 2, problem: info }), 2);
  assert.equal(r.allow({ kind: 'retry_admission', problem: info }), null);
  assert.equal(r.allow({ kind: 'retry_busy', wait: 0, problem: info }), 0);
  assert.throws(() => r.allow({ kind: 'retry_admission', problem: info }), (err) => err.code === 'admission_required');
  assert.deepEqual(r.stats, { challenges: 1, busy: 2 });
  const once = new Retries(false);
  assert.throws(() => once.allow({ kind: 'retry_token' }), (err) => err.code === 'token_required');
  assert.throws(() => once.allow({ kind: 'retry_busy', wait: 1, problem: info }), (err) => err.code === 'busy');
});
