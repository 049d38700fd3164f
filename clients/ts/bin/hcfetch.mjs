#!/usr/bin/env node
// hcfetch: the interop driver of the TypeScript client.
//
//   hcfetch [--mount PATH] [--identity B64U] [--pq off|prefer|require] [--v1-tickets]
//           [-X METHOD] [-H 'Name: value']... [-d DATA | --data-file FILE] [--repeat N] URL
//
// Sends the request N times through one client; per request one stderr
// line `request I: status S, credential key|ticket|ticket (short)` (with
// `--pq prefer` or `require`, followed by `, suite 1|2`: spec/hybrid.md); the
// last body raw to stdout. The client asks for short tickets (spec §7.3)
// unless `--v1-tickets` is given. Exit 0 when every request got an
// authenticated inner response, 1 on any protocol error (`error: CODE` on
// stderr), 2 on bad usage.
import { createReadStream } from 'node:fs';
import { Readable } from 'node:stream';
import { createClient, exchangeInfo, HttpCryptError } from '../dist/index.js';

function usage(msg) {
  process.stderr.write(`hcfetch: ${msg}\nusage: hcfetch [--mount PATH] [--identity B64U] [--pq off|prefer|require] [--v1-tickets] [-X METHOD] [-H 'Name: value']... [-d DATA | --data-file FILE] [--repeat N] URL\n`);
  process.exit(2);
}

const args = process.argv.slice(2);
const opt = { headers: [], repeat: 1 };
for (let i = 0; i < args.length; i++) {
  let a = args[i];
  // "--name=value" as well as "--name value", so that a value that starts
  // with "-" (1 in 64 base64url keys) can be passed safely.
  let inline;
  if (a.startsWith('--') && a.includes('=')) {
    inline = a.slice(a.indexOf('=') + 1);
    a = a.slice(0, a.indexOf('='));
  }
  const next = () => (inline !== undefined ? inline : i + 1 < args.length ? args[++i] : usage(`${a} needs a value`));
  switch (a) {
    case '--mount': opt.mount = next(); break;
    case '--identity': opt.identity = next(); break;
    case '--pq':
      opt.pq = next();
      if (!['off', 'prefer', 'require'].includes(opt.pq)) usage('--pq takes off, prefer or require');
      break;
    case '--v1-tickets':
      if (inline !== undefined) usage('--v1-tickets takes no value');
      opt.v1Tickets = true;
      break;
    case '-X': case '--request': opt.method = next(); break;
    case '-H': case '--header': opt.headers.push(next()); break;
    case '-d': case '--data': opt.data = next(); break;
    case '--data-file': opt.dataFile = next(); break;
    case '--repeat': {
      opt.repeat = Number(next());
      if (!Number.isInteger(opt.repeat) || opt.repeat < 1) usage('--repeat takes a positive integer');
      break;
    }
    case '-h': case '--help': usage('help');
    // eslint-disable-next-line no-fallthrough
    default:
      if (a.startsWith('-')) usage(`unknown option ${a}`);
      if (opt.url) usage('only one URL');
      opt.url = a;
  }
}
if (!opt.url) usage('a URL is required');
if (opt.data !== undefined && opt.dataFile !== undefined) usage('-d and --data-file exclude each other');

const headers = new Headers();
for (const h of opt.headers) {
  const c = h.indexOf(':');
  if (c <= 0) usage(`bad header ${h}`);
  headers.append(h.slice(0, c).trim(), h.slice(c + 1).trim());
}
const hasBody = opt.data !== undefined || opt.dataFile !== undefined;
const method = (opt.method ?? (hasBody ? 'POST' : 'GET')).toUpperCase();

function errorCode(e) {
  if (e instanceof HttpCryptError) {
    if (e.code === 'refused' && e.problem?.type) return e.problem.type;
    return e.code;
  }
  return 'transport';
}

try {
  const client = createClient({
    ...(opt.mount !== undefined ? { mount: opt.mount } : {}),
    ...(opt.identity !== undefined ? { identity: opt.identity } : {}),
    ...(opt.pq !== undefined ? { pq: opt.pq } : {}),
    ...(opt.v1Tickets ? { shortTickets: false } : {}),
    // One request per process (no --repeat): a ticket could never be presented, so it declines one.
    oneShot: opt.repeat <= 1,
  });
  for (let i = 1; i <= opt.repeat; i++) {
    const init = { method, headers };
    if (opt.data !== undefined) init.body = new TextEncoder().encode(opt.data);
    else if (opt.dataFile !== undefined) init.body = Readable.toWeb(createReadStream(opt.dataFile));
    const rsp = await client.fetch(opt.url, init);
    const info = exchangeInfo(rsp);
    const suite = opt.pq !== undefined && opt.pq !== 'off' ? `, suite ${info?.suite ?? 1}` : '';
    const credential = info?.ticketForm === 'short' ? 'ticket (short)' : (info?.credential ?? 'key');
    process.stderr.write(`request ${i}: status ${rsp.status}, credential ${credential}${suite}\n`);
    if (i < opt.repeat) {
      await rsp.arrayBuffer(); // verified to the end
      continue;
    }
    if (rsp.body) {
      const reader = rsp.body.getReader();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        if (!process.stdout.write(value)) await new Promise((r) => process.stdout.once('drain', r));
      }
    }
  }
  process.exitCode = 0;
} catch (e) {
  process.stderr.write(`error: ${errorCode(e)}\n`);
  if (process.env.HCFETCH_DEBUG) process.stderr.write(`${e?.stack ?? e}\n`);
  process.exitCode = 1;
}
