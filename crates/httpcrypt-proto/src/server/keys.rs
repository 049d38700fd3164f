//! The keys a server accepts: X25519 kex keys with their certificates, and
//! ticket keys with the kex key each came with (spec §7.2, §7.3).

use crate::cert::KeyCert;
use crate::error::{Error, Result};
use crate::keys::{KexSecret, KeyId, SessionKey};
use crate::outer::IdKind;
use crate::ticket::TicketKey;

/// A kex key the server holds, with its certificate.
#[derive(Debug)]
pub struct ServerKey {
    /// The X25519 secret.
    pub secret: KexSecret,
    /// Its certificate (validity decides expiry).
    pub cert: KeyCert,
    /// The key ID, computed once (it is looked up on every request).
    pub kid: KeyId,
}

/// The keys a server currently accepts: kex keys and ticket keys.
#[derive(Debug, Default)]
pub struct ServerKeys {
    keys: Vec<ServerKey>,
    tickets: Vec<TicketEntry>,
}

/// A ticket key, its expiry, and the kex key it came with (the one its
/// short tickets run under, spec §7.3), if known.
#[derive(Debug)]
struct TicketEntry {
    key: TicketKey,
    expires: u64,
    kid: Option<KeyId>,
}

impl ServerKeys {
    /// An empty key set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a kex key.
    pub fn add_key(&mut self, secret: KexSecret, cert: KeyCert) {
        let kid = cert.kid();
        self.keys.push(ServerKey { secret, cert, kid });
    }

    /// Adds a kex key under `kid` instead of its certificate's key ID: the
    /// suite-2 key ID (spec/hybrid.md H2), which names the kex key together
    /// with an ML-KEM key.
    pub fn add_key_as(&mut self, kid: KeyId, secret: KexSecret, cert: KeyCert) {
        self.keys.push(ServerKey { secret, cert, kid });
    }

    /// Adds a ticket key valid through `expires` (unix seconds).
    /// Such a key takes v1 tickets only: a short ticket (spec §7.3) needs
    /// the kex key the ticket key came with ([`ServerKeys::add_ticket_key_for`]).
    pub fn add_ticket_key(&mut self, key: TicketKey, expires: u64) {
        self.tickets.push(TicketEntry {
            key,
            expires,
            kid: None,
        });
    }

    /// Adds a ticket key valid through `expires` that came with the kex key
    /// `kid`: short tickets under it run under `kid` (spec §7.3).
    pub fn add_ticket_key_for(&mut self, key: TicketKey, kid: KeyId, expires: u64) {
        self.tickets.push(TicketEntry {
            key,
            expires,
            kid: Some(kid),
        });
    }

    /// Drops (and so zeroizes) every key expired at `now`.
    pub fn remove_expired(&mut self, now: u64) {
        self.keys.retain(|k| now <= u64::from(k.cert.not_after));
        self.tickets.retain(|t| now <= t.expires);
    }

    /// The kex keys held.
    pub fn keys(&self) -> &[ServerKey] {
        &self.keys
    }

    /// Certificates valid at `now`, newest serial first.
    pub fn certs(&self, now: u64) -> Vec<&KeyCert> {
        let mut v: Vec<&KeyCert> = self
            .keys
            .iter()
            .map(|k| &k.cert)
            .filter(|c| c.is_valid_at(now))
            .collect();
        v.sort_by_key(|c| std::cmp::Reverse((c.serial, c.not_before)));
        v
    }

    /// Text lines of the valid certificates (for `OPTIONS` and `unknown-key`).
    pub fn cert_lines(&self, now: u64) -> Vec<String> {
        self.certs(now).into_iter().map(KeyCert::to_text).collect()
    }

    /// The unexpired kex key with ID `kid`.
    pub fn key(&self, kid: &KeyId, now: u64) -> Option<&ServerKey> {
        self.keys
            .iter()
            .find(|k| now <= u64::from(k.cert.not_after) && k.kid == *kid)
    }

    /// The newest ticket key (for issuing), if any is unexpired.
    pub fn ticket_key(&self, now: u64) -> Option<&TicketKey> {
        self.tickets
            .iter()
            .rev()
            .find(|t| now <= t.expires)
            .map(|t| &t.key)
    }

    /// The unexpired ticket key that came with the kex key `kid`: the one
    /// short tickets of sessions under `kid` are issued under (spec §7.3).
    pub fn ticket_key_for(&self, kid: &KeyId, now: u64) -> Option<&TicketKey> {
        self.tickets
            .iter()
            .rev()
            .find(|t| now <= t.expires && t.kid == Some(*kid))
            .map(|t| &t.key)
    }

    fn ticket_entry(&self, tid: &KeyId, now: u64) -> Option<&TicketEntry> {
        self.tickets
            .iter()
            .find(|t| now <= t.expires && t.key.tid() == *tid)
    }

    pub(super) fn ticket_key_by_id(&self, tid: &KeyId, now: u64) -> Option<&TicketKey> {
        self.ticket_entry(tid, now).map(|t| &t.key)
    }

    /// The kex key ID and key `k'` of the short ticket `(tid, h)` at `now`
    /// (spec §7.3): the ticket key must be unexpired and have come with a
    /// kex key that is still held. Any failure is `unknown_key`.
    pub fn open_short_ticket(
        &self,
        tid: &KeyId,
        h: &[u8; crate::ticket::SHORT_H_LEN],
        now: u64,
    ) -> Result<(KeyId, SessionKey)> {
        let (kid, tk) = self.short_ticket_key(tid, now)?;
        Ok((kid, tk.short_key(&kid, h)))
    }

    /// The kex key ID and the ticket key of short tickets under `tid` at
    /// `now`, checked as [`ServerKeys::open_short_ticket`] checks them,
    /// without deriving a ticket's key.
    pub fn short_ticket_key(&self, tid: &KeyId, now: u64) -> Result<(KeyId, &TicketKey)> {
        let entry = self.ticket_entry(tid, now).ok_or(Error::UnknownKey)?;
        let kid = entry.kid.ok_or(Error::UnknownKey)?;
        if self.key(&kid, now).is_none() {
            return Err(Error::UnknownKey);
        }
        Ok((kid, &entry.key))
    }

    /// What `id` names at `now`.
    pub fn lookup(&self, id: &KeyId, now: u64) -> Option<IdKind> {
        if self.key(id, now).is_some() {
            Some(IdKind::Key)
        } else if self.ticket_key_by_id(id, now).is_some() {
            Some(IdKind::Ticket)
        } else {
            None
        }
    }
}
