// The demo page's script (bundled by esbuild into hc-demo.js): fetch an
// encrypted file and POST through hcFetch, show the verified results.
import { createClient, exchangeInfo, HttpCryptError } from '../src/index.js';

const $ = (id: string): HTMLElement => document.getElementById(id)!;

function show(id: string, html: string, ok: boolean): void {
  $(id).innerHTML = `<span class="${ok ? 'ok' : 'err'}">${html}</span>`;
}

function escapeHtml(s: string): string {
  return s.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]!);
}

function outer(res: Response): string {
  const info = exchangeInfo(res);
  if (!info) return '';
  const u = new URL(info.outerUrl);
  const target = u.pathname + (u.search.length > 70 ? u.search.slice(0, 70) + '…' : u.search);
  return `${info.form.toUpperCase()} ${target} HTTP/1.1\nCookie: (${info.credential}, set for this path only)\n→ 200 OK, application/octet-stream (sealed)`;
}

async function main(): Promise<void> {
  const params = new URLSearchParams(location.search);
  const identity = params.get('identity') ?? undefined;
  const client = createClient({ mount: params.get('mount') ?? '/hc', ...(identity ? { identity } : {}) });
  $('mode').textContent = identity ? `(authenticated: identity ${identity.slice(0, 10)}…)` : '(opportunistic)';
  let failures = 0;

  try {
    const res = await client.fetch('/secret.txt');
    const text = await res.text();
    show('get-result', `inner ${res.status} ${escapeHtml(res.statusText)}: <pre id="secret">${escapeHtml(text)}</pre>`, res.status === 200);
    $('get-outer').textContent = outer(res);
  } catch (e) {
    failures++;
    show('get-result', `error: ${e instanceof HttpCryptError ? e.code : String(e)}`, false);
  }

  try {
    const body = new Uint8Array(4096).fill(0x61);
    const res = await client.fetch('/secret.txt', { method: 'POST', body, headers: { 'Content-Type': 'text/plain' } });
    await res.arrayBuffer();
    // The static file server does not take POSTs: an authenticated inner 405 proves the round trip.
    show('post-result', `inner <span id="post-status">${res.status}</span> ${escapeHtml(res.statusText)} (sealed answer, verified)`, true);
    $('post-outer').textContent = outer(res);
  } catch (e) {
    failures++;
    show('post-result', `error: ${e instanceof HttpCryptError ? e.code : String(e)}`, false);
  }

  try {
    const res = await client.fetch('/secret.txt');
    await res.text();
    const cred = exchangeInfo(res)?.credential ?? '?';
    show('ticket-result', `inner ${res.status}, credential <span id="ticket-credential">${cred}</span>`, res.status === 200);
  } catch (e) {
    failures++;
    show('ticket-result', `error: ${e instanceof HttpCryptError ? e.code : String(e)}`, false);
  }

  $('status').textContent = failures === 0 ? 'done' : `done with ${failures} error(s)`;
  $('status').className = failures === 0 ? 'ok' : 'err';
}

void main();
