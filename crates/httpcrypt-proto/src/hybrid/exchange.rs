//! One hybrid request from each side (spec/hybrid.md H3), built on the v1
//! paths: the server's [`accept`] is v1's accept with the session key of
//! the hybrid agreement, and the client's [`HybridRequest`] seals and opens
//! v1 streams under it. Only the ciphertext in front of the stream is new.

use std::sync::Arc;

use rand_core::CryptoRngCore;

use crate::cert::KeyCert;
use crate::error::{Error, Result};
use crate::inner::{self, RequestHead, ResponseHead};
use crate::keys::{KexPublic, KexSecret, KeyId, SessionKey};
use crate::limits::Limits;
use crate::outer::{self, Credential, Form, IdKind, Mount, Route};
use crate::profile::Profile;
use crate::server::{self, Accept, Accepted, OuterRequest, ParsedOuter, ServerKeys};
use crate::stream::{self, Opener, Sealer};
use crate::suite::NONCE_LEN;
use crate::ticket::TicketKey;

use super::cert::HybridCert;
use super::{Encapsulation, KemPublic, KemSecret, CIPHERTEXT_LEN};

/// A suite-2 key the server holds: its kex secret, the ML-KEM key the
/// certificate names (shared with the other kex keys of its lifetime), the
/// certificate and its key ID.
pub struct HybridServerKey {
    kex: KexSecret,
    kem: Arc<KemSecret>,
    cert: HybridCert,
    kid: KeyId,
}

impl HybridServerKey {
    /// Pairs the keys with their certificate: `bad_certificate` unless the
    /// certificate names this kex key, `kem_mismatch` unless it names this
    /// ML-KEM key.
    pub fn new(kex: KexSecret, kem: Arc<KemSecret>, cert: HybridCert) -> Result<Self> {
        if cert.kex_public != *kex.public() {
            return Err(Error::BadCertificate);
        }
        kem.public().check(&cert)?;
        let kid = cert.kid();
        Ok(HybridServerKey {
            kex,
            kem,
            cert,
            kid,
        })
    }

    /// The agreement of spec/hybrid.md H1 with the client's `ct_x` (the
    /// cookie value) and `ct_m` (the first 1,088 bytes of the body or
    /// decoded query; fewer is `bad_ciphertext`).
    pub fn agree(&self, ct_x: &KexPublic, ct_m: &[u8]) -> Result<SessionKey> {
        super::decapsulate(&self.kex, &self.kem, ct_x, ct_m)
    }

    /// The certificate.
    pub fn cert(&self) -> &HybridCert {
        &self.cert
    }

    /// The suite-2 key ID.
    pub fn kid(&self) -> KeyId {
        self.kid
    }

    /// The ML-KEM key.
    pub fn kem(&self) -> &Arc<KemSecret> {
        &self.kem
    }

    /// The kex secret.
    pub fn kex(&self) -> &KexSecret {
        &self.kex
    }
}

impl core::fmt::Debug for HybridServerKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "HybridServerKey({:?})", self.kid)
    }
}

/// The suite-2 keys of a server, and the ticket keys of hybrid sessions.
///
/// Inside, each kex key is also entered in a v1 [`ServerKeys`] under its
/// suite-2 key ID, which is how [`accept`] reuses v1's checks (route,
/// `Host`, nonce, cookie, tickets) unchanged.
#[derive(Debug, Default)]
pub struct HybridKeys {
    table: ServerKeys,
    keys: Vec<HybridServerKey>,
}

impl HybridKeys {
    /// An empty key set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a suite-2 key.
    pub fn add_key(&mut self, key: HybridServerKey) {
        let c = &key.cert;
        // The table's copy of the secret is never used: the agreement runs
        // through `HybridServerKey::agree`. Its certificate gives expiry.
        let view = KeyCert {
            profile: c.profile,
            serial: c.serial,
            not_before: c.not_before,
            not_after: c.not_after,
            kex_public: c.kex_public,
            signer: c.signer,
            signature: c.signature,
        };
        self.table
            .add_key_as(key.kid, KexSecret::from_bytes(*key.kex.to_bytes()), view);
        self.keys.push(key);
    }

    /// Adds a ticket key valid through `expires` (unix seconds).
    pub fn add_ticket_key(&mut self, key: TicketKey, expires: u64) {
        self.table.add_ticket_key(key, expires);
    }

