// Runs every vector of ../../vectors/hybrid/ (suite 2, spec/hybrid.md), or
// of $HTTPCRYPT_HYBRID_VECTORS when set; then checks that a deliberately
// corrupted copy of each kind fails, so a runner that compares nothing
// cannot pass. The X-Wing draft's vectors are also checked against noble's
// own X-Wing wrapper (which the protocol does not use: its key generation
// differs, spec/hybrid.md H1).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ml_kem768_x25519 } from '@noble/post-quantum/hybrid.js';
import * as hc from '../dist/index.js';
import { loadVectors, checkVector, corruptedCopiesFail } from './vector-runner.mjs';

const { fromHex: hex, toHex } = hc;
const { files, vectors } = loadVectors('HTTPCRYPT_HYBRID_VECTORS', 'hybrid');

/** The server of a case: only the suite-2 key (and the ticket key), as vectors/README.md says. */
function hybridServer(i) {
  const secret = hex(i.server_secret);
  const kem = hc.kemKeyPair(hex(i.kem_seed));
  const cert = hc.signHybridCert(hex(i.identity_seed), i.cert.serial, i.cert.not_before, i.cert.not_after, hc.x25519Public(secret), kem.ek, i.cert.version ?? 1);
  return {
    cert,
    ek: kem.ek,
    cfg: {
      keys: [],
      hybridKeys: [hc.server.serverHybridKey(secret, hex(i.kem_seed), cert)],
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

const RUN = {
  xwing: (i) => {
    const { kemSeed, x25519Secret } = hc.xwingExpandSeed(hex(i.seed));
    const kem = hc.kemKeyPair(kemSeed);
    const pkX = hc.x25519Public(x25519Secret);
    const pk = hc.concat(kem.ek, pkX);
    const eseed = hex(i.eseed);
    // deterministic encapsulation: eseed[..32] the ML-KEM randomness, eseed[32..] the ephemeral X25519 secret
    const enc = hc.kemEncapsulate(kem.ek, eseed.subarray(0, 32));
    const ctX = hc.x25519Public(eseed.subarray(32));
    const ssEnc = hc.xwingCombine(enc.ss, hc.x25519Shared(eseed.subarray(32), pkX), ctX, pkX);
    const ct = hc.concat(enc.ct, ctX);
    // decapsulation of the encapsulated ciphertext gives the same secret
    const ssDec = hc.xwingCombine(hc.kemDecapsulate(ct.subarray(0, 1088), kem.dk), hc.x25519Shared(x25519Secret, ct.subarray(1088)), ct.subarray(1088), pkX);
    assert.equal(toHex(ssDec), toHex(ssEnc), 'decapsulation agrees with encapsulation');
    return { pk: toHex(pk), ct: toHex(ct), ss: toHex(ssEnc) };
  },
  hybrid_cert: (i) => {
    const kem = hc.kemKeyPair(hex(i.kem_seed));
    const c = hc.signHybridCert(hex(i.identity_seed), i.serial, i.not_before, i.not_after, hex(i.kex_public), kem.ek, i.version ?? 1);
    return {
      cert: toHex(hc.encodeHybridCert(c)),
      text: hc.hybridCertToText(c),
      kid: toHex(hc.hybridCertKid(c)),
      kem_hash: toHex(c.kemHash),
      kem_text: hc.formatKemText(kem.ek),
      aaaa: hc.formatHybridAaaa(c).map(toHex),
    };
  },
  hybrid_cert_verify: (i) => {
    const c = hc.anyCertFromText(i.text);
    const id = hex(i.identity_public);
    if (!hc.isHybridCert(c)) {
      hc.verifyCert(c, id);
      throw new hc.HttpCryptError('bad_certificate', 'a suite-1 certificate is not a suite-2 one');
    }
    hc.verifyHybridCert(c, id);
    if (i.kem_text !== undefined) hc.parseKemText(i.kem_text, c.kemHash);
    return {
      version: c.version,
      serial: c.serial,
      not_before: c.notBefore,
      not_after: c.notAfter,
      kex_public: toHex(c.kexPublic),
      kem_hash: toHex(c.kemHash),
      kid: toHex(hc.hybridCertKid(c)),
    };
  },
  hybrid_aaaa: (i) => ({ cert: toHex(hc.encodeHybridCert(hc.parseHybridAaaa(i.addrs.map(hex)))) }),
  hybrid_cert_list: (i) => {
    const l = hc.parseHybridCertList(new TextEncoder().encode(i.body));
    return {
      certs: l.certs.map((c) => (hc.isHybridCert(c) ? { suite: 2, kid: toHex(hc.hybridCertKid(c)) } : { suite: 1, kid: toHex(hc.certKid(c)) })),
      kem_hashes: l.kemKeys.map((ek) => toHex(hc.kemHash(ek))),
    };
  },
  hybrid_exchange: (i) => {
    const { cert, ek, cfg } = hybridServer(i);
    const kid = hc.hybridCertKid(cert);
    let cred;
    if (i.client_secret) {
      const e = i.encapsulation;
      // this library encapsulates deterministically: check the given ct_m and ss_m against m
      const enc = hc.kemEncapsulate(ek, hex(e.m));
      assert.equal(toHex(enc.ct), e.ct_m, 'ct_m from m');
      assert.equal(toHex(enc.ss), e.ss_m, 'ss_m from m');
      cred = { kind: 'hybrid', secret: hex(i.client_secret), ek, kid, m: hex(e.m) };
    } else {
      cred = { kind: 'ticket', ticket: hex(i.ticket), sessionKey: hex(i.ticket_session_key) };
    }
    const p = hc.prepareRequest(cert.kexPublic, cred, hex(i.n0), i.name_pad, i.value_pad);
    const stream = hc.sealMessage(p, hex(i.inner_request), i.record_size);
    const outer = hc.encodeOuterRequest(p, i.form, cfg.mount, i.host, stream);
    // the server serves it as hybrid_server_request does
    const srv = serverOpen(cfg, outer, i.now);
    assert.equal(srv.accepted.suite, 2);
    assert.equal(toHex(srv.accepted.kid), toHex(kid));
    assert.equal(toHex(hc.concat(hc.formatRequestHead(srv.head), srv.body)), i.inner_request);
    assert.equal(toHex(srv.accepted.sessionKey), toHex(p.sessionKey));
    const responseBody = hc.server.sealResponse(srv.accepted, hex(i.response_n0), hex(i.inner_response), i.response_record_size);
    const back = hc.openResponse(p, responseBody);
    assert.equal(toHex(hc.concat(hc.formatResponseHead(back.head), back.body)), i.inner_response);
    return {
      cert_text: hc.hybridCertToText(cert),
      kem_text: hc.formatKemText(ek),
      kid: toHex(kid),
      session_key: toHex(p.sessionKey),
      cookie: p.cookie,
      outer_request: toHex(outer),
      response_body: toHex(responseBody),
    };
  },
  hybrid_server_request: (i) => {
    const { cfg } = hybridServer(i);
    const srv = serverOpen(cfg, hex(i.outer_request), i.now);
    return { method: srv.head.method, target: srv.head.target, body: toHex(srv.body) };
  },
};

for (const v of vectors) test(`${v.kind}: ${v.name}`, () => checkVector(RUN, v));

test('every kind of vectors/hybrid/ is run, and each kind is present', () => {
  const kinds = new Set(vectors.map((v) => v.kind));
  for (const k of kinds) assert.ok(RUN[k], `kind ${k} unhandled`);
  for (const k of Object.keys(RUN)) assert.ok(kinds.has(k), `no vector of kind ${k}`);
  assert.ok(files.length >= 40, `expected at least 40 hybrid vector files, found ${files.length}`);
});

/** Flips the last hex digit of a string (a hex output), or the last base64url character of a text. */
function flipText(s) {
  const last = s.at(-1);
  const swap = /[0-9a-f]/.test(last) ? (last === '0' ? '1' : '0') : last === 'A' ? 'B' : 'A';
  return s.slice(0, -1) + swap;
}

test('a corrupted copy of a vector of each kind fails', () => {
  corruptedCopiesFail(vectors, RUN, (bad) => {
    if (bad.expect === 'ok') {
      // corrupt the first output member
      const [k, want] = Object.entries(bad.output)[0];
      bad.output[k] = typeof want === 'string' ? flipText(want) : typeof want === 'number' ? want + 1 : Array.isArray(want) ? want.slice(1) : null;
    } else {
      bad.expect = bad.expect === 'integrity' ? 'truncated' : 'integrity';
    }
  });
});

test('xwing: our glue agrees with noble\'s X-Wing wrapper on the draft vectors', () => {
  for (const v of vectors.filter((x) => x.kind === 'xwing')) {
    const keys = ml_kem768_x25519.keygen(hex(v.input.seed));
    assert.equal(toHex(keys.publicKey), v.output.pk);
    assert.equal(toHex(ml_kem768_x25519.decapsulate(hex(v.output.ct), keys.secretKey)), v.output.ss);
  }
});
