// Shared pieces of the vector tests (vectors, hybrid-vectors,
// short-ticket-vectors): loading a directory of vectors, running one vector
// through its kind's runner, and checking that a corrupted copy fails.
// Not a test file itself.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import * as hc from '../dist/index.js';

/**
 * The vectors of $`envVar` when set, else of ../../../vectors/`sub` (relative
 * to this directory; `sub` may be ''): the *.json file names, sorted, and
 * each file parsed, in the same order.
 */
export function loadVectors(envVar, sub) {
  const dir = process.env[envVar]
    ? path.resolve(process.env[envVar])
    : path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../vectors', sub);
  const files = readdirSync(dir).filter((f) => f.endsWith('.json')).sort();
  const vectors = files.map((f) => JSON.parse(readFileSync(path.join(dir, f), 'utf8')));
  return { files, vectors };
}

/**
 * Runs one vector through `RUN[v.kind]`; throws (assertion or wrong code) when
 * the implementation disagrees with it. A positive case must produce every
 * output member; a negative one must throw an HttpCryptError with exactly
 * `v.expect` as its code.
 */
export function checkVector(RUN, v) {
  const run = RUN[v.kind];
  assert.ok(run, `no runner for kind ${v.kind}`);
  if (v.expect === 'ok') {
    const out = run(v.input, v.output);
    for (const [k, want] of Object.entries(v.output)) {
      assert.ok(k in out, `${v.name}: runner produced no ${k}`);
      assert.deepEqual(out[k], want, `${v.name}: output.${k}`);
    }
  } else {
    assert.throws(
      () => run(v.input, undefined),
      (e) => {
        assert.ok(e instanceof hc.HttpCryptError, `expected HttpCryptError, got ${e}`);
        assert.equal(e.code, v.expect, `${v.name}: code`);
        return true;
      },
    );
  }
}

/**
 * For the first vector of each kind, `corrupt(bad)` mutates a clone of it
 * (an output value, or the expected code); checking the clone must then
 * fail, so a runner that compares nothing cannot pass. Every kind of `RUN`
 * must have been tried.
 */
export function corruptedCopiesFail(vectors, RUN, corrupt) {
  const done = new Set();
  for (const v of vectors) {
    if (done.has(v.kind)) continue;
    const bad = structuredClone(v);
    corrupt(bad);
    assert.throws(() => checkVector(RUN, bad), undefined, `corrupted ${v.name} passed`);
    done.add(v.kind);
  }
  assert.equal(done.size, Object.keys(RUN).length);
}
