//! The session cache and the ticket policy: a fresh-key request's session
//! key comes from the cache or one X25519 (behind the defence, spec §14);
//! an answer carries a ticket once per session and connection (spec §7,
//! D29).

use httpcrypt_proto::admission::{self, Verdict};
use httpcrypt_proto::cache::SessionCache;
use httpcrypt_proto::outer;
use httpcrypt_proto::server::{self as core, Accepted, Agreement, OuterRequest};
use httpcrypt_proto::ticket::{TicketContents, TicketKey, SEALED_TICKET_LEN};
use httpcrypt_proto::{KexPublic, SessionKey};

use super::shared::Shared;
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
        // 0 means "no ticket yet" in ConnState.
        self.session_id_key.hash(&[&kid.0, key.as_bytes()]).max(1)
    }

    /// The key of a short ticket (spec §7.3), from the server's memo of
    /// the keys it derived lately (D30): a client's connections after its
    /// first present the ticket without the SHA3-256.
    fn short_key(
        &self,
        tk: &TicketKey,
        kid: &httpcrypt_proto::KeyId,
        h: &[u8; httpcrypt_proto::ticket::SHORT_H_LEN],
    ) -> SessionKey {
        self.short_keys
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .short_key(tk, kid, h)
    }

    /// Runs `f` on the session cache with the client's public key of
    /// `accepted`, when there is a cache and the request came with a key
    /// (not a ticket).
    fn with_cache(&self, accepted: &Accepted, f: impl FnOnce(&mut SessionCache, &KexPublic)) {
        let (Some(cache), outer::Credential::Key { client_public, .. }) =
            (&self.cache, &accepted.credential)
        else {
            return;
        };
        f(
            &mut cache.lock().unwrap_or_else(|p| p.into_inner()),
            client_public,
        );
    }

    /// Notes in the session cache that a ticket under `tid` went out for the
    /// session of `accepted`, when its client sent its public key.
    pub(super) fn note_ticket(&self, accepted: &Accepted, tid: httpcrypt_proto::KeyId) {
        self.with_cache(accepted, |c, client| {
            c.note_ticket(&accepted.kid, client, tid);
        });
    }

    /// Puts the session of `accepted` in the session cache (spec §7.1, D31).
    /// The caller calls it once the request's inner head has opened under
    /// the session key, which only the holder of the client's private key
    /// can bring about, and not when the client declined (`Ticket: none`,
    /// §7.3: it sends nothing more under this session). Junk under random
    /// public keys and one-shot clients thus never push out the sessions of
    /// clients that come back.
    pub(super) fn cache_session(&self, accepted: &Accepted) {
        self.with_cache(accepted, |c, client| {
            c.insert(&accepted.kid, client, accepted.session_key().clone());
        });
    }

    /// The `not_after` of the unexpired key `kid` names: a kex key, or a
    /// suite-2 key (spec/hybrid.md H2).
    pub(super) fn key_not_after(&self, kid: &httpcrypt_proto::KeyId, now: u64) -> Option<u32> {
        self.keys
            .with(|k| k.key(kid, now).map(|sk| sk.cert.not_after))
            .or_else(|| self.hybrid_not_after(kid, now))
    }

    /// The `not_after` of the unexpired suite-2 key `kid`, when suite 2 is on.
    fn hybrid_not_after(&self, kid: &httpcrypt_proto::KeyId, now: u64) -> Option<u32> {
        if self.config.pq == super::config::Pq::Off {
            return None;
        }
        self.keys
            .with_hybrid(|h| h.key(kid, now).map(|hk| hk.cert().not_after))
    }

    /// Drops cached keys of expired kids (checked at most every few
    /// seconds), so a key's cache entries are zeroized with it (spec §6).
    ///
    /// Entries are made only under keys that are live then, so the cache
    /// can hold a dead kid's entries only once a key has left the ring or
    /// passed its `not_after` since the last purge; until then the purge
    /// skips its scan. The scan reads every entry of both generations (tens
    /// of thousands, over megabytes that have gone cold): done every few
    /// seconds regardless, it held the worker for 45–95 ms with a full cache
    /// on the benchmark machine.
    pub(super) fn purge_cache(&self, now: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let Some(cache) = &self.cache else { return };
        if now < self.purged.load(Relaxed) + 5 {
            return;
        }
        self.purged.store(now, Relaxed);
        let generation = self.keys.generation();
        let mut seen = self.purge_seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.generation == generation && now <= seen.live_until {
            return;
        }
        // The live kids, and when the first of them dies.
        let mut live = Vec::new();
        let mut live_until = u64::MAX;
        self.keys.with(|k| {
            for x in k.keys() {
                let not_after = u64::from(x.cert.not_after);
                if now <= not_after {
                    live.push(x.kid);
                    live_until = live_until.min(not_after);
                }
            }
        });
        cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .purge(|kid| live.contains(kid));
        *seen = super::shared::PurgeSeen {
            generation,
            live_until,
        };
    }
}

