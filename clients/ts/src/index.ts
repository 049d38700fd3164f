/**
 * @httpcrypt/client: the HTTPCrypt v1 client (and profile 2, spec §4.5) for browsers and Node 20.
 * `hcFetch`/`createClient` for applications; the protocol core (streams,
 * inner messages, certificates, tickets, DNS forms) for tools and tests.
 */
export * from './errors.js';
export * from './b64u.js';
export * from './suite.js';
export * from './compact.js';
export * from './stream.js';
export * from './inner.js';
export * from './date.js';
export * from './cert.js';
export * from './hybrid.js';
export * from './hybridcert.js';
export * from './dns.js';
export * from './ticket.js';
export { SHORT_TICKET_MAX_AGE, SHORT_TICKET_REUSE, type ShortPolicy } from './shortpolicy.js';
export * from './token.js';
export * from './outer.js';
export * from './exchange.js';
export * from './admission.js';
export * from './tlsa.js';
export * as server from './server.js';
export * from './client.js';
export * as rspamd from './rspamd.js';