    /// Adds a ticket key valid through `expires` that came with the suite-2
    /// key `kid`: v1 tickets under its own ID, and short tickets
    /// (`httpcrypt.md` §7.3) under [`crate::ticket::suite2_tid`] of it, so
    /// that the suite-1 table, which holds the same key under its own ID,
    /// does not take them; they run under `kid`.
    pub fn add_ticket_key_for(&mut self, key: TicketKey, kid: KeyId, expires: u64) {
        let short = TicketKey::new(crate::ticket::suite2_tid(&key.tid()), *key.to_bytes());
        self.table.add_ticket_key(key, expires);
        self.table.add_ticket_key_for(short, kid, expires);
    }

    /// The unexpired ticket key that came with the suite-2 key `kid`.
    pub fn ticket_key_for(&self, kid: &KeyId, now: u64) -> Option<&TicketKey> {
        self.table.ticket_key_for(kid, now)
    }

    /// Drops (and so zeroizes) every key expired at `now`.
    pub fn remove_expired(&mut self, now: u64) {
        self.table.remove_expired(now);
        self.keys.retain(|k| now <= u64::from(k.cert.not_after));
    }

    /// The keys held.
    pub fn keys(&self) -> &[HybridServerKey] {
        &self.keys
    }

    /// The unexpired key with suite-2 ID `kid`.
    pub fn key(&self, kid: &KeyId, now: u64) -> Option<&HybridServerKey> {
        self.keys
            .iter()
            .find(|k| now <= u64::from(k.cert.not_after) && k.kid == *kid)
    }

    /// What `id` names at `now` (a suite-2 key or a ticket key).
    pub fn lookup(&self, id: &KeyId, now: u64) -> Option<IdKind> {
        self.table.lookup(id, now)
    }

    /// Certificates valid at `now`, newest serial first.
    pub fn certs(&self, now: u64) -> Vec<&HybridCert> {
        let mut v: Vec<&HybridCert> = self
            .keys
            .iter()
            .map(|k| &k.cert)
            .filter(|c| c.is_valid_at(now))
            .collect();
        v.sort_by_key(|c| std::cmp::Reverse((c.serial, c.not_before)));
        v
    }

    /// The `OPTIONS {mount}/pq` answer at `now` (spec/hybrid.md H4).
    pub fn cert_list(&self, now: u64) -> String {
        let certs: Vec<HybridCert> = self.certs(now).into_iter().cloned().collect();
        let kems: Vec<&KemPublic> = certs
            .iter()
            .filter_map(|c| {
                self.keys
                    .iter()
                    .find(|k| k.cert == *c)
                    .map(|k| k.kem.public())
            })
            .collect();
        super::cert::format_cert_list(&certs, &kems)
    }

    /// Whether `id` is the v1 key ID of a kex key held here, i.e. a
    /// classical request to a key that takes hybrid requests only.
    fn is_classical_kid(&self, id: &KeyId, now: u64) -> bool {
        self.keys
            .iter()
            .any(|k| now <= u64::from(k.cert.not_after) && k.cert.kex_public.kid() == *id)
    }
}

/// Judges a hybrid outer request (spec/hybrid.md H3) in v1's order (spec
/// §11), with the hybrid agreement in place of X25519: after the key ID is
/// found, the first 1,088 bytes of `body` (POST; the decoded query for GET)
/// are the ML-KEM ciphertext (`bad_ciphertext` when shorter), then the
/// agreement (`small_order`). A ticket of a hybrid session takes v1's
/// ticket path and carries no ciphertext. A fresh-key cookie naming the v1
/// key ID of a kex key held here is `hybrid_required`: these keys take
/// hybrid requests only.
///
/// `body` needs to hold only the ciphertext (the first [`CIPHERTEXT_LEN`]
/// bytes); [`stream_offset`] says where the sealed stream starts.
pub fn accept(
    keys: &HybridKeys,
    mount: &Mount,
    req: &OuterRequest<'_>,
    body: &[u8],
    limits: &Limits,
    now: u64,
) -> Result<Accept> {
    accept_with(keys, mount, req, body, limits, now, &mut server::Plain)
}

