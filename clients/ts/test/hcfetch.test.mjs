// The interop driver's contract (bin/hcfetch.mjs), run as a process
// against a real `httpcrypt gateway` / `httpcrypt serve`.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { cleanup, keygen, pkgDir, startGateway, startServe, startUpstream, tempDir } from './harness.mjs';

const BIN = path.join(pkgDir, 'bin/hcfetch.mjs');
let dir, identity, otherIdentity, serve, upstream, gateway;
const started = [];

function hcfetch(args) {
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], { encoding: 'buffer', timeout: 60_000, maxBuffer: 64 << 20 }, (err, stdout, stderr) => {
      resolve({ code: err ? (err.code ?? 1) : 0, stdout, stderr: stderr.toString() });
    });
  });
}

before(async () => {
  dir = tempDir('hc-hcfetch-');
  const root = path.join(dir, 'root');
  mkdirSync(root);
  writeFileSync(path.join(root, 'hello.txt'), 'hello\n');
  writeFileSync(path.join(dir, 'upload.bin'), Buffer.alloc(300_000, 7));
  identity = keygen(path.join(dir, 'keys'));
  otherIdentity = keygen(path.join(dir, 'other'));
  serve = await startServe({ keys: path.join(dir, 'keys'), root });
  started.push(serve);
  upstream = await startUpstream();
  started.push(upstream);
  gateway = await startGateway({ keys: path.join(dir, 'keys'), upstreamPort: upstream.port });
  started.push(gateway);
});

after(async () => {
  for (const p of started.reverse()) await p.stop();
  if (dir) cleanup(dir);
});

test('--repeat: one line per request, key then short ticket, last body on stdout', async () => {
  const r = await hcfetch(['--mount', '/hc', '--identity', identity, '--repeat', '3', `http://${serve.addr}/hello.txt`]);
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stderr, 'request 1: status 200, credential key\nrequest 2: status 200, credential ticket (short)\nrequest 3: status 200, credential ticket (short)\n');
  assert.equal(r.stdout.toString(), 'hello\n');
});

test('--v1-tickets: never asks for a short ticket, so the v1 ones are presented', async () => {
  const r = await hcfetch(['--v1-tickets', '--mount', '/hc', '--repeat', '3', `http://${serve.addr}/hello.txt`]);
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stderr, 'request 1: status 200, credential key\nrequest 2: status 200, credential ticket\nrequest 3: status 200, credential ticket\n');
  assert.equal(r.stdout.toString(), 'hello\n');
  const bad = await hcfetch(['--v1-tickets=yes', `http://${serve.addr}/hello.txt`]);
  assert.equal(bad.code, 2);
});

test('any inner status is success; -X, -H and -d reach the upstream', async () => {
  const missing = await hcfetch(['--mount', '/hc', `http://${serve.addr}/missing`]);
  assert.equal(missing.code, 0);
  assert.equal(missing.stderr, 'request 1: status 404, credential key\n');
  const r = await hcfetch(['--mount', '/hc', '-X', 'PUT', '-H', 'X-One: 1', '-H', 'X-Two: two', '-d', 'payload', `http://${gateway.addr}/echo/x?y=1`]);
  assert.equal(r.code, 0, r.stderr);
  const doc = JSON.parse(r.stdout.toString());
  assert.equal(doc.method, 'PUT');
  assert.equal(doc.target, '/echo/x?y=1');
  assert.equal(doc.length, 7);
  const h = Object.fromEntries(doc.headers.map(([n, v]) => [n.toLowerCase(), v]));
  assert.equal(h['x-one'], '1');
  assert.equal(h['x-two'], 'two');
});

test('--data-file streams a file (POST by default)', async () => {
  const r = await hcfetch(['--mount', '/hc', '--data-file', path.join(dir, 'upload.bin'), `http://${gateway.addr}/sink`]);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout.toString(), /^300000 [0-9a-f]{64}$/);
});

test('a protocol error: exit 1 and `error: CODE`', async () => {
  const r = await hcfetch(['--mount', '/hc', '--identity', otherIdentity, `http://${serve.addr}/hello.txt`]);
  assert.equal(r.code, 1);
  assert.equal(r.stderr, 'error: bad_signature\n');
  assert.equal(r.stdout.length, 0);
  const refused = await hcfetch(['--mount', '/nope', `http://${serve.addr}/hello.txt`]);
  assert.equal(refused.code, 1);
  assert.match(refused.stderr, /^error: \S+\n$/);
});

test('--pq: require against a v1 server is error: hybrid_downgrade (exit 1); prefer falls back and prints the suite', async () => {
  const req = await hcfetch(['--mount', '/hc', '--identity', identity, '--pq', 'require', `http://${serve.addr}/hello.txt`]);
  assert.equal(req.code, 1);
  assert.match(req.stderr, /error: hybrid_downgrade/);
  const pref = await hcfetch(['--mount', '/hc', '--identity', identity, '--pq', 'prefer', `http://${serve.addr}/hello.txt`]);
  assert.equal(pref.code, 0, pref.stderr);
  assert.match(pref.stderr, /request 1: status 200, credential key, suite 1\n/);
  const bad = await hcfetch(['--pq', 'maybe', `http://${serve.addr}/hello.txt`]);
  assert.equal(bad.code, 2);
});
