// Admission puzzle cost (spec §14.3): the time `solvePuzzle` takes for
// difficulty d (default 16)
// for N random nonces (mean, median, max), counting both wall-clock time and
// this process's CPU time (the machine is shared). `node bench/puzzle.mjs [d] [N]`
// (after `npm run build`).
import { admitCookie, addr16, leadingZeroBits, puzzleHash, randomBytes, solvePuzzle } from '../dist/index.js';

const d = Number(process.argv[2] ?? 16);
const n = Number(process.argv[3] ?? 20);
const cookie = admitCookie(randomBytes(32), 1, d, addr16('127.0.0.1'));

const wall = [];
const cpu = [];
let tries = 0;
for (let i = 0; i < n; i++) {
  const nonce = randomBytes(24);
  const w = performance.now();
  const c = process.cpuUsage();
  const s = await solvePuzzle(cookie, nonce, d);
  const cu = process.cpuUsage(c);
  wall.push(performance.now() - w);
  cpu.push((cu.user + cu.system) / 1000);
  if (leadingZeroBits(puzzleHash(cookie, nonce, s)) < d) throw new Error('bad solution');
  tries += Number(new DataView(s.buffer, s.byteOffset).getBigUint64(0)) + 1;
}
const stat = (a) => {
  const s = [...a].sort((x, y) => x - y);
  return `mean ${(a.reduce((x, y) => x + y, 0) / a.length).toFixed(0)} ms, median ${s[Math.floor(s.length / 2)].toFixed(0)} ms, max ${s[s.length - 1].toFixed(0)} ms`;
};
console.log(`node ${process.version}, ${process.arch}`);
const cpuTotal = cpu.reduce((x, y) => x + y, 0) / 1000;
console.log(`d = ${d}, ${n} nonces, ${(tries / n).toFixed(0)} hashes on average (expected ${2 ** d}), ${(tries / cpuTotal / 1000).toFixed(0)} k hashes per CPU second`);
console.log(`  wall: ${stat(wall)}`);
console.log(`  CPU:  ${stat(cpu)}`);
