// Suite 2 live: the client's `pq` option against the real Rust server
// (`httpcrypt serve --pq on|only`) on loopback. A missing binary fails, as
// for the other live tests; a binary whose `serve` has no `--pq` option
// (built before suite 2) skips these tests and says so.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { writeFileSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { HttpCryptError, createClient, exchangeInfo } from '../dist/index.js';
import { cleanup, httpcryptBin, keygen, pkgDir, startServe, tempDir } from './harness.mjs';

/** Why the tests cannot run with this binary, or null. */
function pqUnsupported() {
  const bin = httpcryptBin(); // throws when there is no binary at all
  const help = execFileSync(bin, ['serve', '--help'], { encoding: 'utf8', timeout: 30_000 });
  return /--pq\b/.test(help) ? null : `${bin} has no \`serve --pq\` (built before suite 2): the hybrid live tests start running once it does`;
}

const skip = pqUnsupported();
const opts = skip === null ? {} : { skip };
let dir, identity, identityOnly, identityV1, serveOn, serveOnly, serveV1;
const started = [];

before(async () => {
  if (skip !== null) return;
  dir = tempDir('hc-pq-live-');
  const root = path.join(dir, 'root');
  mkdirSync(root);
  writeFileSync(path.join(root, 'hello.txt'), 'hello from httpcrypt\n');
  writeFileSync(path.join(root, 'medium.bin'), new Uint8Array(300_000).map((_, i) => i % 251));
  // one key directory per server (each rotates its own keys)
  identity = keygen(path.join(dir, 'keys-on'));
  identityOnly = keygen(path.join(dir, 'keys-only'));
  identityV1 = keygen(path.join(dir, 'keys-v1'));
  serveOn = await startServe({ keys: path.join(dir, 'keys-on'), root, extraArgs: ['--pq', 'on'] });
  started.push(serveOn);
  serveOnly = await startServe({ keys: path.join(dir, 'keys-only'), root, extraArgs: ['--pq', 'only'] });
  started.push(serveOnly);
  serveV1 = await startServe({ keys: path.join(dir, 'keys-v1'), root });
  started.push(serveV1);
});

after(async () => {
  for (const s of started.reverse()) await s.stop();
  if (dir) cleanup(dir);
});

async function rejectsWith(p, code) {
  await assert.rejects(p, (e) => {
    assert.ok(e instanceof HttpCryptError, `expected HttpCryptError, got ${e}`);
    assert.equal(e.code, code, e.message);
    return true;
  });
}

test('--pq on: prefer makes a hybrid request, then resumes it with the ticket of the hybrid session', opts, async () => {
  const c = createClient({ mount: '/hc', identity, pq: 'prefer' });
  const r1 = await c.fetch(`http://${serveOn.addr}/hello.txt`);
  assert.equal(r1.status, 200);
  assert.equal(await r1.text(), 'hello from httpcrypt\n');
  assert.deepEqual([exchangeInfo(r1).suite, exchangeInfo(r1).credential], [2, 'key']);
  const r2 = await c.fetch(`http://${serveOn.addr}/medium.bin`);
  assert.equal((await r2.arrayBuffer()).byteLength, 300_000);
  assert.deepEqual([exchangeInfo(r2).suite, exchangeInfo(r2).credential], [2, 'ticket']);
});

test('--pq on: a hybrid POST form (a body too large for the GET form)', opts, async () => {
  const c = createClient({ mount: '/hc', identity, pq: 'require', tickets: false });
  const r = await c.fetch(`http://${serveOn.addr}/hello.txt`, { method: 'POST', body: new Uint8Array(3000) });
  assert.deepEqual([exchangeInfo(r).suite, exchangeInfo(r).form], [2, 'post']);
  assert.ok(r.status >= 200 && r.status < 600);
  await r.arrayBuffer();
});

test('--pq only: prefer and require use suite 2', opts, async () => {
  for (const pq of ['prefer', 'require']) {
    const c = createClient({ mount: '/hc', identity: identityOnly, pq });
    const r = await c.fetch(`http://${serveOnly.addr}/hello.txt`);
    assert.equal(await r.text(), 'hello from httpcrypt\n');
    assert.equal(exchangeInfo(r).suite, 2);
  }
});

test('a v1-only server: require is hybrid_downgrade, prefer falls back to v1', opts, async () => {
  await rejectsWith(createClient({ mount: '/hc', identity: identityV1, pq: 'require' }).fetch(`http://${serveV1.addr}/hello.txt`), 'hybrid_downgrade');
  const r = await createClient({ mount: '/hc', identity: identityV1, pq: 'prefer' }).fetch(`http://${serveV1.addr}/hello.txt`);
  assert.equal(await r.text(), 'hello from httpcrypt\n');
  assert.equal(exchangeInfo(r).suite, 1);
});

test('pinned: an origin that served suite 2 and then answers as a v1-only server is hybrid_downgrade, not v1', opts, async () => {
  // One origin, whose answers come first from the --pq on server, then from the v1 one (a downgrade on
  // the path); opportunistic mode, since the two servers have different identities.
  let target = serveOn.addr;
  const transport = (url, init) => globalThis.fetch(String(url).replace(/^http:\/\/[^/]+/, `http://${target}`), init);
  const c = createClient({ mount: '/hc', pq: 'prefer', tickets: false, fetch: transport });
  const origin = 'http://pinned.test:1';
  assert.equal(exchangeInfo(await c.fetch(`${origin}/hello.txt`)).suite, 2);
  target = serveV1.addr;
  // unknown-key (no hybrid_certs), then OPTIONS {mount}/pq answers 404: the pin refuses v1
  await rejectsWith(c.fetch(`${origin}/hello.txt`), 'hybrid_downgrade');
  // a client state that never saw suite 2 there uses v1
  c.clear();
  assert.equal(exchangeInfo(await c.fetch(`${origin}/hello.txt`)).suite, 1);
});

test('hcfetch --pq require against --pq on: a hybrid request, then its short ticket (suite 2 both)', opts, async () => {
  const out = await new Promise((resolve) => {
    const args = [path.join(pkgDir, 'bin/hcfetch.mjs'), '--mount', '/hc', '--identity', identity, '--pq', 'require', '--repeat', '2', `http://${serveOn.addr}/hello.txt`];
    execFile(process.execPath, args, { encoding: 'utf8', timeout: 60_000 }, (err, stdout, stderr) => resolve({ code: err ? (err.code ?? 1) : 0, stdout, stderr }));
  });
  assert.equal(out.code, 0, out.stderr);
  assert.equal(out.stdout, 'hello from httpcrypt\n');
  assert.match(out.stderr, /request 1: status 200, credential key, suite 2\nrequest 2: status 200, credential ticket \(short\), suite 2\n/);
});
