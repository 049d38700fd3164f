// The in-memory HTTPCrypt server behind a fake transport, and a simulated
// browser cookie jar: shared by client.test.mjs and admission.test.mjs.
import * as hc from '../dist/index.js';

export const ORIGIN = 'http://app.test:8080';
export const NOW = Math.floor(Date.now() / 1000);

/**
 * `version: 2` issues a certificate that announces profile 2 (spec §4.5).
 * `pq`: `off` (v1 only), `on` (a suite-1 and a suite-2 certificate for the
 * same kex key) or `only` (suite 2 only), as `httpcrypt serve --pq`. Each
 * kex key comes with a ticket key of its own, which its short tickets
 * (spec §7.3) are issued under; the first one also seals v1 tickets.
 */
export function makeServer({ version = 1, pq = 'off' } = {}) {
  const identitySeed = hc.randomBytes(32);
  const secret = hc.randomBytes(32);
  const cert = hc.signCert(identitySeed, 7, NOW - 60, NOW + 7200, hc.x25519Public(secret), version);
  const cfg = {
    keys: pq === 'only' ? [] : [hc.server.serverKey(secret, cert)],
    hybridKeys: [],
    ticketKeys: [{ tid: hc.randomBytes(10), key: hc.randomBytes(32), expires: NOW + 7200, kid: hc.keyId(cert.kexPublic) }],
    mount: '/hc',
    maxBody: 16 << 20,
  };
  const srv = { cfg, cert, identity: hc.ed25519Public(identitySeed), identitySeed, secret };
  if (pq !== 'off') addHybridKey(srv, { version });
  return srv;
}

/** Gives `srv` a suite-2 certificate for its kex key and a new ML-KEM key (returned), valid until `notAfter`. */
export function addHybridKey(srv, { version = 1, serial = 7, notAfter = NOW + 7200, kemSeed = hc.randomBytes(64) } = {}) {
  const kem = hc.kemKeyPair(kemSeed);
  const hcert = hc.signHybridCert(srv.identitySeed, serial, NOW - 60, notAfter, hc.x25519Public(srv.secret), kem.ek, version);
  srv.cfg.hybridKeys.push(hc.server.serverHybridKey(srv.secret, kemSeed, hcert));
  srv.cfg.ticketKeys.push({ tid: hc.randomBytes(10), key: hc.randomBytes(32), expires: notAfter, kid: hc.hybridCertKid(hcert) });
  srv.hybridCert = hcert;
  return hcert;
}

/** The body of `OPTIONS {mount}/pq`: suite-2 certificates, then each key text. */
export function pqListBody(srv) {
  return hc.formatHybridCertList(hc.server.validHybridCerts(srv.cfg, NOW), hc.server.validKemKeys(srv.cfg, NOW));
}

const PROBLEM_OF = { unknown_key: 'urn:httpcrypt:unknown-key', hybrid_required: 'urn:httpcrypt:hybrid-required' };

/** Seals a whole inner response for `accepted` (v1: 24-byte n0; profile 2: 16-byte r). */
function sealed(accepted, head, payload = new Uint8Array(0), recordSize = 64) {
  return hc.server.sealResponse(accepted, hc.randomBytes(hc.server.responseNonceLen(accepted)), hc.concat(hc.utf8(head), payload), recordSize);
}

/** A sealed inner problem (spec §4.4), with the server's Date as every inner error carries it. */
function innerProblem(accepted, status, reason, type, extra = '') {
  const doc = hc.utf8(JSON.stringify({ type, title: type, status }));
  const head = `HTTP/1.1 ${status} ${reason}\r\nContent-Type: application/problem+json\r\nDate: ${hc.formatHttpDate(NOW)}\r\nContent-Length: ${doc.length}\r\n${extra}\r\n`;
  return new Response(sealed(accepted, head, doc, 1 << 14), { status: 200, headers: { 'content-type': 'application/octet-stream' } });
}

/**
 * A fetch that plays the server. `cookiesFor(path)` supplies cookies the
 * way a browser jar would; `tamper(body)` may alter the sealed response;
 * `host(urlHost)` is the outer Host the server parses (a rewriting
 * middlebox); with `freshness`, the server judges the inner Date (v1) or the
 * time in n0 (profile 2) against NOW with a 60 s window and answers 425 stale.
 * Tickets as the Rust server issues them: a short one (spec §7.3) when the
 * request asks (`Ticket: short`), none to a short ticket that does not ask,
 * a v1 ticket otherwise. With `tokenSecret`, tokens as `serve --require-token`
 * (spec §8.4): a side-effecting request without a `Random` that verifies
 * under its session key is answered inner 425 `token-required`; every answer
 * to a `Client-Random` carries a `Random`, computed under the key `k'` of the
 * short ticket the same answer issues, else under the request's key.
 */