/// [`accept`] with the caller's gate and ticket opening: `outer`'s
/// [`server::Agreement::admit`] runs before the hybrid agreement (the
/// load-aware defence, spec §14) and its
/// [`server::Agreement::open_ticket`] opens tickets; its `cached` and
/// `agree` are not asked (hybrid sessions are not cached, spec/hybrid.md H3).
pub fn accept_with(
    keys: &HybridKeys,
    mount: &Mount,
    req: &OuterRequest<'_>,
    body: &[u8],
    limits: &Limits,
    now: u64,
    outer: &mut (impl server::Agreement + ?Sized),
) -> Result<Accept> {
    let query = match outer::route(req.method, req.target, mount) {
        Ok(Route::Get { query, .. }) => Some(query),
        _ => None,
    };
    let mut agreement = HybridAgreement {
        keys,
        query,
        body,
        now,
        outer,
    };
    let accepted = server::accept(&keys.table, mount, req, limits, now, &mut agreement);
    match accepted {
        Err(Error::UnknownKey) => {
            let classical = outer::scan_cookies(req.cookies.iter().copied(), |id| {
                keys.is_classical_kid(id, now).then_some(IdKind::Key)
            });
            match classical {
                Ok(Credential::Key { .. }) => Err(Error::HybridRequired),
                _ => Err(Error::UnknownKey),
            }
        }
        Ok(Accept::Request(mut a)) => {
            if let (Credential::Key { .. }, Some(q)) = (&a.credential, a.query_stream.as_mut()) {
                q.drain(..CIPHERTEXT_LEN);
            }
            Ok(Accept::Request(a))
        }
        other => other,
    }
}

/// The hybrid key agreement as v1's accept sees it: in place of the X25519,
/// the X-Wing decapsulation of the ciphertext that starts the body (POST) or
/// the decoded query (GET). No session cache: a hit would have to compare the
/// whole ciphertext (spec/hybrid.md H3); tickets serve instead.
struct HybridAgreement<'a, A: ?Sized> {
    keys: &'a HybridKeys,
    query: Option<&'a str>,
    body: &'a [u8],
    now: u64,
    outer: &'a mut A,
}

impl<A: server::Agreement + ?Sized> server::Agreement for HybridAgreement<'_, A> {
    fn admit(&mut self, req: &OuterRequest<'_>, n0: &[u8; NONCE_LEN]) -> Result<()> {
        self.outer.admit(req, n0)
    }

    fn open_ticket(
        &mut self,
        tk: &TicketKey,
        sealed: &[u8; crate::ticket::SEALED_TICKET_LEN],
        now: u64,
    ) -> Result<crate::ticket::TicketContents> {
        self.outer.open_ticket(tk, sealed, now)
    }

    fn short_key(
        &mut self,
        tk: &TicketKey,
        kid: &KeyId,
        h: &[u8; crate::ticket::SHORT_H_LEN],
    ) -> SessionKey {
        self.outer.short_key(tk, kid, h)
    }

    fn agree(&mut self, sk: &server::ServerKey, ct_x: &KexPublic) -> Result<SessionKey> {
        let hk = self.keys.key(&sk.kid, self.now).ok_or(Error::UnknownKey)?;
        match self.query {
            // The query passed v1's shape check, and its first 1,452
            // characters hold the ciphertext and one byte more.
            Some(q) => {
                let chars = crate::b64::encoded_len(CIPHERTEXT_LEN + 1) / 4 * 4;
                let prefix = q.get(..chars).unwrap_or(q);
                let prefix = crate::b64::decode(prefix.as_bytes()).map_err(|_| Error::BadQuery)?;
                hk.agree(ct_x, &prefix)
            }
            None => hk.agree(ct_x, self.body),
        }
    }
}

/// The outer problem document for `err` (`httpcrypt.md` §4.4) from a
/// server that takes suite 2: an `unknown_key` problem lists the v1
/// certificates in `certs` and the suite-2 certificate texts in the member
/// `hybrid_certs` (spec/hybrid.md H3), which v1 readers ignore.
pub fn format_problem(
    err: &Error,
    certs: &[String],
    hybrid_certs: &[String],
) -> Option<(u16, String)> {
    let (status, doc) = outer::format_problem(err, certs)?;
    if *err != Error::UnknownKey {
        return Some((status, doc));
    }
    let mut v: serde_json::Value = serde_json::from_str(&doc).ok()?;
    v["hybrid_certs"] = serde_json::json!(hybrid_certs);
    Some((status, v.to_string()))
}

