// The admission defence (spec §14.5) in a real Chromium: a page on the
// server's own origin (`httpcrypt serve --pass-through`, defence threshold
// 5/s) sends a burst of fresh-key requests through hcFetch in document
// cookie mode; every one must get its 200 by echoing the solved cookie as a
// `document.cookie` on its nonce path, no per-request cookie may be left
// behind, and the solver must let the page's other tasks run. Needs
// Chromium and a server binary with the defence; either missing FAILS.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { build } from 'esbuild';
import { chromium } from 'playwright-core';
import { cleanup, httpcryptBin, keygen, pkgDir, startServe, tempDir } from './harness.mjs';

const CHROMIUM = process.env.CHROMIUM_BIN ?? '/usr/bin/chromium';
const outDir = path.join(pkgDir, 'test-output');
const cleanups = [];
after(async () => {
  for (const f of cleanups.reverse()) await f();
});

test('Chromium: a burst under the defence, every request admitted by its echo cookie', { timeout: 240_000 }, async () => {
  assert.ok(existsSync(CHROMIUM), `Chromium not found at ${CHROMIUM} (test.sh installs it)`);
  const help = execFileSync(httpcryptBin(), ['serve', '--help'], { encoding: 'utf8', timeout: 30_000 });
  assert.ok(help.includes('--defence-threshold'), `${httpcryptBin()} has no admission defence (spec §14)`);
  const site = path.join(outDir, 'admission-site');
  mkdirSync(site, { recursive: true });
  const entry = path.join(site, 'entry.js');
  writeFileSync(entry, `export * from ${JSON.stringify(path.join(pkgDir, 'src/index.ts'))};\n`);
  await build({ entryPoints: [entry], bundle: true, format: 'esm', target: 'es2022', outfile: path.join(site, 'hc.js'), logLevel: 'warning' });
  writeFileSync(path.join(site, 'index.html'), '<!doctype html><meta charset="utf-8"><title>admission</title><script type="module">import * as hc from "./hc.js"; window.hc = hc; document.title = "ready";</script>');
  writeFileSync(path.join(site, 'data.txt'), 'admitted\n');

  const dir = tempDir('hc-browser-admit-');
  cleanups.push(() => cleanup(dir));
  keygen(path.join(dir, 'keys'));
  const server = await startServe({ keys: path.join(dir, 'keys'), root: site, passThrough: true, extraArgs: ['--defence-threshold', '5', '--max-difficulty', '12'] });
  cleanups.push(() => server.stop());
  const context = await chromium.launchPersistentContext(path.join(dir, 'profile'), {
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    timeout: 60_000,
  });
  cleanups.push(() => context.close());
  const page = context.pages()[0] ?? (await context.newPage());
  const pageErrors = [];
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  const sealed = [];
  page.on('request', (r) => {
    if (/^\/hc\/[A-Za-z0-9_-]{32}$/.test(new URL(r.url()).pathname)) sealed.push(r);
  });
  await page.goto(`http://${server.addr}/index.html`, { timeout: 30_000 });
  await page.waitForFunction(() => document.title === 'ready', null, { timeout: 30_000 });

  const out = await page.evaluate(async () => {
    const hc = window.hc;
    const client = hc.createClient({ mount: '/hc', tickets: false });
    const results = await Promise.all(
      Array.from({ length: 24 }, async () => {
        try {
          const r = await client.fetch('/data.txt');
          return { status: r.status, text: await r.text(), admission: hc.exchangeInfo(r).admission };
        } catch (e) {
          return { error: String(e.code ?? e) };
        }
      }),
    );
    // The solver yields: a timer chain keeps running during a d = 14 search (one long enough to see).
    // A search reaches 16,384 tries with p ≈ 0.37; forty all falling short is ≈ 1e-8.
    const cookie = hc.admitCookie(hc.randomBytes(32), 1, 14, hc.addr16('127.0.0.1'));
    let ticks = 0;
    let maxGap = 0;
    let solveMs = 0;
    let tries = 0;
    for (let round = 0; round < 40 && tries < 16384; round++) {
      ticks = 0;
      maxGap = 0;
      let last = performance.now();
      let running = true;
      const tick = () => {
        const t = performance.now();
        maxGap = Math.max(maxGap, t - last);
        last = t;
        ticks++;
        if (running) setTimeout(tick, 0);
      };
      setTimeout(tick, 0);
      const t0 = performance.now();
      const s = await hc.solvePuzzle(cookie, hc.randomBytes(24), 14);
      solveMs = performance.now() - t0;
      running = false;
      tries = Number(new DataView(s.buffer, s.byteOffset).getBigUint64(0)) + 1;
    }
    return { results, ticks, maxGap, solveMs, tries, cookies: document.cookie };
  });
  assert.deepEqual(pageErrors, []);
  for (const r of out.results) {
    assert.equal(r.error, undefined);
    assert.equal(r.status, 200);
    assert.equal(r.text, 'admitted\n');
  }
  assert.ok(out.results.some((r) => r.admission.challenges >= 1 && r.admission.echoDifficulty > 0), `a puzzle was solved: ${JSON.stringify(out.results.map((r) => r.admission))}`);
  // On the wire: challenged requests carried no echo; the admitted ones carried it as a cookie.
  const seen = [];
  for (const r of sealed) {
    const cookie = (await r.allHeaders()).cookie ?? '';
    seen.push({ status: (await r.response())?.status(), echo: /(^|; )hc1-admit=[A-Za-z0-9_-]{39}(;|$)/.test(cookie) });
  }
  assert.ok(seen.some((x) => x.status === 429 && !x.echo), JSON.stringify(seen));
  assert.ok(seen.some((x) => x.status === 200 && x.echo), JSON.stringify(seen));
  const left = await context.cookies(`http://${server.addr}/`);
  assert.deepEqual(left.filter((c) => c.path.startsWith('/hc/') || c.name === 'hc1-admit'), [], 'per-request cookies removed');
  assert.equal(out.cookies, '');
  assert.ok(out.tries >= 16384, 'a search long enough to observe');
  const yields = Math.floor(out.tries / 2048);
  assert.ok(out.ticks >= Math.floor(yields / 4), `the page ran ${out.ticks} timer tasks during ${out.tries} hashes (${yields} yields)`);
  process.stderr.write(`chromium: d=14 solved in ${out.solveMs.toFixed(0)} ms (${out.tries} hashes), ${out.ticks} timer ticks, longest gap ${out.maxGap.toFixed(0)} ms\n`);
});