export function fakeFetch(srv, { cookiesFor = null, tamper = (b) => b, log = [], host = (h) => h, freshness = false, tokenSecret = null } = {}) {
  return async (url, init = {}) => {
    const u = new URL(url);
    const method = init.method ?? 'GET';
    const headers = new Headers(init.headers);
    if (method === 'OPTIONS' && u.pathname === `${srv.cfg.mount}/pq`) {
      log.push({ method, path: u.pathname });
      if ((srv.cfg.hybridKeys ?? []).length === 0) return new Response('not found', { status: 404 });
      return new Response(pqListBody(srv), { status: 200, headers: { 'content-type': 'application/httpcrypt-certs', 'cache-control': 'max-age=3600' } });
    }
    if (method === 'OPTIONS') {
      if (srv.cfg.keys.length === 0) return new Response('not found', { status: 404 });
      return new Response(hc.formatCertList(hc.server.validCerts(srv.cfg, NOW)), {
        status: 200,
        headers: { 'content-type': 'application/httpcrypt-certs', 'cache-control': 'max-age=3600' },
      });
    }
    let body = new Uint8Array(0);
    if (init.body instanceof ReadableStream) body = new Uint8Array(await new Response(init.body).arrayBuffer());
    else if (init.body) body = new Uint8Array(init.body);
    const cookies = cookiesFor ? cookiesFor(u.pathname) : headers.get('cookie') ? [headers.get('cookie')] : [];
    log.push({ method, path: u.pathname, cookies, credentials: init.credentials, host: u.host });
    const req = { method, target: u.pathname + u.search, host: host(u.host), cookies, contentLength: method === 'POST' ? body.length : null, body };
    let accepted;
    try {
      const r = hc.server.accept(srv.cfg, req, NOW);
      if (r.kind !== 'request') return new Response('not found', { status: 404 });
      accepted = r.accepted;
    } catch (e) {
      const type = PROBLEM_OF[e.code] ?? 'urn:httpcrypt:malformed';
      const certs = e.code === 'unknown_key' ? { certs: hc.server.validCerts(srv.cfg, NOW).map(hc.certToText), hybrid_certs: hc.server.validHybridCerts(srv.cfg, NOW).map(hc.hybridCertToText) } : {};
      const doc = { type, status: 400, title: e.message, ...certs };
      return new Response(JSON.stringify(doc), { status: 400, headers: { 'content-type': 'application/problem+json' } });
    }
    log[log.length - 1].profile = accepted.profile;
    log[log.length - 1].suite = accepted.suite;
    log[log.length - 1].credential = accepted.credential.kind;
    let inner;
    try {
      inner = hc.server.openRequest(accepted, req.body);
      if (freshness) {
        if (accepted.profile === 2) hc.checkNonceTime(accepted.n0, NOW, 60);
        else hc.checkDate(hc.fieldValue(inner.head.fields, 'date'), NOW, 60);
      }
    } catch (e) {
      if (e.code === 'integrity') return innerProblem(accepted, 500, 'Internal Server Error', 'urn:httpcrypt:integrity');
      if (e.code === 'stale') return innerProblem(accepted, 425, 'Too Early', 'urn:httpcrypt:stale');
      throw e;
    }
    const payload = new TextEncoder().encode(JSON.stringify({ method: inner.head.method, target: inner.head.target, length: inner.body.length, fields: inner.head.fields }));
    const asked = hc.fieldValue(inner.head.fields, 'ticket') === hc.ASK_SHORT;
    log[log.length - 1].asked = asked;
    let ticket = '';
    // The key the answer's token is bound to: k' of a short ticket it issues, else the request's.
    let tokenKey = accepted.sessionKey;
    if (asked) {
      const tk = hc.server.ticketKeyFor(srv.cfg, accepted.kid, NOW);
      if (tk) {
        const t = hc.issueShortTicket(tk.tid, tk.key, accepted.kid, hc.randomBytes(16));
        ticket = hc.formatShortTicketField(t);
        tokenKey = t.key;
      }
    } else if (accepted.credential.kind !== 'short_ticket') {
      const tk = srv.cfg.ticketKeys[0];
      ticket = hc.formatTicketField(hc.sealTicket(tk.tid, tk.key, { sessionKey: accepted.sessionKey, kid: accepted.kid, expiry: NOW + 7200 }, hc.randomBytes(24)));
    }
    const ticketLine = ticket === '' ? '' : `Ticket: ${ticket}\r\n`;
    let tokenLine = '';
    if (tokenSecret !== null) {
      const cr = hc.fieldValue(inner.head.fields, 'client-random');
      if (cr !== undefined) tokenLine = `Random: ${hc.formatRandom(tokenSecret, tokenKey, hc.b64uDecodeExact(cr, 24))}\r\n`;
      const presented = hc.fieldValue(inner.head.fields, 'random');
      let valid = false;
      if (presented !== undefined) {
        try {
          hc.verifyRandom(tokenSecret, accepted.sessionKey, presented);
          valid = true;
        } catch {
          // bad_token: demanded again below
        }
      }
      log[log.length - 1].token = presented === undefined ? 'none' : valid ? 'valid' : 'invalid';
      if (!['GET', 'HEAD', 'OPTIONS', 'TRACE'].includes(inner.head.method) && !valid) {
        return innerProblem(accepted, 425, 'Too Early', 'urn:httpcrypt:token-required', `${ticketLine}${tokenLine}`);
      }
    }
    // Profile 2 answers carry no inner Date (spec §4.5); these span several records, so Content-Length stays.
    const date = accepted.profile === 2 ? '' : `Date: ${hc.formatHttpDate(NOW)}\r\n`;
    const head = `HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ${payload.length}\r\n${date}${ticketLine}${tokenLine}\r\n`;
    return new Response(tamper(sealed(accepted, head, payload)), { status: 200, headers: { 'content-type': 'application/octet-stream' } });
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
