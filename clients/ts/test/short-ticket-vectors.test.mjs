// Runs every vector of ../../vectors/short-ticket/ (short tickets, spec §7.3),
// or of $HTTPCRYPT_SHORT_TICKET_VECTORS when set: the derivation of k', the
// `Ticket` field, and the server's side (cookie scan, then the ticket key and
// its kex key), as the in-memory server (src/server.ts) runs them. Then a
// deliberately corrupted copy of each kind must fail, so a runner that
// compares nothing cannot pass.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as hc from '../dist/index.js';
import { loadVectors, checkVector, corruptedCopiesFail } from './vector-runner.mjs';

const { fromHex: hex, toHex } = hc;
const { vectors } = loadVectors('HTTPCRYPT_SHORT_TICKET_VECTORS', 'short-ticket');

/** The server of a `short_ticket_accept` case: one version-1 kex key and one ticket key (paired with `kid`, or with none). */
function acceptServer(i) {
  const secret = hex(i.server_secret);
  const cert = hc.signCert(hex(i.identity_seed), i.cert.serial, i.cert.not_before, i.cert.not_after, hc.x25519Public(secret), 1);
  const tk = i.ticket_key;
  return {
    keys: [hc.server.serverKey(secret, cert)],
    ticketKeys: [{ tid: hex(tk.tid), key: hex(tk.key), expires: tk.expires, ...(tk.kid === null ? {} : { kid: hex(tk.kid) }) }],
    mount: '',
    maxBody: 16 << 20,
  };
}

const RUN = {
  short_ticket_issue: (i) => {
    const t = hc.issueShortTicket(hex(i.ticket_key.tid), hex(i.ticket_key.key), hex(i.kid), hex(i.h));
    // The client presents what it parsed from the field: the same cookie and key.
    const field = hc.formatShortTicketField(t);
    const held = hc.parseAnyTicketField(field);
    assert.equal(held.form, 'short');
    const p = hc.prepareRequest(new Uint8Array(32), { kind: 'short_ticket', ticket: held.ticket }, new Uint8Array(24), i.name_pad, i.value_pad);
    assert.equal(toHex(p.sessionKey), toHex(t.key));
    assert.deepEqual([p.credential, p.ticketForm, p.kemCiphertext], ['ticket', 'short', null]);
    return { key: toHex(t.key), field, cookie: p.cookie };
  },
  short_ticket_field: (i) => {
    const t = hc.parseShortTicketField(i.field);
    return { tid: toHex(t.tid), h: toHex(t.h), key: toHex(t.key) };
  },
  short_ticket_accept: (i) => {
    const cfg = acceptServer(i);
    const c = hc.scanCookies([i.cookie], hc.server.lookupId(cfg, i.now));
    assert.equal(c.kind, 'short_ticket', `not a short ticket: ${c.kind}`);
    const s = hc.server.openShortTicket(cfg, c.id, c.value, i.now);
    assert.equal(s.suite, 1);
    return { kid: toHex(s.kid), session_key: toHex(s.sessionKey) };
  },
};

for (const v of vectors) test(`${v.kind}: ${v.name}`, () => checkVector(RUN, v));

test('every kind of vectors/short-ticket/ is run, each kind is present, negative cases outnumber positive ones', () => {
  const kinds = new Set(vectors.map((v) => v.kind));
  for (const k of kinds) assert.ok(RUN[k], `kind ${k} unhandled`);
  for (const k of Object.keys(RUN)) assert.ok(kinds.has(k), `no vector of kind ${k}`);
  const ok = vectors.filter((v) => v.expect === 'ok').length;
  assert.ok(ok >= 3 && vectors.length - ok > ok, `${ok} positive, ${vectors.length - ok} negative`);
});

test('a corrupted copy of a vector of each kind fails', () => {
  corruptedCopiesFail(vectors, RUN, (bad) => {
    if (bad.expect === 'ok') {
      // corrupt the first output member's last character
      const [k, want] = Object.entries(bad.output)[0];
      bad.output[k] = want.slice(0, -1) + (want.at(-1) === '0' ? '1' : '0');
    } else {
      bad.expect = bad.expect === 'bad_cookie' ? 'unknown_key' : 'bad_cookie';
    }
  });
});
