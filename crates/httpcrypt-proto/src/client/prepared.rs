//! One exchange from the client's side: derive `k` from the credential,
//! build the cookie and path, seal the request, open the response
//! (spec §4, §7.2). A fresh hybrid request (spec/hybrid.md H3) is the same
//! exchange with the ML-KEM ciphertext in front of the stream.

use crate::cert::KeyCert;
use crate::error::Result;
use crate::hybrid::{HybridRequest, CIPHERTEXT_LEN};
use crate::inner::{self, RequestHead, ResponseHead};
use crate::keys::{KexPublic, KexSecret, SessionKey};
use crate::limits::Limits;
use crate::outer::{self, fits_get_form_for, Form, Mount};
use crate::profile::{self, Profile};
use crate::stream::{self, Opener, Sealer};
use crate::suite::NONCE_LEN;
use crate::ticket::{ShortTicket, Ticket};

/// What the client presents in its cookie.
#[derive(Debug, Clone, Copy)]
pub enum ClientCredential<'a> {
    /// Its X25519 key pair (fresh per request, or reused per host).
    Key(&'a KexSecret),
    /// A ticket from an earlier response, with the session key it carries.
    Ticket(&'a Ticket, &'a SessionKey),
    /// A short ticket (spec §7.3), which carries its own key.
    ShortTicket(&'a ShortTicket),
}

/// Bytes allowed for the record overhead when a client decides on the GET
/// form from the plaintext's length.
const GET_FORM_MARGIN: usize = 64;

/// Everything the client needs to send one request and open its response.
#[derive(Debug)]
pub struct PreparedRequest {
    n0: [u8; NONCE_LEN],
    key: SessionKey,
    cookie: String,
    profile: Profile,
    /// Profile 2: the outer `Host` as bound, `u16(len) || host`.
    bound_host: Vec<u8>,
    /// A fresh hybrid request's ML-KEM ciphertext, sent before the stream.
    ciphertext: Option<Box<[u8; CIPHERTEXT_LEN]>>,
}

impl From<HybridRequest> for PreparedRequest {
    /// A fresh hybrid request (v1 layout, spec/hybrid.md H3): the outer
    /// body or decoded query is `ct_M || stream`.
    fn from(h: HybridRequest) -> Self {
        PreparedRequest {
            n0: *h.n0(),
            key: h.session_key().clone(),
            cookie: h.cookie().to_string(),
            profile: Profile::V1,
            bound_host: Vec::new(),
            ciphertext: Some(Box::new(*h.ciphertext())),
        }
    }
}

impl PreparedRequest {
    /// Derives `k` against `cert`'s key (or takes it from the ticket) and
    /// builds the cookie with the given padding (0–16 base64url chars each).
    pub fn new(
        cert: &KeyCert,
        credential: ClientCredential<'_>,
        n0: [u8; NONCE_LEN],
        name_pad: &str,
        value_pad: &str,
    ) -> Result<Self> {
        Self::for_key(&cert.kex_public, credential, n0, name_pad, value_pad)
    }

    /// As [`PreparedRequest::new`], for a server key known without its
    /// 118-byte certificate (a TLSA-derived [`crate::DiscoveredKey`], spec §6.3).
    pub fn for_key(
        server: &KexPublic,
        credential: ClientCredential<'_>,
        n0: [u8; NONCE_LEN],
        name_pad: &str,
        value_pad: &str,
    ) -> Result<Self> {
        let (key, cookie) = match credential {
            ClientCredential::Key(secret) => {
                let key = secret.session_key(server)?;
                let cookie =
                    outer::format_cookie(&server.kid(), &secret.public().0, name_pad, value_pad)?;
                (key, cookie)
            }
            ClientCredential::Ticket(ticket, key) => {
                let cookie =
                    outer::format_cookie(&ticket.tid(), ticket.sealed(), name_pad, value_pad)?;
                (key.clone(), cookie)
            }
            ClientCredential::ShortTicket(ticket) => {
                let cookie = outer::format_cookie(&ticket.tid(), ticket.h(), name_pad, value_pad)?;
                (ticket.key().clone(), cookie)
            }
        };
        Ok(PreparedRequest {
            n0,
            key,
            cookie,
            profile: Profile::V1,
            bound_host: Vec::new(),
            ciphertext: None,
        })
    }

    /// Switches the request to profile 2 (spec §4.5), binding the outer
    /// `Host` value `host` that [`PreparedRequest::encode_outer`] (or the
    /// caller's HTTP stack) will send. The caller must have built `n0` with
    /// [`profile::compact_n0`] and the cookie with pads of at most 7
    /// characters. `bad_host` above 65535 bytes.
    pub fn compact(mut self, host: &str) -> Result<Self> {
        self.bound_host = profile::bound_host(host.as_bytes())?;
        self.profile = Profile::Compact;
        Ok(self)
    }

    /// The request profile.
    pub fn profile(&self) -> Profile {
        self.profile
    }

    /// What precedes the sealed stream in the outer body or decoded query:
    /// a fresh hybrid request's ML-KEM ciphertext, else nothing.
    pub fn stream_prefix(&self) -> &[u8] {
        self.ciphertext.as_deref().map_or(&[], |c| &c[..])
    }

    /// Whether this is a fresh hybrid request (spec/hybrid.md H3).
    pub fn is_hybrid(&self) -> bool {
        self.ciphertext.is_some()
    }

    /// The request nonce.
    pub fn n0(&self) -> &[u8; NONCE_LEN] {
        &self.n0
    }

    /// The session key.
    pub fn session_key(&self) -> &SessionKey {
        &self.key
    }

    /// The `Cookie` field value.
    pub fn cookie(&self) -> &str {
        &self.cookie
    }

    /// A sealer for the request stream.
    pub fn sealer(&self) -> Sealer {
        match self.profile {
            Profile::V1 => Sealer::request(&self.key, self.n0),
            Profile::Compact => Sealer::request_prebound(&self.key, self.n0, &self.bound_host),
        }
    }

    /// An opener for the response body.
    pub fn response_opener(&self, limits: &Limits) -> Opener {
        Opener::response_for(&self.key, self.n0, self.profile, limits.record_limit())
    }

    /// The request target's path: `{mount}/{b64u(n0)}` (profile 2:
    /// `{mount}/2{b64u(n0)}`).
    pub fn nonce_path(&self, mount: &Mount) -> String {
        mount.nonce_path_for(self.profile, &self.n0)
    }

    /// Whether a request of `plaintext_len` bytes (inner head and body)
    /// goes in the GET form: sealed as one record, with room to spare, its
    /// request line stays within the limit.
    pub fn fits_get_form(&self, mount: &Mount, plaintext_len: usize) -> bool {
        let prefix = self.stream_prefix().len();
        plaintext_len < outer::GET_FORM_LIMIT
            && fits_get_form_for(
                self.profile,
                mount,
                prefix + plaintext_len + GET_FORM_MARGIN,
            )
    }

    /// The GET form's target for `stream` (after the
    /// [`PreparedRequest::stream_prefix`] in the query).
    pub fn get_target(&self, mount: &Mount, stream: &[u8]) -> String {
        match &self.ciphertext {
            None => mount.get_target_for(self.profile, &self.n0, stream),
            Some(ct) => {
                let payload = [&ct[..], stream].concat();
                mount.get_target_for(self.profile, &self.n0, &payload)
            }
        }
    }

    /// Seals a complete inner request as one stream.
    pub fn seal_message(
        &self,
        head: &RequestHead,
        body: &[u8],
        record_size: usize,
    ) -> Result<Vec<u8>> {
        let mut plaintext = Vec::with_capacity(256 + body.len());
        head.encode(&mut plaintext);
        plaintext.extend_from_slice(body);
        let mut out = Vec::with_capacity(plaintext.len() + 64);
        stream::seal_all(self.sealer(), &plaintext, record_size, &mut out)?;
        Ok(out)
    }

    /// The complete outer request (head and body) in the canonical layout.
    pub fn encode_outer(&self, form: Form, mount: &Mount, host: &str, stream: &[u8]) -> Vec<u8> {
        debug_assert!(
            self.profile == Profile::V1 || self.bound_host[2..] == *host.as_bytes(),
            "a profile-2 request must send the Host it bound"
        );
        let mut out = Vec::with_capacity(512 + stream.len() * 2);
        match form {
            Form::Post => {
                let prefix = self.stream_prefix();
                outer::encode_request_head(
                    form,
                    &self.nonce_path(mount),
                    host,
                    &self.cookie,
                    prefix.len() + stream.len(),
                    &mut out,
                );
                out.extend_from_slice(prefix);
                out.extend_from_slice(stream);
            }
            Form::Get => {
                outer::encode_request_head(
                    form,
                    &self.get_target(mount, stream),
                    host,
                    &self.cookie,
                    0,
                    &mut out,
                );
            }
        }
        out
    }

    /// Opens a whole response body and parses the inner response (to a
    /// request other than `HEAD`; see [`PreparedRequest::open_response_to`]).
    pub fn open_response(&self, body: &[u8], limits: &Limits) -> Result<(ResponseHead, Vec<u8>)> {
        self.open_response_to("GET", body, limits)
    }

    /// [`PreparedRequest::open_response`] of the answer to a request with
    /// inner method `request_method` (the answer to `HEAD` has no body,
    /// erratum E2).
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
    use std::sync::Arc;

    use super::*;
    use crate::hybrid::cert::HybridCert;
    use crate::hybrid::{exchange, Encapsulation, HybridKeys, HybridServerKey, KemSecret};
    use crate::inner::Field;
    use crate::keys::IdentityKey;

    const NOW: u64 = 1_700_000_000;

    fn server() -> (HybridKeys, HybridCert, KemSecret) {
        let id = IdentityKey::from_seed([1; 32]);
        let kex = KexSecret::from_bytes([2; 32]);
        let kem = KemSecret::from_seed([3; 64]);
        let cert = HybridCert::sign(
            &id,
            Profile::V1,
            1,
            (NOW - 60) as u32,
            (NOW + 3600) as u32,
            *kex.public(),
            kem.public().hash(),
        );
        let mut keys = HybridKeys::new();
        let kem2 = KemSecret::from_seed([3; 64]);
        keys.add_key(HybridServerKey::new(kex, Arc::new(kem2), cert.clone()).unwrap());
        (keys, cert, kem)
    }

    /// A hybrid request made through `PreparedRequest` opens at the
    /// proto-level hybrid server, in both forms.
    #[test]
    fn hybrid_requests_open_at_the_server() {
        let (keys, cert, kem) = server();
        let mount = Mount::default();
        let limits = Limits::default();
        for form in [Form::Post, Form::Get] {
            let client = KexSecret::from_bytes([4; 32]);
            let (ct_m, ss_m) = kem.public().encapsulate_with(&[5; 32]);
            let e = Encapsulation::from_parts(&cert.kex_public, &client, ct_m, &ss_m).unwrap();
            let h = HybridRequest::from_encapsulation(&cert, e, [6; NONCE_LEN], "", "").unwrap();
            let p = PreparedRequest::from(h);
            assert!(p.is_hybrid());
            assert_eq!(p.stream_prefix().len(), CIPHERTEXT_LEN);
            let mut head = RequestHead::new("GET", "/x");
            head.fields.push(Field::new("Host", "a.example"));
            head.fields
                .push(Field::new("Date", crate::replay::format_date(NOW).as_str()));
            let stream = p.seal_message(&head, b"", 4096).unwrap();
            let mut plain = Vec::new();
            head.encode(&mut plain);
            assert!(p.fits_get_form(&mount, plain.len()));
            let outer_bytes = p.encode_outer(form, &mount, "a.example", &stream);
            let (_, got, _) = exchange::serve_bytes(&keys, &mount, &limits, NOW, &outer_bytes)
                .unwrap()
                .unwrap();
            assert_eq!(got.target, "/x");
        }
    }

    #[test]
    fn a_ciphertext_leaves_less_room_for_the_get_form() {
        let (_, cert, kem) = server();
        let mount = Mount::default();
        let client = KexSecret::from_bytes([4; 32]);
        let v1 = PreparedRequest::new(
            &crate::cert::KeyCert {
                profile: Profile::V1,
                serial: 1,
                not_before: 0,
                not_after: u32::MAX,
                kex_public: cert.kex_public,
                signer: [0; 8],
                signature: [0; 64],
            },
            ClientCredential::Key(&client),
            [6; NONCE_LEN],
            "",
            "",
        )
        .unwrap();
        let e = Encapsulation::new(&cert, kem.public(), &client, &mut rand_core::OsRng).unwrap();
        let h = PreparedRequest::from(
            HybridRequest::from_encapsulation(&cert, e, [6; NONCE_LEN], "", "").unwrap(),
        );
        assert!(v1.fits_get_form(&mount, 400));
        assert!(!h.fits_get_form(&mount, 400));
        assert!(h.fits_get_form(&mount, 100));
        assert!(v1.stream_prefix().is_empty() && !v1.is_hybrid());
    }
}
