// hcFetch on a real page in Chromium (playwright-core, Debian's
// /usr/bin/chromium): the page is served by `httpcrypt serve --pass-through
// --mount /hc` behind a small counting proxy in this test, which sets the
// page's HttpOnly session cookie and records every request the server gets.
// Checked: the page's own cookies survive a burst of concurrent calls (the
// client bounds its live request cookies), concurrent first calls share one
// OPTIONS, a verified sealed GET raises no failed-request event, the
// default hcFetch finds the mount of a pass-through server, and the caller's
// fields travel inside only, with no Referer outside (erratum E1). A missing
// Chromium or server binary FAILS these tests (test.sh installs Chromium).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { build } from 'esbuild';
import { chromium } from 'playwright-core';
import { cleanup, keygen, pkgDir, startServe, tempDir } from './harness.mjs';

const CHROMIUM = process.env.CHROMIUM_BIN ?? '/usr/bin/chromium';
const outDir = path.join(pkgDir, 'test-output');
const SEALED = /^\/hc\/2?[A-Za-z0-9_-]{32}$/;
const cleanups = [];
let server, proxy, browser;
/** What the server was asked, in order: `{ method, path, cookie, headers }`. */
const seen = [];

/** How long the proxy holds a sealed request, as a distant server would: calls overlap as they do on a real network. */
const LATENCY_MS = 150;

/**
 * A forwarding proxy in front of the server: counts requests, holds sealed
 * ones for `LATENCY_MS`, and adds an HttpOnly session cookie to the page
 * (the one a login would set).
 */
function startProxy(target) {
  const [host, port] = target.split(':');
  const srv = http.createServer(async (req, res) => {
    seen.push({ method: req.method, path: req.url.split('?')[0], cookie: req.headers.cookie ?? '', headers: req.headers });
    if (SEALED.test(req.url.split('?')[0])) await new Promise((resolve) => setTimeout(resolve, LATENCY_MS));
    const up = http.request({ host, port: Number(port), method: req.method, path: req.url, headers: req.headers }, (ur) => {
      const headers = { ...ur.headers };
      if (req.url.startsWith('/index.html')) headers['set-cookie'] = ['session=s3cr3t-login; Path=/; HttpOnly; SameSite=Lax'];
      res.writeHead(ur.statusCode, headers);
      ur.pipe(res);
    });
    up.on('error', () => res.destroy());
    req.pipe(up);
  });
  return new Promise((resolve) => srv.listen(0, '127.0.0.1', () => resolve({ addr: `127.0.0.1:${srv.address().port}`, stop: () => new Promise((r) => srv.close(r)) })));
}

before(async () => {
  assert.ok(existsSync(CHROMIUM), `Chromium not found at ${CHROMIUM}: install it with apt-get install -y --no-install-recommends chromium (test.sh does)`);
  const site = path.join(outDir, 'page-site');
  mkdirSync(site, { recursive: true });
  const entry = path.join(site, 'entry.js');
  writeFileSync(entry, `export * from ${JSON.stringify(path.join(pkgDir, 'src/index.ts'))};\n`);
  await build({ entryPoints: [entry], bundle: true, format: 'esm', target: 'es2022', outfile: path.join(site, 'hc.js'), logLevel: 'warning' });
  writeFileSync(path.join(site, 'index.html'), '<!doctype html><meta charset="utf-8"><title>page</title><script type="module">import * as hc from "./hc.js"; window.hc = hc; document.title = "ready";</script>');
  writeFileSync(path.join(site, 'data.txt'), 'sealed data\n');

  const dir = tempDir('hc-browser-page-');
  cleanups.push(() => cleanup(dir));
  keygen(path.join(dir, 'keys'));
  server = await startServe({ keys: path.join(dir, 'keys'), root: site, passThrough: true });
  cleanups.push(() => server.stop());
  proxy = await startProxy(server.addr);
  cleanups.push(() => proxy.stop());
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    timeout: 60_000,
  });
  cleanups.push(() => browser.close());
});

after(async () => {
  for (const f of cleanups.reverse()) await f();
});

/** A page on the proxy's origin in a context of its own (its own cookie jar), with the module loaded as `window.hc`. */
async function openPage() {
  const context = await browser.newContext();
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  const failed = [];
  page.on('requestfailed', (r) => failed.push(`${r.method()} ${new URL(r.url()).pathname}: ${r.failure()?.errorText}`));
  await page.goto(`http://${proxy.addr}/index.html`, { timeout: 30_000 });
  await page.waitForFunction(() => document.title === 'ready', null, { timeout: 30_000 });
  return { page, context, errors, failed };
}

