//! The session cache and the ticket policy: a fresh-key request's session
//! key comes from the cache or one X25519 (behind the defence, spec §14);
//! an answer carries a ticket once per session and connection (spec §7,
//! D29).

use httpcrypt_proto::outer;
use httpcrypt_proto::server::{self as core, Accepted};
use httpcrypt_proto::ticket::TicketContents;

use super::Shared;
use crate::conn::ConnState;

impl Shared {
    /// A 64-bit name of the session `(kid, k)`, keyed with a secret random
    /// key: comparing names leaks nothing about `k`, and the chance that two
    /// sessions share one is 2^-64 (at worst an answer without a ticket).
    pub(super) fn session_id(
        &self,
        kid: &httpcrypt_proto::KeyId,
        key: &httpcrypt_proto::SessionKey,
    ) -> u64 {
        use std::hash::Hasher;
        let mut h = siphasher::sip::SipHasher13::new_with_keys(
            self.session_id_key.0,
            self.session_id_key.1,
        );
        h.write(&kid.0);
        h.write(key.as_bytes());
        // 0 means "no ticket yet" in ConnState.
        h.finish().max(1)
    }

    /// The session key for a fresh-key request: from the cache, or one X25519.
    /// On a cache hit `held` gets the ticket-key ID of the last ticket issued
    /// for the session ([`SessionCache::note_ticket`]).
    pub(super) fn derive(
        &self,
        sk: &core::ServerKey,
        peer: &httpcrypt_proto::KexPublic,
        held: &mut Held,
    ) -> Result<httpcrypt_proto::SessionKey, httpcrypt_proto::Error> {
        match self.cached(sk, peer, held) {
            Some(k) => Ok(k),
            None => self.agree(sk, peer),
        }
    }

    /// The cached key of the session `(sk.kid, peer)`, if any; `held` gets
    /// the ticket-key ID noted with it.
    pub(super) fn cached(
        &self,
        sk: &core::ServerKey,
        peer: &httpcrypt_proto::KexPublic,
        held: &mut Held,
    ) -> Option<httpcrypt_proto::SessionKey> {
        let hit = self
            .cache
            .as_ref()?
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .lookup(&sk.kid, peer)?;
        held.ticket = hit.ticket;
        held.cached = true;
        crate::metrics::request(crate::metrics::Outcome::SessionCache);
        Some(hit.key)
    }

    /// One X25519; its key goes into the cache, if there is one.
    pub(super) fn agree(
        &self,
        sk: &core::ServerKey,
        peer: &httpcrypt_proto::KexPublic,
    ) -> Result<httpcrypt_proto::SessionKey, httpcrypt_proto::Error> {
        crate::metrics::key_agreement();
        let k = sk.secret.session_key(peer)?;
        if let Some(cache) = &self.cache {
            cache
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(&sk.kid, peer, k.clone());
        }
        Ok(k)
    }

    /// [`Shared::derive`] behind the defence (spec §14): a cache hit goes
    /// through; a miss is judged first, and a refusal is left in `refused`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn derive_admitted(
        &self,
        sk: &core::ServerKey,
        peer: &httpcrypt_proto::KexPublic,
        n0: &[u8; 24],
        addr: std::net::IpAddr,
        cookies: &[&[u8]],
        refused: &mut Option<httpcrypt_proto::admission::Verdict>,
        held: &mut Held,
    ) -> Result<httpcrypt_proto::SessionKey, httpcrypt_proto::Error> {
        use httpcrypt_proto::admission::Verdict;
        let Some(defence) = &self.defence else {
            return self.derive(sk, peer, held);
        };
        if let Some(k) = self.cached(sk, peer, held) {
            return Ok(k);
        }
        // The admission echo is looked for only when the defence judges.
        let echo = httpcrypt_proto::admission::find_echo(cookies.iter().copied());
        match defence.judge(addr, n0, echo) {
            // The cache was asked just above: go straight to the X25519.
            Verdict::Admit => self.agree(sk, peer),
            v => {
                *refused = Some(v);
                Err(match v {
                    Verdict::Busy { .. } => httpcrypt_proto::Error::Busy,
                    _ => httpcrypt_proto::Error::AdmissionRequired,
                })
            }
        }
    }

    /// Notes in the session cache that a ticket under `tid` went out for the
    /// session of `accepted`, when its client sent its public key.
    pub(super) fn note_ticket(&self, accepted: &Accepted, tid: httpcrypt_proto::KeyId) {
        let (Some(cache), outer::Credential::Key { client_public, .. }) =
            (&self.cache, &accepted.credential)
        else {
            return;
        };
        cache.lock().unwrap_or_else(|p| p.into_inner()).note_ticket(
            &accepted.kid,
            client_public,
            tid,
        );
    }

    /// Drops cached keys of expired kids (at most every few seconds), so a
    /// key's cache entries are zeroized with it (spec §6).
    pub(super) fn purge_cache(&self, now: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let Some(cache) = &self.cache else { return };
        if now < self.purged.load(Relaxed) + 5 {
            return;
        }
        self.purged.store(now, Relaxed);
        let live: Vec<httpcrypt_proto::KeyId> = self.keys.with(|k| {
            k.keys()
                .iter()
                .filter(|x| now <= u64::from(x.cert.not_after))
                .map(|x| x.kid)
                .collect()
        });
        cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .purge(|kid| live.contains(kid));
    }
}

/// What the session cache gave a fresh-key request.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Held {
    /// The ticket key of the last ticket issued for the session.
    pub(super) ticket: Option<httpcrypt_proto::KeyId>,
    /// The session key came from the cache (no X25519).
    pub(super) cached: bool,
}

/// The ID of the ticket key new tickets are sealed under.
pub(super) fn current_tid(keys: &core::ServerKeys, now: u64) -> Option<httpcrypt_proto::KeyId> {
    keys.ticket_key(now).map(|t| t.tid())
}

/// A ticket for the session of `accepted`, and the ID of the ticket key that
/// sealed it.
pub(super) fn issue_ticket(
    shared: &Shared,
    accepted: &Accepted,
    now: u64,
) -> Option<(String, httpcrypt_proto::KeyId)> {
    shared.keys.with(|keys| {
        let tk = keys.ticket_key(now)?;
        let expiry = keys.key(&accepted.kid, now)?.cert.not_after;
        let n = crate::nonce::nonce24();
        let t = tk.seal(
            &TicketContents {
                key: accepted.session_key().clone(),
                kid: accepted.kid,
                expiry,
            },
            n,
        );
        Some((t.to_field(), tk.tid()))
    })
}

/// A ticket put in an answer (spec §7.2, D29).
pub(super) struct TicketOut {
    /// The ticket key that sealed it.
    pub(super) tid: httpcrypt_proto::KeyId,
    /// The connection and session it went out on.
    pub(super) conn: Option<(ConnState, u64)>,
}

impl TicketOut {
    /// Records, once the answer carrying it is made, that the ticket went
    /// out: on its connection, and in the session cache.
    pub(super) fn gone_out(&self, shared: &Shared, accepted: &Accepted) {
        if let Some((c, session)) = &self.conn {
            c.ticket_issued(*session);
        }
        shared.note_ticket(accepted, self.tid);
    }
}
