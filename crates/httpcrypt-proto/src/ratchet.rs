//! Fleet key ratchet (project addition, spec/httpcrypt.md §6.7): server
//! instances behind one name share a seed and derive each rotation epoch's
//! kex key and ticket key from it, then advance the seed with a one-way
//! function and forget the old one. Compromise of today's state reveals the
//! keys still in use (the last three epochs) but nothing older.
//!
//! ```text
//! seed_{e+1}   = SHA3-256("hc1-ratchet-next"   || seed_e)
//! kex_secret_e = SHA3-256("hc1-ratchet-kex"    || seed_e)
//! ticket_key_e = SHA3-256("hc1-ratchet-ticket" || seed_e)
//! tid_e        = SHA3-256("hc1-ratchet-tid"    || seed_e)[0..10]
//! epoch e covers [origin + e·R, origin + (e+1)·R); its certificate has
//! serial e, not_before = start − skew, not_after = start + 2R + skew.
//! ```
//! Ed25519 signatures are deterministic, so every instance holding the
//! identity key issues byte-identical certificates.

use zeroize::Zeroizing;

use crate::b64;
use crate::cert::KeyCert;
use crate::error::{Error, Result};
use crate::keys::{IdentityKey, KexSecret, KeyId, KID_LEN};
use crate::suite::sha3_256;
use crate::ticket::TicketKey;

/// How many epochs' keys are valid at once (the current one and two older).
pub const LIVE_EPOCHS: u64 = 3;

/// The shared, advancing state of a fleet.
pub struct Ratchet {
    origin: u64,
    period: u64,
    skew: u64,
    epoch: u64,
    seed: Zeroizing<[u8; 32]>,
}

impl core::fmt::Debug for Ratchet {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Ratchet")
            .field("origin", &self.origin)
            .field("period", &self.period)
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

/// The keys of one epoch.
#[derive(Debug)]
pub struct EpochKeys {
    /// The epoch number (also the certificate serial).
    pub epoch: u64,
    /// The kex key.
    pub secret: KexSecret,
    /// Its certificate.
    pub cert: KeyCert,
    /// The epoch's ticket key.
    pub ticket: TicketKey,
}

fn derive(label: &[u8], seed: &[u8; 32]) -> Zeroizing<[u8; 32]> {
    Zeroizing::new(sha3_256(&[label, seed]))
}

impl Ratchet {
    /// A ratchet at `epoch` with `seed`, for epochs of `period` seconds from `origin`.
    pub fn new(origin: u64, period: u64, skew: u64, epoch: u64, seed: [u8; 32]) -> Result<Self> {
        if period == 0 {
            return Err(Error::BadKeypair);
        }
        Ok(Ratchet {
            origin,
            period,
            skew,
            epoch,
            seed: Zeroizing::new(seed),
        })
    }

    /// The epoch the state is at.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The rotation period R.
    pub fn period(&self) -> u64 {
        self.period
    }

    /// The epoch containing `now`.
    pub fn epoch_at(&self, now: u64) -> u64 {
        now.saturating_sub(self.origin) / self.period
    }

    /// Start of epoch `e`.
    pub fn epoch_start(&self, e: u64) -> u64 {
        self.origin + e * self.period
    }

    fn keys(&self, identity: &IdentityKey) -> EpochKeys {
        let secret = KexSecret::from_bytes(*derive(b"hc1-ratchet-kex", &self.seed));
        let tid: [u8; KID_LEN] = derive(b"hc1-ratchet-tid", &self.seed)[..KID_LEN]
            .try_into()
            .expect("hash is longer than an ID");
        let ticket = TicketKey::new(KeyId(tid), *derive(b"hc1-ratchet-ticket", &self.seed));
        let start = self.epoch_start(self.epoch);
        let nb = start.saturating_sub(self.skew).min(u64::from(u32::MAX)) as u32;
        let na = (start + 2 * self.period + self.skew).min(u64::from(u32::MAX)) as u32;
        let serial = (self.epoch % (1 << 32)) as u32;
        let cert = KeyCert::sign(identity, serial, nb, na, *secret.public());
        EpochKeys {
            epoch: self.epoch,
            secret,
            cert,
            ticket,
        }
    }