test('the default hcFetch on a page served by serve --pass-through finds the mount; a sealed GET fails no request', { timeout: 120_000 }, async () => {
  const { page, errors, failed } = await openPage();
  const out = await page.evaluate(async () => {
    const r = await window.hc.hcFetch('/data.txt');
    const text = await r.text();
    // A POST and a second GET (ticket) too, then fresh clients (a fresh key each): none may show as failed.
    const p = await window.hc.hcFetch('/data.txt', { method: 'POST', body: 'x' });
    await p.arrayBuffer();
    const g = await window.hc.hcFetch('/data.txt');
    const fresh = [];
    for (let i = 0; i < 6; i++) fresh.push(await (await window.hc.createClient().fetch('/data.txt')).text());
    return { status: r.status, text, post: p.status, again: await g.text(), form: window.hc.exchangeInfo(r).form, fresh };
  });
  assert.deepEqual(out, { status: 200, text: 'sealed data\n', post: 405, again: 'sealed data\n', form: 'get', fresh: Array(6).fill('sealed data\n') });
  // Let late network events arrive before judging.
  await page.waitForTimeout(500);
  assert.deepEqual(failed, [], 'no request of a verified exchange fails (net::ERR_ABORTED)');

  // Erratum E1 in the browser: the caller's fields travel inside only, and no Referer names the page outside.
  const before = seen.length;
  const status = await page.evaluate(async () => {
    const r = await window.hc.hcFetch('/data.txt', { headers: { Authorization: 'Bearer page-token-e1', 'X-Custom': 'page-value-e1' } });
    await r.text();
    return r.status;
  });
  assert.equal(status, 200);
  const sealed = seen.slice(before).filter((r) => SEALED.test(r.path));
  assert.equal(sealed.length, 1);
  const wire = JSON.stringify(sealed[0].headers);
  assert.ok(!wire.includes('page-token-e1') && !wire.includes('page-value-e1'), `caller fields outside: ${wire}`);
  assert.equal(sealed[0].headers.referer, undefined, `outer Referer: ${sealed[0].headers.referer}`);
  assert.deepEqual(errors, []);
  await page.context().close();
});

test('20 concurrent first calls share one OPTIONS', { timeout: 120_000 }, async () => {
  const { page, errors } = await openPage();
  const before = seen.length;
  const out = await page.evaluate(async () => {
    const client = window.hc.createClient({ mount: '/hc' });
    const rs = await Promise.all(Array.from({ length: 20 }, () => client.fetch('/data.txt').then((r) => r.text())));
    return rs.filter((t) => t === 'sealed data\n').length;
  });
  assert.equal(out, 20);
  const asked = seen.slice(before);
  assert.equal(asked.filter((r) => r.method === 'OPTIONS').length, 1, `OPTIONS the server got: ${JSON.stringify(asked.filter((r) => r.method === 'OPTIONS'))}`);
  assert.equal(asked.filter((r) => SEALED.test(r.path)).length, 20);
  assert.deepEqual(errors, []);
  await page.context().close();
});

for (const siteCookies of [21, 150]) {
  test(`a page with ${siteCookies} site cookies keeps all of them through 160 concurrent hcFetch calls`, { timeout: 180_000 }, async () => {
    const { page, context, errors } = await openPage();
    // The HttpOnly session cookie came with the page; the rest the page sets itself.
    await page.evaluate((n) => {
      for (let i = 1; i < n; i++) document.cookie = `site${i}=value${i}; path=/; max-age=3600`;
    }, siteCookies);
    const origin = `http://${proxy.addr}/`;
    const mine = (cookies) => cookies.filter((c) => c.name === 'session' || /^site\d+$/.test(c.name)).map((c) => c.name).sort();
    // The renderer hands cookie writes to the browser's store asynchronously: wait until all are there.
    let expected = [];
    for (let i = 0; i < 100 && expected.length < siteCookies; i++) {
      if (i > 0) await page.waitForTimeout(100);
      expected = mine(await context.cookies(origin));
    }
    assert.equal(expected.length, siteCookies);
    assert.ok((await context.cookies(origin)).some((c) => c.name === 'session' && c.httpOnly), 'the HttpOnly session cookie is set');

    const out = await page.evaluate(async () => {
      const client = window.hc.createClient({ mount: '/hc', tickets: false });
      const rs = await Promise.all(
        Array.from({ length: 160 }, () =>
          client.fetch('/data.txt').then(
            (r) => r.text(),
            (e) => `error ${e.code ?? e}`,
          ),
        ),
      );
      return { ok: rs.filter((t) => t === 'sealed data\n').length, other: rs.filter((t) => t !== 'sealed data\n').slice(0, 3) };
    });
    assert.deepEqual(out, { ok: 160, other: [] });
    let left = await context.cookies(origin);
    // Removals travel to the store asynchronously too.
    for (let i = 0; i < 50 && left.some((c) => c.path.startsWith('/hc/')); i++) {
      await page.waitForTimeout(100);
      left = await context.cookies(origin);
    }
    assert.deepEqual(mine(left), expected, 'every site cookie, the HttpOnly one included, is still in the jar');
    assert.deepEqual(
      left.filter((c) => c.path.startsWith('/hc/')),
      [],
      'no request cookie is left behind',
    );
    assert.deepEqual(errors, []);
    await page.context().close();
  });
}
