// Runs every shared vector in ../../vectors/ (spec §12 codes for negative
// cases), or in $HTTPCRYPT_VECTORS when set (a scratch directory, e.g. the
// repository's vectors merged with ones not landed yet). Kinds this package
// has no use for are reported as skipped with the reason; nothing is
// silently ignored.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as hc from '../dist/index.js';
import { loadVectors, checkVector } from './vector-runner.mjs';

const { fromHex: hex, toHex } = hc;
const { files, vectors } = loadVectors('HTTPCRYPT_VECTORS', '');

const SPLIT_WHY = 'the proxy and origin side of split serving (spec/split-serving.md); a client only opens the spliced CLEAR records, which the stream_open vectors cover';
const SKIP = { split_seal: SPLIT_WHY, split_splice: SPLIT_WHY, content_batch: SPLIT_WHY };


/** Whole, byte by byte, and split at every offset (lazily: bodies reach 64 KiB). */
function* streamSplits(body) {
  yield [body];
  yield Array.from(body, (b) => Uint8Array.of(b));
  for (let i = 1; i < body.length; i++) yield [body.subarray(0, i), body.subarray(i)];
}

/** Runs `f` on every split; every way must give the same result as the whole. */
function sameForEverySplit(body, f) {
  let first = null;
  for (const chunks of streamSplits(body)) {
    let r;
    try {
      r = { ok: f(chunks) };
    } catch (e) {
      if (!(e instanceof hc.HttpCryptError)) throw e;
      r = { err: e.code };
    }
    if (first === null) first = r;
    else if (r.ok !== first.ok || r.err !== first.err) assert.fail(`split disagrees: ${JSON.stringify(r).slice(0, 80)} vs ${JSON.stringify(first).slice(0, 80)}`);
  }
  if (first.err) throw new hc.HttpCryptError(first.err);
  return first.ok;
}

function decodeSplit(dec, chunks) {
  let head = null;
  const body = [];
  for (const c of chunks) {
    dec.receive(c);
    for (let ev = dec.nextEvent(); ev !== null; ev = dec.nextEvent()) {
      if (ev.type === 'head') head = ev.head;
      else body.push(ev.bytes);
    }
  }
  dec.finish();
  return JSON.stringify({ head, body: toHex(hc.concat(...body)) });
}

function openWith(opener, chunks) {
  const out = [];
  for (const c of chunks) {
    opener.receive(c);
    for (let ev = opener.nextEvent(); ev !== null; ev = opener.nextEvent()) if (ev.type === 'data') out.push(ev.plaintext);
  }
  opener.finish();
  return hc.concat(...out);
}

/** A missing `profile` means 1 (vectors/README.md, "Profile 2"). */
const profileOf = (i) => i.profile ?? 1;

function makeOpener(i) {
  const key = hex(i.key);
  if (profileOf(i) === 2) {
    return i.direction === 'request' ? hc.Opener.compactRequest(key, hex(i.n0), i.host, i.max_record) : hc.Opener.compactResponse(key, hex(i.request_n0), i.max_record);
  }
  return i.direction === 'request' ? hc.Opener.request(key, hex(i.n0), i.max_record) : hc.Opener.response(key, hex(i.request_n0), i.max_record);
}

/** The sealer of a `stream_seal` case and the bytes that precede its records (response n0, or r for profile 2). */
function makeSealer(i) {
  const key = hex(i.key);
  if (profileOf(i) === 2) {
    if (i.direction === 'request') return { sealer: hc.Sealer.compactRequest(key, hex(i.n0), i.host), prefix: [] };
    return { sealer: hc.Sealer.compactResponse(key, hex(i.response_random), hex(i.request_n0)), prefix: [hex(i.response_random)] };
  }
  if (i.direction === 'request') return { sealer: hc.Sealer.request(key, hex(i.n0)), prefix: [] };
  return { sealer: hc.Sealer.response(key, hex(i.n0), hex(i.request_n0)), prefix: [hex(i.n0)] };
}

function serverConfig(i) {
  const seed = hex(i.identity_seed);
  const secret = hex(i.server_secret);
  // A profile-2 exchange runs against a key whose certificate announces it (version 2).
  const version = i.cert.version ?? (profileOf(i) === 2 ? 2 : 1);
  const cert = hc.signCert(seed, i.cert.serial, i.cert.not_before, i.cert.not_after, hc.x25519Public(secret), version);
  return {
    cert,
    cfg: {
      keys: [hc.server.serverKey(secret, cert)],
      ticketKeys: i.ticket_key ? [{ tid: hex(i.ticket_key.tid), key: hex(i.ticket_key.key), expires: i.ticket_key.expires }] : [],
      mount: hc.normalizeMount(i.mount),
      maxBody: i.max_body ?? 16 << 20,
    },
  };
}

