//! Fleet key ratchet (project addition, spec/httpcrypt.md §6.7): server
//! instances behind one name share a seed and derive each rotation epoch's
//! kex key and ticket key from it, then advance the seed with a one-way
//! function and forget the old one. Compromise of today's state reveals the
//! keys still in use (the last three epochs) and every later epoch's until
//! the next reseed, but nothing older: a reseed scheduled for epoch `a`
//! mixes fresh randomness into the chain there, so a state stolen before
//! it says nothing about epoch `a` and later.
//!
//! ```text
//! seed_{e+1}   = SHA3-256("hc1-ratchet-next"   || seed_e)
//! seed_a       = SHA3-256("hc1-ratchet-reseed" || SHA3-256("hc1-ratchet-next" || seed_{a-1})
//!                         || fresh)              (a reseed announced for epoch a)
//! kex_secret_e = SHA3-256("hc1-ratchet-kex"    || seed_e)
//! ticket_key_e = SHA3-256("hc1-ratchet-ticket" || seed_e)
//! tid_e        = SHA3-256("hc1-ratchet-tid"    || seed_e)[0..10]
//! kem_seed_w   = SHA3-512("hc1-ratchet-kem"    || seed_w)   (hybrid suite, w = K·⌊e/K⌋)
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
    /// A reseed announced for a later epoch: (epoch, fresh randomness).
    reseed: Option<(u64, Zeroizing<[u8; 32]>)>,
}

impl core::fmt::Debug for Ratchet {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Ratchet")
            .field("origin", &self.origin)
            .field("period", &self.period)
            .field("epoch", &self.epoch)
            .field("reseed_at", &self.reseed.as_ref().map(|r| r.0))
            .finish_non_exhaustive()
    }
}

