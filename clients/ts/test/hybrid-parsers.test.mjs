// Property and fuzz tests of the suite-2 parsers (spec/hybrid.md H2, H4):
// round trips of random certificates, key texts, lists and AAAA sets; and
// mutated inputs (every truncation, flipped bytes, random garbage, a seeded
// generator so a failure repeats) must either parse or throw an
// HttpCryptError with a code of the spec, never anything else.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as hc from '../dist/index.js';

/** A seeded xorshift32 generator: failures reproduce. */
function rng(seed) {
  let x = seed >>> 0 || 1;
  const next = () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x;
  };
  return {
    int: (n) => next() % n,
    bytes: (n) => Uint8Array.from({ length: n }, () => next() & 0xff),
  };
}

const CODES = new Set(['bad_certificate', 'bad_base64', 'kem_mismatch', 'bad_record', 'bad_signature']);

/** `f(input)` returns or throws one of the parser codes. */
function total(f, input) {
  try {
    return { ok: f(input) };
  } catch (e) {
    assert.ok(e instanceof hc.HttpCryptError, `not an HttpCryptError: ${e?.stack ?? e}`);
    assert.ok(CODES.has(e.code), `unexpected code ${e.code}`);
    return { err: e.code };
  }
}

const identitySeed = rng(1).bytes(32);
const identity = hc.ed25519Public(identitySeed);
const kem = hc.kemKeyPair(rng(2).bytes(64));

function randomCert(r) {
  return hc.signHybridCert(identitySeed, r.int(2 ** 31), r.int(2 ** 31), r.int(2 ** 31), r.bytes(32), kem.ek, 1 + r.int(2));
}

test('round trips: certificate bytes, text and AAAA; key text; lists of both suites', () => {
  const r = rng(3);
  for (let n = 0; n < 20; n++) {
    const c = randomCert(r);
    const bytes = hc.encodeHybridCert(c);
    assert.equal(bytes.length, hc.HYBRID_CERT_LEN);
    assert.deepEqual(hc.decodeHybridCert(bytes), c);
    assert.deepEqual(hc.anyCertFromText(hc.hybridCertToText(c)), c);
    hc.verifyHybridCert(hc.anyCertFromText(hc.hybridCertToText(c)), identity);
    const addrs = hc.formatHybridAaaa(c);
    // any order
    for (let i = addrs.length - 1; i > 0; i--) {
      const j = r.int(i + 1);
      [addrs[i], addrs[j]] = [addrs[j], addrs[i]];
    }
    assert.deepEqual(hc.parseHybridAaaa(addrs), c);
    const v1 = hc.signCert(identitySeed, r.int(1000), 0, 10, r.bytes(32));
    const list = hc.parseHybridCertList(hc.formatHybridCertList([v1, c, c], [kem.ek, kem.ek]));
    assert.equal(list.certs.length, 3);
    assert.equal(list.kemKeys.length, 1, 'a key text appears once');
    assert.ok(!hc.isHybridCert(list.certs[0]) && hc.isHybridCert(list.certs[1]));
  }
  assert.deepEqual(hc.parseKemText(hc.formatKemText(kem.ek), hc.kemHash(kem.ek)), kem.ek);
});

test('every truncation and every single-byte flip of a suite-2 certificate is refused or fails verification', () => {
  const c = randomCert(rng(4));
  const bytes = hc.encodeHybridCert(c);
  for (let n = 0; n < bytes.length; n++) {
    const r = total(hc.decodeAnyCert, bytes.subarray(0, n));
    assert.equal(r.err, 'bad_certificate', `truncated at ${n}`);
  }
  assert.equal(total(hc.decodeAnyCert, hc.concat(bytes, new Uint8Array(1))).err, 'bad_certificate');
  for (let i = 0; i < bytes.length; i++) {
    const bad = bytes.slice();
    bad[i] ^= 1 << (i % 8);
    const r = total((b) => {
      const d = hc.decodeAnyCert(b);
      if (hc.isHybridCert(d)) hc.verifyHybridCert(d, identity);
      else hc.verifyCert(d, identity);
      return d;
    }, bad);
    assert.ok(r.err !== undefined, `a flip at byte ${i} still verified`);
  }
});