/// How the layer agrees on a request's session key (proto's
/// [`Agreement`]): the session cache first; on a miss the defence (spec
/// §14), then one X25519, whose key the cache keeps once the request has
/// proved it ([`Shared::cache_session`]). A ticket is opened
/// through its connection, which remembers the last one opened there
/// (spec §7.2, D29). What it met stays in its fields for the answer.
pub(super) struct LayerAgreement<'a> {
    pub(super) shared: &'a Shared,
    /// The request's extensions: its connection's state, and the peer's
    /// address for the defence, each looked up only when needed.
    pub(super) ext: &'a http::Extensions,
    /// What the session cache gave.
    pub(super) held: Held,
    /// The defence's verdict, when it refused the request.
    pub(super) refused: Option<Verdict>,
}

impl<'a> LayerAgreement<'a> {
    /// The state of the request's connection, when a listener recorded it.
    fn conn(&self) -> Option<&'a ConnState> {
        self.ext.get::<ConnState>()
    }
}

impl Agreement for LayerAgreement<'_> {
    /// On a hit, [`Held`] notes it and the ticket-key ID of the last ticket
    /// issued for the session ([`SessionCache::note_ticket`]).
    ///
    /// [`SessionCache::note_ticket`]: httpcrypt_proto::cache::SessionCache::note_ticket
    fn cached(&mut self, sk: &core::ServerKey, peer: &KexPublic) -> Option<SessionKey> {
        let hit = self
            .shared
            .cache
            .as_ref()?
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .lookup(&sk.kid, peer)?;
        self.held.ticket = hit.ticket;
        self.held.cached = true;
        crate::metrics::request(crate::metrics::Outcome::SessionCache);
        Some(hit.key)
    }

    fn admit(
        &mut self,
        req: &OuterRequest<'_>,
        n0: &[u8; 24],
    ) -> Result<(), httpcrypt_proto::Error> {
        let Some(defence) = &self.shared.defence else {
            return Ok(());
        };
        // The admission echo is looked for only when the defence judges.
        let echo = admission::find_echo(req.cookies.iter().copied());
        match defence.judge(crate::defence::peer_ip(self.ext), n0, echo) {
            Verdict::Admit => Ok(()),
            v => {
                self.refused = Some(v);
                Err(match v {
                    Verdict::Busy { .. } => httpcrypt_proto::Error::Busy,
                    _ => httpcrypt_proto::Error::AdmissionRequired,
                })
            }
        }
    }

    /// One X25519. Its key goes into the cache only once the request
    /// proves it ([`Shared::cache_session`]): anyone can send a public key,
    /// so a request whose stream does not open under the key must not take
    /// a returning client's place in the cache.
    fn agree(
        &mut self,
        sk: &core::ServerKey,
        peer: &KexPublic,
    ) -> Result<SessionKey, httpcrypt_proto::Error> {
        crate::metrics::key_agreement(crate::metrics::Suite::Classical);
        let k = sk.secret.session_key(peer)?;
        self.held.agreed = true;
        Ok(k)
    }

    fn open_ticket(
        &mut self,
        tk: &TicketKey,
        sealed: &[u8; SEALED_TICKET_LEN],
        now: u64,
    ) -> Result<TicketContents, httpcrypt_proto::Error> {
        match self.conn() {
            Some(c) => c.open_ticket(tk, sealed, now),
            None => tk.open(sealed, now),
        }
    }

    fn short_key(
        &mut self,
        tk: &TicketKey,
        kid: &httpcrypt_proto::KeyId,
        h: &[u8; httpcrypt_proto::ticket::SHORT_H_LEN],
    ) -> httpcrypt_proto::SessionKey {
        let shared = self.shared;
        match self.conn() {
            Some(c) => c.short_key(tk, kid, h, || shared.short_key(tk, kid, h)),
            None => shared.short_key(tk, kid, h),
        }
    }
}

