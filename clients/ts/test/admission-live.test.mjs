// The admission defence (spec §14) live: `httpcrypt serve` with a low
// `--defence-threshold`, a burst of fresh-key requests switches the defence
// on, and the client (and bin/hcfetch.mjs) must get through by solving the
// challenge; ticket requests must never be challenged; an empty prefix
// budget (`busy`) is waited out. Needs a server binary with the defence
// ($HTTPCRYPT_BIN as for the other live tests); an older one FAILS this file.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { createClient, exchangeInfo } from '../dist/index.js';
import { cleanup, httpcryptBin, keygen, pkgDir, startServe, tempDir } from './harness.mjs';

let dir, root, keys;
const started = [];

before(() => {
  const help = execFileSync(httpcryptBin(), ['serve', '--help'], { encoding: 'utf8', timeout: 30_000 });
  assert.ok(help.includes('--defence-threshold'), `${httpcryptBin()} has no admission defence (spec §14): use a binary that does (HTTPCRYPT_BIN)`);
  dir = tempDir('hc-admit-');
  root = path.join(dir, 'root');
  mkdirSync(root);
  writeFileSync(path.join(root, 'hello.txt'), 'hello under load\n');
  keys = path.join(dir, 'keys');
  keygen(keys);
});

after(async () => {
  for (const p of started.reverse()) await p.stop();
  if (dir) cleanup(dir);
});

/** A transport that records every sealed request: status, credential shape, echo, problem type. */
function tapped() {
  const log = [];
  const transport = async (url, init = {}) => {
    const rsp = await fetch(url, init);
    if (init.method !== 'OPTIONS') {
      const cookie = new Headers(init.headers).get('cookie') ?? '';
      const value = cookie.split(';')[0].split('=')[1] ?? '';
      // A v1 ticket (115–131 characters) or a short one (22–38, spec §7.3); a key is 43–59.
      const entry = { status: rsp.status, ticket: value.length >= 115 || value.length <= 38, echo: /(^|; )hc1-admit=[A-Za-z0-9_-]{39}$/.test(cookie), type: null };
      if (rsp.status !== 200) entry.type = JSON.parse(await rsp.clone().text()).type;
      log.push(entry);
    }
    return rsp;
  };
  return { log, transport };
}

function hcfetch(args) {
  return new Promise((resolve) => {
    execFile(process.execPath, [path.join(pkgDir, 'bin/hcfetch.mjs'), ...args], { encoding: 'utf8', timeout: 120_000 }, (err, stdout, stderr) => {
      resolve({ code: err ? (err.code ?? 1) : 0, stdout, stderr });
    });
  });
}

/**
 * Keeps the demand above the threshold (fresh-key requests from a client
 * that solves its challenges, 4 at a time) until `stop()`, at most 120 s.
 */
function keepLoaded(url) {
  let running = true;
  const deadline = Date.now() + 120_000;
  const c = createClient({ mount: '/hc', tickets: false });
  let sent = 0;
  const worker = async () => {
    while (running && Date.now() < deadline) {
      const r = await c.fetch(url);
      await r.text();
      sent++;
    }
  };
  const workers = Array.from({ length: 4 }, worker);
  return {
    async stop() {
      running = false;
      await Promise.all(workers);
      return sent;
    },
  };
}

/** One request from a brand-new client (no cookie, no ticket): how many challenges it met. */
async function probe(addr) {
  const c = createClient({ mount: '/hc', tickets: false });
  const r = await c.fetch(`http://${addr}/hello.txt`);
  assert.equal(r.status, 200);
  assert.equal(await r.text(), 'hello under load\n');
  return exchangeInfo(r).admission.challenges;
}