test('key texts: every truncation, flipped characters and a flipped key byte are refused with their code', () => {
  const text = hc.formatKemText(kem.ek);
  const hash = hc.kemHash(kem.ek);
  for (let n = 0; n < text.length; n += 7) {
    const r = total((t) => hc.parseKemText(t, hash), text.slice(0, n));
    assert.ok(r.err === 'bad_certificate' || r.err === 'bad_base64', `truncated at ${n}: ${JSON.stringify(r)}`);
  }
  const r = rng(5);
  for (let n = 0; n < 200; n++) {
    const i = 5 + r.int(text.length - 5);
    const ch = '!A_-z0 \u00e9'[r.int(8)];
    const res = total((t) => hc.parseKemText(t, hash), text.slice(0, i) + ch + text.slice(i + 1));
    if (res.ok) assert.equal(text[i], ch);
  }
  const other = kem.ek.slice();
  other[100] ^= 1;
  const res = total((t) => hc.parseKemText(t, hash), hc.formatKemText(other));
  assert.ok(res.err === 'kem_mismatch' || res.err === 'bad_certificate');
});

test('fuzz: random lists (mixtures of good lines, mutated lines, garbage) parse whole or throw a parser code', () => {
  const r = rng(6);
  const c = randomCert(r);
  const good = [hc.hybridCertToText(c), hc.formatKemText(kem.ek), hc.certToText(hc.signCert(identitySeed, 1, 0, 10, r.bytes(32))), ''];
  for (let n = 0; n < 300; n++) {
    const lines = Array.from({ length: 1 + r.int(5) }, () => {
      let l = good[r.int(good.length)];
      const what = r.int(4);
      if (what === 1 && l.length > 0) l = l.slice(0, r.int(l.length));
      else if (what === 2 && l.length > 0) {
        const i = r.int(l.length);
        l = l.slice(0, i) + String.fromCharCode(32 + r.int(95)) + l.slice(i + 1);
      } else if (what === 3) l = new TextDecoder().decode(r.bytes(r.int(60)));
      return l;
    });
    const body = lines.join(r.int(2) ? '\n' : '\r\n');
    const res = total(hc.parseHybridCertList, body);
    if (res.ok) assert.equal(res.ok.certs.length + res.ok.kemKeys.length, lines.filter((l) => l.length > 0).length, 'every line is an entry');
  }
  // bytes that are not UTF-8
  assert.equal(total(hc.parseHybridCertList, Uint8Array.of(0xff, 0x0a)).err, 'bad_certificate');
});

test('fuzz: AAAA sets (dropped, duplicated, altered addresses) reassemble exactly or are bad_record/bad_certificate', () => {
  const r = rng(7);
  const addrs = hc.formatHybridAaaa(randomCert(r));
  for (let n = 0; n < 300; n++) {
    const set = addrs.map((a) => a.slice());
    const what = r.int(4);
    if (what === 0) set.splice(r.int(set.length), 1);
    else if (what === 1) set.push(set[r.int(set.length)].slice());
    else if (what === 2) set[r.int(set.length)][r.int(2)] ^= 1 << r.int(8);
    else set[r.int(set.length)] = r.bytes(r.int(2) ? 16 : r.int(20));
    const res = total(hc.parseHybridAaaa, set);
    if (res.ok) assert.deepEqual(hc.formatHybridAaaa(res.ok).map(hc.toHex).sort(), set.map(hc.toHex).sort());
  }
});

test('DNS: the suite-2 TXT record and the key text TXT record (seven character-strings) round trip', () => {
  const c = randomCert(rng(8));
  const text = hc.utf8(hc.hybridCertToText(c));
  assert.deepEqual(hc.parseHybridTxt([text.subarray(0, 100), text.subarray(100)]), c);
  assert.equal(total(hc.parseHybridTxt, [hc.utf8(hc.certToText(hc.signCert(identitySeed, 1, 0, 10, rng(9).bytes(32))))]).err, 'bad_certificate');
  assert.equal(total(hc.parseHybridTxt, [Uint8Array.of(0xff)]).err, 'bad_record');
  const strings = hc.formatKemTxt(kem.ek);
  assert.equal(strings.length, 7);
  assert.ok(strings.every((x) => x.length <= 255));
  assert.deepEqual(hc.parseKemTxt(strings, hc.kemHash(kem.ek)), kem.ek);
  assert.equal(total((x) => hc.parseKemTxt(x, new Uint8Array(32)), strings).err, 'kem_mismatch');
  assert.equal(hc.hybridCertName('example.com.'), '_httpcrypt-pq.example.com');
  assert.equal(hc.kemName('example.com'), '_httpcrypt-kem.example.com');
});