/// Where the sealed stream starts in the POST body of an accepted hybrid
/// request: after the ciphertext for a fresh key, at once for a ticket
/// (and for GET, whose decoded query [`accept`] already trimmed).
pub fn stream_offset(accepted: &Accepted) -> usize {
    match (&accepted.credential, &accepted.query_stream) {
        (Credential::Key { .. }, None) => CIPHERTEXT_LEN,
        _ => 0,
    }
}

/// Opens a whole hybrid request stream and parses the inner request.
pub fn open_request(
    accepted: &Accepted,
    body: &[u8],
    limits: &Limits,
) -> Result<(RequestHead, Vec<u8>)> {
    let body = body.get(stream_offset(accepted)..).unwrap_or_default();
    server::open_request(accepted, body, limits)
}

/// The whole server side of one hybrid exchange held in memory: accept,
/// open, parse (`None`: not an HTTPCrypt request under the mount).
pub fn serve_bytes(
    keys: &HybridKeys,
    mount: &Mount,
    limits: &Limits,
    now: u64,
    outer_bytes: &[u8],
) -> Result<Option<(Accepted, RequestHead, Vec<u8>)>> {
    let o = ParsedOuter::parse(outer_bytes).ok_or(Error::Truncated)?;
    let view = o.as_request();
    match accept(keys, mount, &view, &o.body, limits, now)? {
        Accept::Request(a) => {
            let (head, body) = open_request(&a, &o.body, limits)?;
            Ok(Some((a, head, body)))
        }
        _ => Ok(None),
    }
}

/// The client's side of one hybrid request: the cookie naming the suite-2
/// key ID with `ct_X`, the ciphertext to send before the stream, and the
/// session key (v1 request profile; a ticket of a hybrid session goes
/// through [`crate::client::PreparedRequest`] as in v1).
#[derive(Debug)]
pub struct HybridRequest {
    n0: [u8; NONCE_LEN],
    cookie: String,
    encapsulation: Encapsulation,
}

impl HybridRequest {
    /// Encapsulates to `cert` and `ek` (`kem_mismatch` when they do not
    /// belong together) with the client key `client` and ML-KEM randomness
    /// from `rng`, and builds the cookie with the given pads.
    pub fn new(
        cert: &HybridCert,
        ek: &KemPublic,
        client: &KexSecret,
        rng: &mut impl CryptoRngCore,
        n0: [u8; NONCE_LEN],
        name_pad: &str,
        value_pad: &str,
    ) -> Result<Self> {
        let e = Encapsulation::new(cert, ek, client, rng)?;
        Self::from_encapsulation(cert, e, n0, name_pad, value_pad)
    }

    /// The request for an encapsulation made already (for test vectors:
    /// [`Encapsulation::from_parts`]).
    pub fn from_encapsulation(
        cert: &HybridCert,
        encapsulation: Encapsulation,
        n0: [u8; NONCE_LEN],
        name_pad: &str,
        value_pad: &str,
    ) -> Result<Self> {
        let cookie = outer::format_cookie(&cert.kid(), &encapsulation.ct_x.0, name_pad, value_pad)?;
        Ok(HybridRequest {
            n0,
            cookie,
            encapsulation,
        })
    }

    /// The request nonce.
    pub fn n0(&self) -> &[u8; NONCE_LEN] {
        &self.n0
    }

    /// The session key.
    pub fn session_key(&self) -> &SessionKey {
        self.encapsulation.session_key()
    }

    /// The `Cookie` field value.
    pub fn cookie(&self) -> &str {
        &self.cookie
    }

    /// The ML-KEM ciphertext that precedes the sealed stream.
    pub fn ciphertext(&self) -> &[u8; CIPHERTEXT_LEN] {
        &self.encapsulation.ct_m
    }

    /// A sealer for the request stream.
    pub fn sealer(&self) -> Sealer {
        Sealer::request(self.session_key(), self.n0)
    }

    /// An opener for the response body.
    pub fn response_opener(&self, limits: &Limits) -> Opener {
        Opener::response_for(
            self.session_key(),
            self.n0,
            Profile::V1,
            limits.record_limit(),
        )
    }

