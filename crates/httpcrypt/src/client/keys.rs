//! The keys of a server, as the [`Client`] finds them: cached while fresh,
//! else from the [`super::Discovery`] hook (DNS: TXT, AAAA, TLSA; ASAP),
//! else from `OPTIONS {mount}/` (spec §6), checked under the identity in
//! force in authenticated mode.

use http::header;
use http::{Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Empty};
use httpcrypt_proto::cert::{self, DiscoveredKey, KeyCert};
use httpcrypt_proto::client::{options_max_age, Pq, ServerKey, PROBLEM_LIMIT};
use httpcrypt_proto::IdentityPublic;

use super::discovery::KeySource;
use super::read::read_limited;
use super::Client;
use crate::clock::unix_now;
use crate::error::Error;

impl Client {
    /// The identity keys of `authority` must verify under, if any: the
    /// pinned one, else one discovery validated with DNSSEC.
    pub(super) fn identity_for(&self, authority: &str) -> Option<IdentityPublic> {
        self.config
            .identity
            .or_else(|| self.hosts.with(authority, |h| h.state.identity()))
    }

    /// Where the cached keys of `authority` came from.
    pub fn key_source(&self, authority: &str) -> Option<KeySource> {
        self.hosts.with(authority, |h| h.source)
    }

    /// The keys cached for `authority`.
    pub fn cached_keys(&self, authority: &str) -> Vec<DiscoveredKey> {
        self.hosts.with(authority, |h| h.state.keys().to_vec())
    }

    /// `hybrid_downgrade` when `authority` is pinned to suite 2 (or suite 2
    /// is required), so that v1 keys may not be looked for.
    fn allows_classical(&self, authority: &str) -> Result<(), Error> {
        let now = unix_now();
        let pq = self.config.pq;
        self.hosts
            .with(authority, |h| h.state.pq().allows_classical(pq, now))?;
        Ok(())
    }

    /// Finds the v1 keys of `authority`: the discovery hook first (DNS:
    /// TXT, AAAA, TLSA), then, unless turned off, `OPTIONS {mount}/`.
    /// Checks them in authenticated mode and caches them for the records'
    /// TTL or the `max-age`. `hybrid_downgrade` when the origin is pinned
    /// to suite 2 (spec/hybrid.md H5).
    pub async fn refresh_keys(
        &self,
        scheme: &str,
        authority: &str,
    ) -> Result<(Vec<DiscoveredKey>, KeySource), Error> {
        self.allows_classical(authority)?;
        let now = unix_now();
        if let Some(d) = &self.config.discovery {
            // The identity in force (pinned, or validated with DNSSEC on an
            // earlier lookup) binds this lookup too, also when its own
            // `_httpcrypt-id` query fails (spec §6.4).
            let identity = self.identity_for(authority);
            let why = match d.discover(authority, identity.as_ref()).await {
                Ok(found) => {
                    if let (None, Some(learnt)) = (identity, found.identity) {
                        self.hosts
                            .with(authority, |h| h.state.learn_identity(learnt));
                    }
                    // Keys checked under no identity do not count in
                    // authenticated mode, nor keys checked under another
                    // identity than the one in force.
                    let other =
                        identity.is_some() && found.identity.is_some_and(|f| identity != Some(f));
                    let trusted =
                        !other && (!self.config.require_identity || found.identity.is_some());
                    match (found.source, cert::choose_key(&found.keys, now)) {
                        (Some(source), Ok(_)) if trusted => {
                            self.hosts.with(authority, |h| {
                                h.state.set_keys(found.keys.clone(), now, found.ttl.max(1));
                                h.source = Some(source);
                            });
                            return Ok((found.keys, source));
                        }
                        _ => found.detail,
                    }
                }
                Err(e) => e.to_string(),
            };
            tracing::debug!(%authority, reason = %why, "DNS discovery found no usable key");
            if self.config.require_identity && self.identity_for(authority).is_none() {
                return Err(Error::NoIdentity(Some(why)));
            }
            if !self.config.options_fallback {
                return Err(Error::Dns(format!("{authority}: {why}")));
            }
        }
        if self.config.require_identity && self.identity_for(authority).is_none() {
            return Err(Error::NoIdentity(None));
        }
        let certs = self.refresh_certs(scheme, authority).await?;
        Ok((
            certs.iter().map(DiscoveredKey::from).collect(),
            KeySource::Options,
        ))
    }

    /// Fetches the certificates of `authority` by `OPTIONS {mount}/` only,
    /// checks them in authenticated mode (pinned or DNSSEC-learnt
    /// identity), and caches them. `hybrid_downgrade` when the origin is
    /// pinned to suite 2.
    pub async fn refresh_certs(
        &self,
        scheme: &str,
        authority: &str,
    ) -> Result<Vec<KeyCert>, Error> {
        self.allows_classical(authority)?;
        let now = unix_now();
        let uri: Uri = format!("{scheme}://{authority}{}", self.config.mount.options_path())
            .parse()
            .map_err(|e: http::uri::InvalidUri| Error::Config(e.to_string()))?;
        let req = Request::builder()
            .method(Method::OPTIONS)
            .uri(uri)
            .body(Empty::new().map_err(|never| match never {}).boxed_unsync())
            .map_err(|e| Error::Config(e.to_string()))?;
        let rsp = self.http.request(req).await?;
        if rsp.status() != StatusCode::OK {
            return Err(Error::Refused {
                status: rsp.status().as_u16(),
                type_uri: String::new(),
            });
        }
        let max_age = options_max_age(
            rsp.headers()
                .get(header::CACHE_CONTROL)
                .and_then(|v| v.to_str().ok()),
        );
        let body = read_limited(rsp.into_body(), PROBLEM_LIMIT).await?;
        let certs = cert::parse_cert_list(&body)?;
        let identity = self.identity_for(authority);
        if identity.is_none() && self.config.require_identity {
            return Err(Error::NoIdentity(None));
        }
        // `bad_signature` when valid certificates exist but none verifies.
        cert::choose(&certs, now, identity.as_ref())?;
        // Authenticated mode keeps only certificates the identity signed.
        let certs: Vec<KeyCert> = match &identity {
            Some(id) => certs.into_iter().filter(|c| c.verify(id).is_ok()).collect(),
            None => certs,
        };
        self.hosts.with(authority, |h| {
            h.state.set_keys(
                certs.iter().map(DiscoveredKey::from).collect(),
                now,
                max_age,
            );
            h.source = Some(KeySource::Options);
        });
        Ok(certs)
    }

    /// The key for the next request to `authority`: a held one while it
    /// settles the choice (proto's `HostState::next_key`), else one found
    /// afresh: suite 2 first when wanted, then v1 unless that is a
    /// downgrade.
    pub(super) async fn current_key(
        &self,
        scheme: &str,
        authority: &str,
    ) -> Result<ServerKey, Error> {
        let now = unix_now();
        let pq = self.config.pq;
        if let Some(k) = self.hosts.with(authority, |h| h.state.next_key(pq, now)) {
            return Ok(k);
        }
        if pq != Pq::Off {
            if let Some(k) = self.refresh_pq(scheme, authority).await? {
                return Ok(ServerKey::Hybrid(k));
            }
        }
        let (keys, _) = self.refresh_keys(scheme, authority).await?;
        Ok(ServerKey::Classical(*cert::choose_key(&keys, now)?))
    }
}