/// What the session cache gave a fresh-key request.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Held {
    /// The ticket key of the last ticket issued for the session.
    pub(super) ticket: Option<httpcrypt_proto::KeyId>,
    /// The session key came from the cache (no X25519).
    pub(super) cached: bool,
    /// The session key came from an X25519 run for this request: not in the
    /// cache yet ([`Shared::cache_session`]).
    pub(super) agreed: bool,
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
        let expiry = match keys.key(&accepted.kid, now) {
            Some(sk) => sk.cert.not_after,
            None => shared.hybrid_not_after(&accepted.kid, now)?,
        };
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

/// A short ticket (spec §7.3) for a session under `accepted.kid`, sealed
/// under the ticket key that came with that kex key (suite 1 or 2); `None`
/// when no held ticket key came with it.
pub(super) fn issue_short_ticket(
    shared: &Shared,
    accepted: &Accepted,
    now: u64,
) -> Option<httpcrypt_proto::ticket::ShortTicket> {
    let h = short_h();
    let kid = accepted.kid;
    shared
        .keys
        .with(|keys| {
            keys.ticket_key_for(&kid, now)
                .map(|tk| tk.issue_short(&kid, h))
        })
        .or_else(|| {
            if shared.config.pq == super::config::Pq::Off {
                return None;
            }
            shared.keys.with_hybrid(|hk| {
                hk.ticket_key_for(&kid, now)
                    .map(|tk| tk.issue_short(&kid, h))
            })
        })
}

/// A fresh random `h` for a short ticket.
fn short_h() -> [u8; httpcrypt_proto::ticket::SHORT_H_LEN] {
    let mut h = [0u8; httpcrypt_proto::ticket::SHORT_H_LEN];
    crate::nonce::fill(&mut h);
    h
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use httpcrypt_proto::{KexPublic, KeyId, SessionKey};

    use crate::server::{HttpCryptLayer, ServerConfig};

    /// The purge drops the entries of kids that are not live, scans again
    /// only once a key has passed its `not_after` or left the ring, and
    /// then drops that key's entries.
    #[test]
    fn the_cache_purge_scans_only_when_a_key_can_have_died() {
        let dir = tempfile::tempdir().expect("a directory");
        let store = crate::keys::KeyStore::create(dir.path(), true).expect("a key store");
        let keys = crate::keys::start(store, Duration::from_secs(3600)).expect("keys");
        let (kid, not_after) = keys.with(|k| {
            let key = &k.keys()[0];
            (key.kid, u64::from(key.cert.not_after))
        });
        let layer = HttpCryptLayer::new(keys.clone(), ServerConfig::default());
        let shared = &layer.shared;
        let cache = shared.cache.as_ref().expect("a session cache");
        let len = || cache.lock().expect("the cache").len();
        let put = |kid: &KeyId, n: u8| {
            cache.lock().expect("the cache").insert(
                kid,
                &KexPublic([n; 32]),
                SessionKey::from_bytes([n; 32]),
            );
        };
        let dead = KeyId([0xdd; 10]);
        let now = not_after - 60;

        put(&kid, 1);
        put(&dead, 2);
        shared.purge_cache(now);
        assert_eq!(len(), 1, "the first purge scans");

        // A dead kid's entry cannot arise while the keys stay as they were
        // (one is put here by hand to see whether the purge scans): the
        // purge skips its scan.
        put(&dead, 3);
        shared.purge_cache(now + 10);
        assert_eq!(len(), 2, "nothing changed: no scan");

        // The live key passes its `not_after`: its entries go too.
        shared.purge_cache(not_after + 1);
        assert_eq!(len(), 0, "past not_after: scanned");

        // A key leaves the ring: the next purge scans.
        put(&dead, 4);
        shared.purge_cache(not_after + 10);
        assert_eq!(len(), 1, "the keys as the last scan saw them: no scan");
        keys.remove_expired(not_after + 100);
        shared.purge_cache(not_after + 20);
        assert_eq!(len(), 0, "a key removed: scanned");
    }
}
