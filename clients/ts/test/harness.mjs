// Live-test harness: the httpcrypt binary, processes started and stopped by
// PID, waits bounded in time, loopback only.
import { spawn, execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const here = path.dirname(fileURLToPath(import.meta.url));
export const pkgDir = path.resolve(here, '..');
export const repoRoot = path.resolve(pkgDir, '../..');

/** The server binary: $HTTPCRYPT_BIN, else target/release, else target/debug. Throws (never skips) if none. */
export function httpcryptBin() {
  const candidates = process.env.HTTPCRYPT_BIN
    ? [process.env.HTTPCRYPT_BIN]
    : [path.join(repoRoot, 'target/release/httpcrypt'), path.join(repoRoot, 'target/debug/httpcrypt')];
  const found = candidates.find((p) => existsSync(p));
  if (!found) {
    throw new Error(
      `live tests need the httpcrypt server binary; none of ${candidates.join(', ')} exists. ` +
        'Build it (cargo build --release -p httpcrypt-cli) or set HTTPCRYPT_BIN.',
    );
  }
  return found;
}

export function tempDir(prefix) {
  return mkdtempSync(path.join(tmpdir(), prefix));
}

/** `httpcrypt keygen --dir D`; returns the identity (base64url). */
export function keygen(dir) {
  const out = execFileSync(httpcryptBin(), ['keygen', '--dir', dir], { encoding: 'utf8', timeout: 30_000 });
  const id = out.trim().split(/\s+/).pop();
  if (!/^[A-Za-z0-9_-]{43}$/.test(id)) throw new Error(`keygen printed no identity: ${out}`);
  return id;
}

/**
 * Starts a process and waits (at most `timeoutMs`) for a stdout/stderr line
 * matching `ready`; resolves with `{ proc, match, log, stop }`.
 */
export function startProcess(cmd, args, ready, { cwd, timeoutMs = 20_000 } = {}) {
  const proc = spawn(cmd, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`${cmd} ${args.join(' ')} did not get ready in ${timeoutMs} ms:\n${log}`));
    }, timeoutMs);
    const onData = (d) => {
      if (log.length < 1 << 20) log += d.toString();
      const m = ready.exec(log);
      if (m) {
        clearTimeout(timer);
        proc.stdout.off('data', onData);
        proc.stderr.off('data', onData);
        proc.stdout.resume();
        proc.stderr.resume();
        resolve({
          proc,
          match: m,
          log: () => log,
          stop: () => stopProcess(proc),
        });
      }
    };
    proc.stdout.on('data', onData);
    proc.stderr.on('data', onData);
    proc.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${cmd} exited (${code}) before it was ready:\n${log}`));
    });
  });
}

/** SIGTERM by PID, SIGKILL after 3 s. */
export function stopProcess(proc) {
  if (proc.exitCode !== null || proc.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const t = setTimeout(() => proc.kill('SIGKILL'), 3000);
    proc.once('exit', () => {
      clearTimeout(t);
      resolve();
    });
    proc.kill('SIGTERM');
  });
}

const LISTENING = /listening on http:\/\/(127\.0\.0\.1:\d+)/;

/** `httpcrypt serve` on a free loopback port; `.addr` is `127.0.0.1:PORT`. */
export async function startServe({ keys, root, mount = '/hc', passThrough = false, extraArgs = [] }) {
  const args = ['serve', '--keys', keys, '--root', root, '--listen', '127.0.0.1:0', '--mount', mount, ...extraArgs];
  if (passThrough) args.push('--pass-through');
  const p = await startProcess(httpcryptBin(), args, LISTENING);
  return { ...p, addr: p.match[1] };
}

/** The plaintext upstream of the Rust tests; `.port`. */
export async function startUpstream() {
  const p = await startProcess('python3', ['crates/httpcrypt-cli/tests/upstream.py', '0'], /PORT (\d+)/, { cwd: repoRoot });
  return { ...p, port: Number(p.match[1]) };
}

/** `httpcrypt gateway` in front of `upstreamPort`. */
export async function startGateway({ keys, upstreamPort, mount = '/hc' }) {
  const args = ['gateway', '--keys', keys, '--upstream', `http://127.0.0.1:${upstreamPort}`, '--listen', '127.0.0.1:0', '--mount', mount];
  const p = await startProcess(httpcryptBin(), args, LISTENING);
  return { ...p, addr: p.match[1] };
}

export function cleanup(dir) {
  rmSync(dir, { recursive: true, force: true });
}
