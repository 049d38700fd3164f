// Suite 2 in a real Chromium: the package bundled with esbuild (ML-KEM-768
// from @noble/post-quantum included) runs a hybrid request, a ticket
// resumption of it and the pin, in the page, against the in-memory server
// behind a fake transport (test/fake.mjs); then reports the bundle size
// beside that of a bundle without suite 2 in use. A missing Chromium FAILS
// the test (test.sh installs it).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import { build } from 'esbuild';
import { chromium } from 'playwright-core';
import { cleanup, pkgDir, tempDir } from './harness.mjs';

const CHROMIUM = process.env.CHROMIUM_BIN ?? '/usr/bin/chromium';
const cleanups = [];
after(async () => {
  for (const f of cleanups.reverse()) await f();
});

const PAGE_SCRIPT = `
import * as hc from '../dist/index.js';
import { ORIGIN, fakeFetch, makeServer } from './fake.mjs';
globalThis.runHybrid = async () => {
  const srv = makeServer({ pq: 'on' });
  const log = [];
  // cookieMode 'header': the fake transport reads the Cookie field (no real network here)
  const c = hc.createClient({ mount: '/hc', identity: srv.identity, pq: 'prefer', cookieMode: 'header', fetch: fakeFetch(srv, { log }) });
  const r1 = await c.fetch(ORIGIN + '/a');
  const d1 = await r1.json();
  const r2 = await c.fetch(ORIGIN + '/b', { method: 'POST', body: new Uint8Array(20000) });
  const d2 = await r2.json();
  srv.cfg.hybridKeys = [];
  let downgrade = null;
  try { await c.fetch(ORIGIN + '/c'); } catch (e) { downgrade = e.code; }
  return { t1: d1.target, s1: hc.exchangeInfo(r1).suite, c1: hc.exchangeInfo(r1).credential, n2: d2.length, s2: hc.exchangeInfo(r2).suite, c2: hc.exchangeInfo(r2).credential, downgrade };
};
`;

async function bundle(contents, outfile) {
  const r = await build({ stdin: { contents, resolveDir: path.join(pkgDir, 'test'), loader: 'js' }, bundle: true, format: 'esm', target: 'es2022', minify: true, outfile, write: false, logLevel: 'warning' });
  return r.outputFiles[0].text;
}

test('Chromium: a hybrid request, its ticket resumption and the pin, with ML-KEM-768 in the page', { timeout: 120_000 }, async (t) => {
  assert.ok(existsSync(CHROMIUM), `Chromium not found at ${CHROMIUM}: install it with apt-get install -y --no-install-recommends chromium (test.sh does)`);
  const dir = tempDir('hc-browser-pq-');
  cleanups.push(() => cleanup(dir));
  mkdirSync(dir, { recursive: true });
  const code = await bundle(PAGE_SCRIPT, path.join(dir, 'pq.js'));
  const context = await chromium.launchPersistentContext(path.join(dir, 'profile'), {
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    timeout: 60_000,
  });
  cleanups.push(() => context.close());
  const page = context.pages()[0] ?? (await context.newPage());
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.setContent('<!doctype html><title>pq</title>');
  await page.addScriptTag({ content: code, type: 'module' });
  await page.waitForFunction(() => typeof globalThis.runHybrid === 'function', null, { timeout: 30_000 });
  const got = await page.evaluate(() => globalThis.runHybrid());
  assert.deepEqual(errors, []);
  assert.deepEqual(got, { t1: '/a', s1: 2, c1: 'key', n2: 20000, s2: 2, c2: 'ticket', downgrade: 'hybrid_downgrade' });

  // The size suite 2 adds to an application bundle (createClient pulls the engine, hence ML-KEM).
  const app = await bundle(`import { createClient } from '../dist/index.js'; globalThis.c = createClient;`, path.join(dir, 'app.js'));
  const gz = gzipSync(Buffer.from(app)).length;
  t.diagnostic(`bundle of createClient: ${app.length} bytes minified, ${gz} gzip`);
});
