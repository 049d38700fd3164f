// The in-memory HTTPCrypt server behind a fake transport, and a simulated
// browser cookie jar: shared by client.test.mjs and admission.test.mjs.
import * as hc from '../dist/index.js';

export const ORIGIN = 'http://app.test:8080';
export const NOW = Math.floor(Date.now() / 1000);

export function makeServer() {
  const identitySeed = hc.randomBytes(32);
  const secret = hc.randomBytes(32);
  const cert = hc.signCert(identitySeed, 7, NOW - 60, NOW + 7200, hc.x25519Public(secret));
  const cfg = {
    keys: [hc.server.serverKey(secret, cert)],
    ticketKeys: [{ tid: hc.randomBytes(10), key: hc.randomBytes(32), expires: NOW + 7200 }],
    mount: '/hc',
    maxBody: 16 << 20,
  };
  return { cfg, cert, identity: hc.ed25519Public(identitySeed) };
}

/**
 * A fetch that plays the server. `cookiesFor(path)` supplies cookies the
 * way a browser jar would; `tamper(body)` may alter the sealed response.
 */
export function fakeFetch(srv, { cookiesFor = null, tamper = (b) => b, log = [] } = {}) {
  return async (url, init = {}) => {
    const u = new URL(url);
    const method = init.method ?? 'GET';
    const headers = new Headers(init.headers);
    if (method === 'OPTIONS') {
      return new Response(hc.formatCertList(hc.server.validCerts(srv.cfg, NOW)), {
        status: 200,
        headers: { 'content-type': 'application/httpcrypt-certs', 'cache-control': 'max-age=3600' },
      });
    }
    let body = new Uint8Array(0);
    if (init.body instanceof ReadableStream) body = new Uint8Array(await new Response(init.body).arrayBuffer());
    else if (init.body) body = new Uint8Array(init.body);
    const cookies = cookiesFor ? cookiesFor(u.pathname) : headers.get('cookie') ? [headers.get('cookie')] : [];
    log.push({ method, path: u.pathname, cookies, credentials: init.credentials });
    const req = { method, target: u.pathname + u.search, host: u.host, cookies, contentLength: method === 'POST' ? body.length : null, body };
    let accepted;
    try {
      const r = hc.server.accept(srv.cfg, req, NOW);
      if (r.kind !== 'request') return new Response('not found', { status: 404 });
      accepted = r.accepted;
    } catch (e) {
      const type = e.code === 'unknown_key' ? 'urn:httpcrypt:unknown-key' : 'urn:httpcrypt:malformed';
      const doc = { type, status: 400, title: e.message, ...(e.code === 'unknown_key' ? { certs: hc.server.validCerts(srv.cfg, NOW).map(hc.certToText) } : {}) };
      return new Response(JSON.stringify(doc), { status: 400, headers: { 'content-type': 'application/problem+json' } });
    }
    const inner = hc.server.openRequest(accepted, req.body);
    const payload = new TextEncoder().encode(JSON.stringify({ method: inner.head.method, target: inner.head.target, length: inner.body.length, fields: inner.head.fields }));
    const ticket = hc.sealTicket(srv.cfg.ticketKeys[0].tid, srv.cfg.ticketKeys[0].key, { sessionKey: accepted.sessionKey, kid: accepted.kid, expiry: NOW + 7200 }, hc.randomBytes(24));
    const head = `HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ${payload.length}\r\nDate: ${hc.formatHttpDate(NOW)}\r\nTicket: ${hc.formatTicketField(ticket)}\r\n\r\n`;
    const sealed = hc.server.sealResponse(accepted, hc.randomBytes(24), hc.concat(hc.utf8(head), payload), 64);
    return new Response(tamper(sealed), { status: 200, headers: { 'content-type': 'application/octet-stream' } });
  };
}

/** A minimal browser cookie jar behind `document.cookie`, matching by path as RFC 6265 does. */
export function installBrowser(origin) {
  const jar = new Map(); // key name|path -> { name, value, path }
  const writes = [];
  globalThis.location = { origin, href: origin + '/index.html' };
  globalThis.document = {
    get cookie() {
      return [...jar.values()].filter((c) => c.path === '/').map((c) => `${c.name}=${c.value}`).join('; ');
    },
    set cookie(s) {
      writes.push(s);
      const [pair, ...attrs] = s.split(';').map((x) => x.trim());
      const eq = pair.indexOf('=');
      const name = pair.slice(0, eq);
      const value = pair.slice(eq + 1);
      const a = Object.fromEntries(attrs.map((x) => x.split('=')).map(([k, v]) => [k.toLowerCase(), v ?? true]));
      const key = `${name}|${a.path}`;
      if (a['max-age'] === '0') jar.delete(key);
      else jar.set(key, { name, value, path: a.path });
    },
  };
  const cookiesFor = (path) => {
    const matching = [...jar.values()].filter((c) => path === c.path || path.startsWith(c.path.endsWith('/') ? c.path : c.path + '/'));
    return matching.length ? [matching.map((c) => `${c.name}=${c.value}`).join('; ')] : [];
  };
  const uninstall = () => {
    delete globalThis.document;
    delete globalThis.location;
  };
  return { jar, writes, cookiesFor, uninstall };
}