/// The ML-KEM seed of the window of epochs starting at the given one
/// (spec/hybrid.md H4).
pub type WindowKem = (u64, Zeroizing<[u8; 64]>);

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
    /// Refuses a period of zero and numbers whose epoch arithmetic could
    /// overflow (a period or skew above 2^32 − 1 s, an epoch start beyond
    /// 2^62 s): a state file is input, and must give an error, not a panic.
    pub fn new(origin: u64, period: u64, skew: u64, epoch: u64, seed: [u8; 32]) -> Result<Self> {
        let start = epoch
            .checked_mul(period)
            .and_then(|s| s.checked_add(origin));
        if period == 0
            || period > u64::from(u32::MAX)
            || skew > u64::from(u32::MAX)
            || start.is_none_or(|s| s > 1 << 62)
        {
            return Err(Error::BadKeypair);
        }
        Ok(Ratchet {
            origin,
            period,
            skew,
            epoch,
            seed: Zeroizing::new(seed),
            reseed: None,
        })
    }

    /// Announces a reseed: the seed of epoch `at` (and so every later key)
    /// also depends on `fresh`. `at` must be later than both the state's
    /// epoch and the epoch containing `now`, so that every instance that
    /// loads this state before `at` begins switches at the same boundary;
    /// only one reseed may be pending.
    pub fn schedule_reseed(&mut self, now: u64, at: u64, fresh: [u8; 32]) -> Result<()> {
        if at <= self.epoch.max(self.epoch_at(now)) || self.reseed.is_some() {
            return Err(Error::NotValid);
        }
        self.reseed = Some((at, Zeroizing::new(fresh)));
        Ok(())
    }

    /// The epoch of the pending reseed, if any.
    pub fn reseed_at(&self) -> Option<u64> {
        self.reseed.as_ref().map(|r| r.0)
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
        let mut next = derive(b"hc1-ratchet-next", &self.seed);
        self.epoch += 1;
        if self.reseed.as_ref().is_some_and(|r| r.0 == self.epoch) {
            if let Some((_, fresh)) = self.reseed.take() {
                next = Zeroizing::new(sha3_256(&[b"hc1-ratchet-reseed", &next[..], &fresh[..]]));
            }
        }
        *self.seed = *next;
    }

    /// `SHA3-512("hc1-ratchet-kem" || seed)` of the current epoch: the ML-KEM
    /// seed of the hybrid suite for the `K` epochs from this one
    /// (spec/hybrid.md H4).
    pub fn kem_seed(&self) -> Zeroizing<[u8; 64]> {
        use sha3::Digest as _;
        let mut h = sha3::Sha3_512::new();
        h.update(b"hc1-ratchet-kem");
        h.update(&self.seed[..]);
        Zeroizing::new(h.finalize().into())
    }

    /// [`Ratchet::advance`], also returning the ML-KEM seed of the newest
    /// epoch passed or reached whose number is a multiple of `every` (the
    /// start of a `K`-epoch window, spec/hybrid.md H4), with that epoch:
    /// the seed is only derivable while the ratchet is there.
    pub fn advance_with_kem(
        &mut self,
        now: u64,
        identity: &IdentityKey,
        every: u64,
    ) -> (Vec<EpochKeys>, Option<WindowKem>) {
        let every = every.max(1);
        let target = self.epoch_at(now).max(self.epoch);
        let mut out = Vec::new();
        let mut kem = None;
        loop {
            if self.epoch % every == 0 {
                kem = Some((self.epoch, self.kem_seed()));
            }
            if self.epoch >= target {
                break;
            }
            if self.epoch + LIVE_EPOCHS > target {
                out.push(self.keys(identity));
            }
            self.step();
        }
        out.push(self.keys(identity));
        (out, kem)
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

    /// The state as text (`origin period skew epoch seed`, then `at fresh`
    /// while a reseed is pending), for the file an instance keeps; write it
    /// back after every advance.
    pub fn to_text(&self) -> Zeroizing<String> {
        let reseed = match &self.reseed {
            Some((at, fresh)) => format!(" {at} {}", b64::encode(&fresh[..])),
            None => String::new(),
        };
        let reseed = Zeroizing::new(reseed);
        Zeroizing::new(format!(
            "hc1-ratchet {} {} {} {} {}{}\n",
            self.origin,
            self.period,
            self.skew,
            self.epoch,
            b64::encode(&self.seed[..]),
            reseed.as_str()
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
        let reseed = match it.next() {
            None => None,
            Some(at) => {
                let at: u64 = at.parse().map_err(|_| Error::BadKeypair)?;
                let fresh = Zeroizing::new(b64::decode_array::<32>(
                    it.next().ok_or(Error::BadKeypair)?.as_bytes(),
                )?);
                // A reseed the state has already passed was missed: the
                // chain cannot be rejoined.
                if at <= epoch {
                    return Err(Error::BadKeypair);
                }
                Some((at, fresh))
            }
        };
        if it.next().is_some() {
            return Err(Error::BadKeypair);
        }
        let mut r = Ratchet::new(origin, period, skew, epoch, *seed)?;
        r.reseed = reseed;
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ML-KEM seed of a window is its first epoch's (spec/hybrid.md
    /// H4), reported by whichever advance passes that epoch, however far
    /// it jumps; none when no window starts on the way.
    #[test]
    fn the_kem_seed_of_a_window_is_its_first_epochs() {
        let id = IdentityKey::from_seed([1; 32]);
        let at = |e: u64| 1000 + 60 * e + 1;
        let mut step = Ratchet::new(1000, 60, 10, 4, [7; 32]).unwrap();
        step.advance(at(6), &id);
        let at_6 = step.kem_seed();
        step.advance(at(7), &id);
        assert_ne!(step.kem_seed(), at_6);

        let mut jump = Ratchet::new(1000, 60, 10, 4, [7; 32]).unwrap();
        let (keys, kem) = jump.advance_with_kem(at(8), &id, 3);
        assert_eq!(keys.last().unwrap().epoch, 8);
        let (w, seed) = kem.unwrap();
        assert_eq!((w, seed), (6, at_6));
        let (_, kem) = jump.advance_with_kem(at(8), &id, 3);
        assert!(kem.is_none(), "epoch 8 starts no window");
        let (_, kem) = jump.advance_with_kem(at(9), &id, 3);
        assert_eq!(kem.unwrap().0, 9);
    }

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
        let seed = b64::encode(&[7u8; 32]);
        for bad in [
            format!("hc1-ratchet 0 60 {} 1 {seed}", u64::MAX),
            format!("hc1-ratchet 0 {} 0 1 {seed}", u64::MAX),
            format!("hc1-ratchet {} 60 0 1 {seed}", u64::MAX),
            format!("hc1-ratchet 0 60 0 {} {seed}", u64::MAX / 2),
        ] {
            assert_eq!(
                Ratchet::from_text(&bad).map(|_| ()),
                Err(Error::BadKeypair),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_reseed_cuts_the_chain_at_its_epoch() {
        let id = IdentityKey::from_seed([1; 32]);
        let at = |e: u64| 1000 + 60 * e + 1;
        let old = Ratchet::new(1000, 60, 10, 0, [7; 32]).unwrap();
        // Announced at epoch 2 for epoch 5; the text form carries it.
        let mut base = Ratchet::from_text(&old.to_text()).unwrap();
        base.advance(at(2), &id);
        let stolen = Ratchet::from_text(&base.to_text()).unwrap();
        assert_eq!(
            base.schedule_reseed(at(2), 2, [9; 32]),
            Err(Error::NotValid),
            "not in the past or present"
        );
        base.schedule_reseed(at(2), 5, [9; 32]).unwrap();
        assert_eq!(
            base.schedule_reseed(at(2), 6, [8; 32]),
            Err(Error::NotValid),
            "one pending at a time"
        );
        let text = base.to_text();
        let mut a = Ratchet::from_text(&text).unwrap();
        let mut b = Ratchet::from_text(&text).unwrap();
        let mut thief = stolen;
        for e in 3..=8 {
            let ka = a.advance(at(e), &id).pop().unwrap();
            let kb = b.advance(at(e), &id).pop().unwrap();
            let kt = thief.advance(at(e), &id).pop().unwrap();
            assert_eq!(ka.epoch, e);
            // Two instances given the reseeded state agree.
            assert_eq!(ka.cert, kb.cert);
            assert_eq!(ka.secret.to_bytes(), kb.secret.to_bytes());
            if e < 5 {
                // Before the reseed epoch: the old chain, unchanged.
                assert_eq!(ka.cert, kt.cert, "epoch {e}");
            } else {
                // From it on: keys the old state cannot derive.
                assert_ne!(ka.secret.to_bytes(), kt.secret.to_bytes(), "epoch {e}");
                assert_ne!(ka.ticket.tid(), kt.ticket.tid(), "epoch {e}");
            }
        }
        assert_eq!(a.reseed_at(), None, "applied once, then forgotten");
        assert_eq!(a.to_text().split_whitespace().count(), 6);
        // A state that passed its reseed epoch without applying it is refused.
        let missed = text.replace(" 5 ", " 2 ");
        assert!(Ratchet::from_text(&missed).is_err());
    }
}