    fn step(&mut self) {
        let next = derive(b"hc1-ratchet-next", &self.seed);
        *self.seed = *next;
        self.epoch += 1;
    }

    /// Advances to the epoch containing `now` (never backwards) and returns
    /// the keys of every live epoch passed or reached: at most the last
    /// [`LIVE_EPOCHS`], oldest first. Old seeds are overwritten as it goes.
    pub fn advance(&mut self, now: u64, identity: &IdentityKey) -> Vec<EpochKeys> {
        let target = self.epoch_at(now).max(self.epoch);
        let mut out = Vec::new();
        while self.epoch < target {
            if self.epoch + LIVE_EPOCHS > target {
                out.push(self.keys(identity));
            }
            self.step();
        }
        out.push(self.keys(identity));
        out
    }

    /// The state as text (`origin period skew epoch seed`), for the file an
    /// instance keeps; write it back after every advance.
    pub fn to_text(&self) -> Zeroizing<String> {
        Zeroizing::new(format!(
            "hc1-ratchet {} {} {} {} {}\n",
            self.origin,
            self.period,
            self.skew,
            self.epoch,
            b64::encode(&self.seed[..])
        ))
    }

    /// Parses [`Ratchet::to_text`].
    pub fn from_text(text: &str) -> Result<Self> {
        let mut it = text.split_whitespace();
        if it.next() != Some("hc1-ratchet") {
            return Err(Error::BadKeypair);
        }
        let mut num = || -> Result<u64> {
            it.next()
                .and_then(|v| v.parse().ok())
                .ok_or(Error::BadKeypair)
        };
        let (origin, period, skew, epoch) = (num()?, num()?, num()?, num()?);
        let seed = Zeroizing::new(b64::decode_array::<32>(
            it.next().ok_or(Error::BadKeypair)?.as_bytes(),
        )?);
        if it.next().is_some() {
            return Err(Error::BadKeypair);
        }
        Ratchet::new(origin, period, skew, epoch, *seed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instances_agree_and_old_seeds_are_gone() {
        let id = IdentityKey::from_seed([1; 32]);
        let mut a = Ratchet::new(1000, 60, 10, 0, [7; 32]).unwrap();
        let mut b = Ratchet::from_text(&a.to_text()).unwrap();
        let ka = a.advance(1000 + 60 * 5 + 3, &id);
        let kb = b.advance(1000 + 60 * 5 + 30, &id);
        assert_eq!(ka.len(), 3);
        assert_eq!(
            ka.iter().map(|k| k.epoch).collect::<Vec<_>>(),
            vec![3, 4, 5]
        );
        for (x, y) in ka.iter().zip(&kb) {
            assert_eq!(x.cert, y.cert, "identical certificates on every instance");
            assert_eq!(x.ticket.tid(), y.ticket.tid());
        }
        assert_eq!(ka[2].cert.not_before, 1000 + 300 - 10);
        assert_eq!(ka[2].cert.not_after, 1000 + 300 + 120 + 10);
        // Never backwards; a later instance that starts from today's state
        // cannot produce epoch 0's key.
        assert_eq!(a.advance(0, &id).last().map(|k| k.epoch), Some(5));
        let mut late = Ratchet::from_text(&a.to_text()).unwrap();
        let epoch0 = Ratchet::new(1000, 60, 10, 0, [7; 32])
            .unwrap()
            .advance(1000, &id);
        assert!(late
            .advance(1000, &id)
            .iter()
            .all(|k| k.cert != epoch0[0].cert));
        assert!(Ratchet::from_text("hc1-ratchet 1 0 1 1 AAAA").is_err());
    }
}