test('under load: fresh-key requests are challenged and get through; ticket requests never meet the defence', { timeout: 300_000 }, async () => {
  const serve = await startServe({ keys, root, extraArgs: ['--defence', 'auto', '--defence-threshold', '5', '--max-difficulty', '12'] });
  started.push(serve);
  const url = `http://${serve.addr}/hello.txt`;

  // Idle: no challenge, and this client gets a ticket.
  const withTicket = tapped();
  const returning = createClient({ mount: '/hc', fetch: withTicket.transport });
  const first = await returning.fetch(url);
  assert.equal(await first.text(), 'hello under load\n');
  assert.deepEqual(exchangeInfo(first).admission, { challenges: 0, busy: 0, echoDifficulty: null }, 'an idle server never challenges');

  // A burst of fresh-key requests (threshold 5/s) switches the defence on; every one must still succeed.
  const burst = tapped();
  const fresh = createClient({ mount: '/hc', tickets: false, fetch: burst.transport });
  const results = await Promise.all(Array.from({ length: 30 }, () => fresh.fetch(url).then(async (r) => ({ status: r.status, text: await r.text(), info: exchangeInfo(r) }))));
  for (const r of results) {
    assert.equal(r.status, 200);
    assert.equal(r.text, 'hello under load\n');
  }
  const challenged = burst.log.filter((l) => l.status === 429);
  assert.ok(challenged.length > 0, 'the defence switched on');
  assert.ok(challenged.every((l) => l.type === 'urn:httpcrypt:admission' || l.type === 'urn:httpcrypt:busy'), JSON.stringify(challenged.slice(0, 3)));
  assert.ok(results.some((r) => r.info.admission.challenges >= 1 && r.info.admission.echoDifficulty > 0), 'a puzzle was solved');
  assert.ok(burst.log.some((l) => l.status === 200 && l.echo), 'an echo was accepted');

  // While it is on (kept on by more fresh-key load; a brand-new client is challenged before and
  // after), tickets pass untouched.
  const load = keepLoaded(url);
  assert.ok((await probe(serve.addr)) >= 1, 'the defence is on');
  for (let i = 0; i < 5; i++) {
    const r = await returning.fetch(url);
    assert.equal(await r.text(), 'hello under load\n');
    const info = exchangeInfo(r);
    assert.equal(info.credential, 'ticket');
    assert.equal(info.attempts, 1);
    assert.deepEqual(info.admission, { challenges: 0, busy: 0, echoDifficulty: null });
  }
  assert.ok((await probe(serve.addr)) >= 1, 'the defence was still on');
  assert.deepEqual(withTicket.log.slice(1).map((l) => [l.status, l.ticket, l.echo]), Array(5).fill([200, true, false]), 'ticket requests: no echo, no 429');

  // The fresh-key client keeps echoing its cookie: no round trip per request while it lasts.
  const next = await fresh.fetch(url);
  await next.text();
  assert.equal(exchangeInfo(next).attempts, 1);
  assert.ok(exchangeInfo(next).admission.echoDifficulty !== null);

  // bin/hcfetch.mjs (a new process: a fresh key, no cookie) obeys the defence too.
  const h = await hcfetch(['--mount', '/hc', url]);
  assert.equal(h.code, 0, h.stderr);
  assert.equal(h.stderr, 'request 1: status 200, credential key\n');
  assert.equal(h.stdout, 'hello under load\n');
  assert.ok((await probe(serve.addr)) >= 1, 'hcfetch ran while the defence was on');
  assert.ok((await load.stop()) > 0);
});

test('busy: an empty prefix budget is waited out (Retry-After), and the request gets through', { timeout: 300_000 }, async () => {
  const serve = await startServe({ keys, root, extraArgs: ['--defence', 'auto', '--defence-threshold', '1', '--max-difficulty', '0', '--prefix-rate', '1', '--prefix-burst', '1'] });
  started.push(serve);
  const url = `http://${serve.addr}/hello.txt`;
  const tap = tapped();
  const c = createClient({ mount: '/hc', tickets: false, fetch: tap.transport });
  // Switch the defence on, then send one after the other: the budget (1/s, burst 1) runs dry.
  await Promise.allSettled(Array.from({ length: 4 }, () => c.fetch(url).then((r) => r.text())));
  const infos = [];
  for (let i = 0; i < 4; i++) {
    const r = await c.fetch(url);
    assert.equal(r.status, 200);
    assert.equal(await r.text(), 'hello under load\n');
    infos.push(exchangeInfo(r).admission);
  }
  assert.ok(tap.log.some((l) => l.type === 'urn:httpcrypt:busy'), `a busy answer: ${JSON.stringify(tap.log)}`);
  assert.ok(infos.some((a) => a.busy >= 1), `a request waited out busy: ${JSON.stringify(infos)}`);
});