    /// The complete outer request: the body (POST) or the query (GET) is
    /// `ct_M || stream`.
    pub fn encode_outer(&self, form: Form, mount: &Mount, host: &str, stream: &[u8]) -> Vec<u8> {
        let mut payload = Vec::with_capacity(CIPHERTEXT_LEN + stream.len());
        payload.extend_from_slice(self.ciphertext());
        payload.extend_from_slice(stream);
        let mut out = Vec::with_capacity(512 + payload.len() * 2);
        match form {
            Form::Post => {
                outer::encode_request_head(
                    form,
                    &mount.nonce_path(&self.n0),
                    host,
                    &self.cookie,
                    payload.len(),
                    &mut out,
                );
                out.extend_from_slice(&payload);
            }
            Form::Get => outer::encode_request_head(
                form,
                &mount.get_target(&self.n0, &payload),
                host,
                &self.cookie,
                0,
                &mut out,
            ),
        }
        out
    }

    /// Whether the GET form's request line stays within its limit for a
    /// stream of `stream_len` bytes, the ciphertext counted (spec §4.1).
    pub fn fits_get_form(mount: &Mount, stream_len: usize) -> bool {
        crate::outer::fits_get_form(mount, CIPHERTEXT_LEN + stream_len)
    }

    /// Opens a whole response body and parses the inner response to a
    /// request with inner method `request_method`.
    pub fn open_response_to(
        &self,
        request_method: &str,
        body: &[u8],
        limits: &Limits,
    ) -> Result<(ResponseHead, Vec<u8>)> {
        let plaintext = stream::open_all(self.response_opener(limits), body)?;
        inner::decode_response(&plaintext, request_method, limits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::IdentityKey;

    /// A server reading a streamed body agrees on the key from the
    /// ciphertext alone, then opens the stream that follows it.
    #[test]
    fn accept_needs_only_the_ciphertext() {
        let kem = Arc::new(KemSecret::from_seed([1; 64]));
        let kex = KexSecret::from_bytes([2; 32]);
        let cert = HybridCert::sign(
            &IdentityKey::from_seed([3; 32]),
            Profile::V1,
            1,
            0,
            100,
            *kex.public(),
            kem.public().hash(),
        );
        let mut keys = HybridKeys::new();
        keys.add_key(HybridServerKey::new(kex, kem.clone(), cert.clone()).unwrap());
        let client = KexSecret::from_bytes([4; 32]);
        let (ct_m, ss_m) = kem.public().encapsulate_with(&[5; 32]);
        let e = Encapsulation::from_parts(&cert.kex_public, &client, ct_m, &ss_m).unwrap();
        let req = HybridRequest::from_encapsulation(&cert, e, [6; 24], "", "").unwrap();
        let mut sealed = Vec::new();
        stream::seal_all(req.sealer(), b"GET / HTTP/1.1\r\n\r\n", 100, &mut sealed).unwrap();
        let mount = Mount::new("").unwrap();
        let outer_bytes = req.encode_outer(Form::Post, &mount, "h", &sealed);
        let o = ParsedOuter::parse(&outer_bytes).unwrap();
        let limits = Limits::default();
        let prefix = &o.body[..CIPHERTEXT_LEN];
        let Ok(Accept::Request(a)) = accept(&keys, &mount, &o.as_request(), prefix, &limits, 50)
        else {
            panic!("accepted");
        };
        assert_eq!(a.session_key(), req.session_key());
        assert_eq!(stream_offset(&a), CIPHERTEXT_LEN);
        let (head, _) = open_request(&a, &o.body, &limits).unwrap();
        assert_eq!(head.target, "/");
        // One byte short of the ciphertext.
        assert_eq!(
            accept(&keys, &mount, &o.as_request(), &prefix[1..], &limits, 50).err(),
            Some(Error::BadCiphertext)
        );
        // The key expires with its certificate.
        assert_eq!(
            accept(&keys, &mount, &o.as_request(), prefix, &limits, 101).err(),
            Some(Error::UnknownKey)
        );
        keys.remove_expired(101);
        assert!(keys.keys().is_empty());
        assert!(!format!("{keys:?}").contains("0202"));
    }
}
