// The demo page in a real Chromium (playwright-core, Debian's /usr/bin/chromium),
// served by `httpcrypt serve --pass-through --mount /hc`. Installs nothing:
// a missing Chromium or server binary FAILS the test (test.sh installs Chromium).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { build } from 'esbuild';
import { chromium } from 'playwright-core';
import { cleanup, keygen, pkgDir, startServe, tempDir } from './harness.mjs';

const CHROMIUM = process.env.CHROMIUM_BIN ?? '/usr/bin/chromium';
const SECRET = 'The eagle lands at midnight. (served sealed over plain HTTP)';
const outDir = path.join(pkgDir, 'test-output');
const cleanups = [];
after(async () => {
  for (const f of cleanups.reverse()) await f();
});

test('demo page: hcFetch in Chromium decrypts a file and POSTs, cookie per nonce path', { timeout: 120_000 }, async () => {
  assert.ok(existsSync(CHROMIUM), `Chromium not found at ${CHROMIUM}: install it with apt-get install -y --no-install-recommends chromium (test.sh does)`);
  const site = path.join(outDir, 'site');
  mkdirSync(site, { recursive: true });
  await build({
    entryPoints: [path.join(pkgDir, 'demo/demo.ts')],
    bundle: true,
    format: 'esm',
    target: 'es2022',
    outfile: path.join(site, 'hc-demo.js'),
    logLevel: 'warning',
  });
  copyFileSync(path.join(pkgDir, 'demo/index.html'), path.join(site, 'index.html'));
  writeFileSync(path.join(site, 'secret.txt'), SECRET + '\n');

  const dir = tempDir('hc-browser-');
  cleanups.push(() => cleanup(dir));
  const identity = keygen(path.join(dir, 'keys'));
  const server = await startServe({ keys: path.join(dir, 'keys'), root: site, passThrough: true });
  cleanups.push(() => server.stop());

  const context = await chromium.launchPersistentContext(path.join(dir, 'profile'), {
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: { width: 1000, height: 900 },
    timeout: 60_000,
  });
  cleanups.push(() => context.close());
  const page = context.pages()[0] ?? (await context.newPage());
  const outerRequests = [];
  page.on('request', (r) => outerRequests.push({ method: r.method(), url: r.url(), headers: r.headers() }));
  const consoleErrors = [];
  page.on('pageerror', (e) => consoleErrors.push(String(e)));

  await page.goto(`http://${server.addr}/index.html?identity=${identity}`, { timeout: 30_000 });
  await page.waitForFunction(() => document.getElementById('status')?.textContent?.startsWith('done'), null, { timeout: 60_000 });
  mkdirSync(outDir, { recursive: true });
  await page.screenshot({ path: path.join(outDir, 'browser-demo.png'), fullPage: true });

  assert.deepEqual(consoleErrors, []);
  assert.equal(await page.textContent('#status'), 'done');
  assert.equal((await page.textContent('#secret')).trim(), SECRET);
  assert.equal(await page.textContent('#post-status'), '405');
  assert.equal(await page.textContent('#ticket-credential'), 'ticket');

  // On the wire: the secret path and content never appear; every sealed request is under /hc/{n0}.
  const sealed = outerRequests.filter((r) => /\/hc\/[A-Za-z0-9_-]{32}/.test(new URL(r.url).pathname));
  assert.ok(sealed.length >= 3, `sealed requests seen: ${sealed.length}`);
  assert.ok(sealed.some((r) => r.method === 'GET') && sealed.some((r) => r.method === 'POST'));
  for (const r of outerRequests) assert.ok(!r.url.includes('secret.txt'), `plaintext target leaked: ${r.url}`);
  // The cookie was scoped to each request's own path and is gone afterwards.
  const left = await context.cookies(`http://${server.addr}/`);
  assert.deepEqual(left.filter((c) => c.path.startsWith('/hc/')), [], 'per-request cookies removed');
});
