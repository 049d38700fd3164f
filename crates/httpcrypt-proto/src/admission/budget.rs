//! Per-source-prefix budgets of key agreements (spec §14.2): the prefix an
//! address falls in, and the defence's table of token buckets, keyed by a
//! seeded hash of the prefix.

use std::net::IpAddr;

use super::Admission;

/// The budget-table key of `addr`: its prefix, as 16 bytes.
pub fn prefix_of(addr: IpAddr, v4_bits: u8, v6_bits: u8) -> [u8; 16] {
    let (mut bytes, bits, offset) = match addr {
        IpAddr::V4(a) => {
            let mut b = [0u8; 16];
            b[12..].copy_from_slice(&a.octets());
            b[10] = 0xff;
            b[11] = 0xff;
            (b, u32::from(v4_bits.min(32)), 96)
        }
        IpAddr::V6(a) => (a.octets(), u32::from(v6_bits.min(128)), 0),
    };
    let keep = offset + bits;
    for (i, b) in bytes.iter_mut().enumerate() {
        let lo = (i as u32) * 8;
        if lo >= keep {
            *b = 0;
        } else if lo + 8 > keep {
            *b &= 0xffu8 << (lo + 8 - keep);
        }
    }
    bytes
}

impl Admission {
    /// The budget table's slot of `addr`'s prefix.
    fn slot(&self, addr: IpAddr) -> usize {
        let prefix = prefix_of(addr, self.config.v4_prefix, self.config.v6_prefix);
        (self.hasher.hash(&[&prefix]) as usize) & (self.table.len() - 1)
    }

    /// Whether `addr`'s prefix holds one key agreement now (nothing spent).
    pub(super) fn budget_left(&self, addr: IpAddr, now_ms: u64) -> bool {
        let rate = u64::from(self.config.prefix_rate.max(1));
        let full = u64::from(self.config.prefix_burst.max(1)) * 1000;
        let (budget, at) = self.table[self.slot(addr)];
        let refill = now_ms.saturating_sub(at).saturating_mul(rate);
        (u64::from(budget) + refill).min(full) >= 1000
    }

    /// Takes one key agreement from `addr`'s prefix budget, or says how long
    /// until one is there.
    pub(super) fn spend(&mut self, addr: IpAddr, now_ms: u64) -> std::result::Result<(), u64> {
        let rate = u64::from(self.config.prefix_rate.max(1));
        let full = u64::from(self.config.prefix_burst.max(1)) * 1000;
        let i = self.slot(addr);
        let (budget, at) = self.table[i];
        let refill = now_ms.saturating_sub(at).saturating_mul(rate);
        let budget = (u64::from(budget) + refill).min(full);
        if budget >= 1000 {
            self.table[i] = ((budget - 1000) as u32, now_ms);
            Ok(())
        } else {
            self.table[i] = (budget as u32, now_ms);
            Err((1000 - budget).div_ceil(rate).max(1))
        }
    }
}