function serverOpen(cfg, outerBytes, now) {
  const req = hc.server.parseOuterRequest(outerBytes);
  const r = hc.server.accept(cfg, req, now);
  assert.equal(r.kind, 'request');
  return { accepted: r.accepted, ...hc.server.openRequest(r.accepted, req.body) };
}

const certJson = (c) => ({ serial: c.serial, not_before: c.notBefore, not_after: c.notAfter, kex_public: toHex(c.kexPublic) });

/** Returns the output object to compare with `output` (or throws an HttpCryptError). */
const RUN = {
  b64u: (i) => ({ hex: toHex(hc.b64uDecode(i.text)) }),
  kex: (i) => {
    const secret = hex(i.secret);
    const pub = hc.x25519Public(secret);
    const peer = hex(i.peer_public);
    const shared = hc.x25519Shared(secret, peer);
    return { public: toHex(pub), kid: toHex(hc.keyId(pub)), shared: toHex(shared), session_key: toHex(hc.sessionKey(secret, peer)) };
  },
  inner_request: (i) => {
    const limits = { maxInnerHead: i.max_inner_head ?? 65536, maxInnerFields: i.max_inner_fields ?? 100 };
    const { head, body } = JSON.parse(sameForEverySplit(hex(i.message), (chunks) => decodeSplit(hc.InnerDecoder.request(limits), chunks)));
    return { method: head.method, target: head.target, fields: head.fields, body };
  },
  inner_response: (i) => {
    const { head, body } = JSON.parse(sameForEverySplit(hex(i.message), (chunks) => decodeSplit(hc.InnerDecoder.response(undefined, i.request_method ?? 'GET'), chunks)));
    return { status: head.status, reason: head.reason, fields: head.fields, body };
  },
  route: (i) => {
    const r = hc.route(i.method, i.target, hc.normalizeMount(i.mount));
    const out = { route: r.route };
    if (r.n0) out.n0 = toHex(r.n0);
    if (r.query !== undefined) out.query = r.query;
    if (r.profile !== undefined) out.profile = r.profile;
    return out;
  },
  cookie_scan: (i) => {
    const ids = i.ids.map((x) => [hex(x.id), x.kind]);
    const c = hc.scanCookies(i.fields, hc.idLookup(ids));
    return { kind: c.kind, id: toHex(c.id), value: toHex(c.value) };
  },
  date_check: (i) => ({ date: hc.checkDate(i.date, i.now, i.window) }),
  nonce_time: (i) => ({ time: hc.checkNonceTime(hex(i.n0), i.now, i.window) }),
  stream_seal: (i, o) => {
    const { sealer, prefix } = makeSealer(i);
    const parts = [...prefix];
    for (const r of i.records) parts.push(sealer.seal(hex(r.plaintext), r.final, r.clear));
    const body = hc.concat(...parts);
    if (o) {
      // and open it again, whole
      const opener = makeOpener({ ...i, max_record: undefined });
      const expected = hc.concat(...i.records.map((r) => hex(r.plaintext)));
      assert.equal(toHex(openWith(opener, [body])), toHex(expected));
    }
    return { body: toHex(body) };
  },
  stream_open: (i, o) => {
    const plaintext = sameForEverySplit(hex(i.body), (chunks) => toHex(openWith(makeOpener(i), chunks)));
    return o ? { plaintext } : {};
  },
  exchange: (i) => {
    const { cert, cfg } = serverConfig(i);
    const mount = cfg.mount;
    const cred = i.client_secret
      ? { kind: 'key', secret: hex(i.client_secret) }
      : { kind: 'ticket', ticket: hex(i.ticket), sessionKey: hex(i.ticket_session_key) };
    // client: prepare (the profile follows the certificate's version, as hcFetch does), seal, encode
    const profile = profileOf(i);
    assert.equal(hc.certVersion(cert) === 2 ? 2 : 1, profile, 'the certificate announces the profile');
    if (profile === 2) assert.ok(i.name_pad.length <= hc.COMPACT_MAX_PAD && i.value_pad.length <= hc.COMPACT_MAX_PAD, 'profile-2 pads are 0-7');
    const p = hc.prepareRequest(cert.kexPublic, cred, hex(i.n0), i.name_pad, i.value_pad, profile === 2 ? { profile: 2, host: i.host } : { profile: 1 });
    const stream = hc.sealMessage(p, hex(i.inner_request), i.record_size);
    const outer = hc.encodeOuterRequest(p, i.form, mount, i.host, stream);
    // server: parse, accept, open, check the inner request
    const srv = serverOpen(cfg, outer, i.now);
    assert.equal(srv.accepted.profile, profile);
    assert.equal(toHex(hc.concat(hc.formatRequestHead(srv.head), srv.body)), i.inner_request);
    assert.equal(toHex(srv.accepted.sessionKey), toHex(p.sessionKey));
    const responseNonce = profile === 2 ? hex(i.response_random) : hex(i.response_n0);
    const responseBody = hc.server.sealResponse(srv.accepted, responseNonce, hex(i.inner_response), i.response_record_size);
    // client: open the response
    const back = hc.openResponse(p, responseBody);
    assert.equal(toHex(hc.concat(hc.formatResponseHead(back.head), back.body)), i.inner_response);
    return { cert_text: hc.certToText(cert), session_key: toHex(p.sessionKey), cookie: p.cookie, outer_request: toHex(outer), response_body: toHex(responseBody) };
  },
  server_request: (i) => {
    const { cfg } = serverConfig(i);
    const srv = serverOpen(cfg, hex(i.outer_request), i.now);
    return { method: srv.head.method, target: srv.head.target, body: toHex(srv.body) };
  },
  service_request: (i) => {
    const { cfg } = serverConfig(i);
    const sr = hc.server.serviceRequest(cfg, hex(i.outer_request), i.now, i.authority ?? null, i.pass_outer ?? []);
    return { method: sr.head.method, target: sr.head.target, fields: sr.head.fields, outer_fields: sr.outerFields, body: toHex(sr.body) };
  },
  cert: (i) => {
    const seed = hex(i.identity_seed);
    const c = hc.signCert(seed, i.serial, i.not_before, i.not_after, hex(i.kex_public), i.version ?? 1);
    const idPub = hc.ed25519Public(seed);
    return {
      cert: toHex(hc.encodeCert(c)),
      text: hc.certToText(c),
      kid: toHex(hc.certKid(c)),
      signer: toHex(c.signer),
      identity_public: toHex(idPub),
      aaaa: hc.formatAaaa(c).map(toHex),
      identity_txt: hc.formatIdentityTxt(idPub),
    };
  },
  cert_verify: (i) => {
    const c = hc.certFromText(i.text);
    hc.verifyCert(c, hex(i.identity_public));
    const { serial, not_before, not_after, kex_public } = certJson(c);
    return { version: hc.certVersion(c), serial, not_before, not_after, kex_public };
  },
  cert_choose: (i, o) => {
    const c = hc.chooseCert(i.lines.map(hc.certFromText), i.now, i.identity_public ? hex(i.identity_public) : undefined);
    const out = { serial: c.serial };
    if (o && 'not_before' in o) out.not_before = c.notBefore;
    return out;
  },
  cert_list: (i) => ({ serials: hc.parseCertList(new TextEncoder().encode(i.body)).map((c) => c.serial) }),
  aaaa: (i) => ({ cert: toHex(hc.encodeCert(hc.parseAaaa(i.addrs.map(hex)))) }),
  identity_txt: (i) => ({ identity_public: toHex(hc.parseIdentityTxt(i.text)) }),
  txt: (i) => ({ cert: toHex(hc.encodeCert(hc.parseTxt(i.strings.map(hex)))) }),
  tlsa: (i) => {
    const seed = hex(i.identity_seed);
    const der = hc.encodeTlsaCert(seed, i.serial, i.not_before, i.not_after, hex(i.kex_public));
    // it must read back and verify
    const back = hc.readTlsa(3, 0, 0, der, hc.ed25519Public(seed));
    assert.deepEqual(back, { serial: i.serial, notBefore: i.not_before, notAfter: i.not_after, kexPublic: hex(i.kex_public) });
    return { der: toHex(der), rdata: `3 0 0 ${toHex(der).toUpperCase()}` };
  },
  tlsa_read: (i) => {
    const k = hc.readTlsa(i.usage, i.selector, i.matching, hex(i.data), i.identity_public ? hex(i.identity_public) : undefined);
    return { serial: k.serial, not_before: k.notBefore, not_after: k.notAfter, kex_public: toHex(k.kexPublic) };
  },
  ticket_seal: (i) => {
    const tid = hex(i.ticket_key.tid);
    const t = hc.sealTicket(tid, hex(i.ticket_key.key), { sessionKey: hex(i.session_key), kid: hex(i.kid), expiry: i.expiry }, hex(i.n));
    const cookie = hc.formatCookie(hc.ticketId(t), hc.ticketSealed(t), i.name_pad, i.value_pad);
    return { ticket: toHex(t), field: hc.formatTicketField(t), cookie };
  },
  ticket_open: (i) => {
    const c = hc.openTicket(hex(i.ticket_key.tid), hex(i.ticket_key.key), hex(i.sealed), i.now);
    return { session_key: toHex(c.sessionKey), kid: toHex(c.kid), expiry: c.expiry };
  },
  ticket_field: (i) => ({ ticket: toHex(hc.parseTicketField(i.field)) }),
  token: (i) => {
    const cr = hex(i.client_random);
    return { client_random_field: hc.formatClientRandom(cr), random_field: hc.formatRandom(hex(i.token_secret), hex(i.session_key), cr) };
  },
  rspamd_base32: (i) => ({ text: hc.rspamd.rspamdBase32Encode(hex(i.hex)) }),
  rspamd_base32_decode: (i) => ({ hex: toHex(hc.rspamd.rspamdBase32Decode(i.text)) }),
  rspamd_key_id: (i) => {
    const { id, shortId } = hc.rspamd.rspamdKeyId(hc.rspamd.rspamdDecodeKey(i.pubkey));
    return { id: hc.rspamd.rspamdBase32Encode(id), short_id: hc.rspamd.rspamdBase32Encode(shortId) };
  },
  rspamd_key_header: (i) => {
    const h = hc.rspamd.parseRspamdKeyHeader(i.value);
    return h.encrypted ? { encrypted: true, short_id: toHex(h.shortId), client_public: toHex(h.clientPublic) } : { encrypted: false };
  },
  rspamd_keypair: (i) => ({ pubkey: hc.rspamd.rspamdBase32Encode(hc.rspamd.parseRspamdKeypair(i.text).publicKey) }),
  rspamd_exchange: (i) => {
    const server = hc.rspamd.parseRspamdKeypair(i.server_keypair);
    const clientSecret = hex(i.client_secret);
    const nm = hc.rspamd.rspamdNm(clientSecret, server.publicKey);
    const keyHeader = hc.rspamd.formatRspamdKeyHeader(hc.rspamd.rspamdKeyId(server.publicKey).shortId, hc.x25519Public(clientSecret));
    const body = hc.rspamd.rspamdSeal(nm, hex(i.nonce), hex(i.inner_request));
    const outerRequest = hc.rspamd.formatRspamdRequest(i.host, keyHeader, body);
    // the server side: parse the Key header, derive nm, open
    const h = hc.rspamd.parseRspamdKeyHeader(keyHeader);
    const serverNm = hc.rspamd.rspamdNm(server.secret, h.clientPublic);
    assert.equal(toHex(hc.rspamd.rspamdOpen(serverNm, body)), i.inner_request);
    const rspBody = hc.rspamd.rspamdSeal(serverNm, hex(i.response_nonce), hex(i.inner_response));
    assert.equal(toHex(hc.rspamd.rspamdOpen(nm, rspBody)), i.inner_response);
    return { key_header: keyHeader, outer_request: toHex(outerRequest), outer_response: toHex(hc.rspamd.formatRspamdResponse(rspBody)) };
  },
  rspamd_open: (i) => {
    const server = hc.rspamd.parseRspamdKeypair(i.keypair);
    const h = hc.rspamd.parseRspamdKeyHeader(i.key_header);
    if (!h.encrypted) throw new hc.HttpCryptError('bad_key_header');
    const shortId = hc.rspamd.rspamdKeyId(server.publicKey).shortId;
    if (toHex(shortId) !== toHex(h.shortId)) throw new hc.HttpCryptError('unknown_key');
    return { inner: toHex(hc.rspamd.rspamdOpen(hc.rspamd.rspamdNm(server.secret, h.clientPublic), hex(i.body))) };
  },
  admit_cookie: (i) => {
    const cookie = hc.admitCookie(hex(i.secret), i.step, i.difficulty, hc.addr16(i.addr));
    return { cookie: toHex(cookie), admit: hc.b64uEncode(cookie) };
  },
  admit_verify: (i) => {
    // As the server: the echo, this request's n0, the peer address, the current secret, the current step.
    const r = hc.verifyEcho(i.echo, hex(i.n0), hc.addr16(i.addr), [hex(i.secret)], i.step_now);
    // The client's side agrees: the solution it would send satisfies the same puzzle.
    const echo = hc.b64uDecode(i.echo);
    assert.equal(toHex(hc.puzzleHash(echo.subarray(0, 21), hex(i.n0), echo.subarray(21))), toHex(r.puzzleHash));
    return { difficulty: r.difficulty, puzzle_hash: toHex(r.puzzleHash) };
  },
  token_verify: (i) => ({ client_random: toHex(hc.verifyRandom(hex(i.token_secret), hex(i.session_key), i.random_field)) }),
};

const counts = { pass: 0, skip: 0 };
for (const v of vectors) {
  const skip = SKIP[v.kind];
  test(`${v.kind}: ${v.name}`, skip ? { skip } : {}, () => {
    checkVector(RUN, v);
    counts.pass++;
  });
}

test('every vector kind is either run or skipped with a reason', () => {
  const kinds = new Set(vectors.map((v) => v.kind));
  for (const k of kinds) assert.ok(RUN[k] || SKIP[k], `kind ${k} unhandled`);
  assert.ok(files.length >= 200, `expected at least 200 vector files, found ${files.length}`);
});
