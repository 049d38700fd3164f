//! The defence's state and its decision (spec §14.1–14.2): the settings, the
//! demand meter that switches the defence on and off, the puzzle difficulty
//! in force, and [`Admission::judge`], which ties the cookie, the puzzle and
//! the budgets together.

use std::net::IpAddr;

use crate::suite::NONCE_LEN;

use super::{issue_cookie, parse_echo, verify_echo, AdmitCookie};

/// Width of one demand-meter bucket, ms; the meter spans [`BUCKETS`] of them.
const BUCKET_MS: u64 = 100;
const BUCKETS: usize = 10;

/// Settings of the defence (spec §14.1). The defaults suit one core.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionConfig {
    /// Off entirely: every request goes straight to the key agreement.
    pub enabled: bool,
    /// Fresh-key demand (key agreements asked for per second) above which
    /// the defence switches on.
    pub threshold: u32,
    /// Milliseconds the demand must stay below half the threshold before the
    /// defence switches off again.
    pub hold_ms: u64,
    /// IPv4 prefix length of a budget (bits).
    pub v4_prefix: u8,
    /// IPv6 prefix length of a budget (bits).
    pub v6_prefix: u8,
    /// Key agreements per second one prefix may have while the defence is on.
    pub prefix_rate: u32,
    /// Burst of a prefix budget (key agreements).
    pub prefix_burst: u32,
    /// Slots of the budget table (rounded up to a power of two). Prefixes
    /// that hash to one slot share its budget.
    pub table_slots: usize,
    /// Highest puzzle difficulty; 0 turns the puzzle off.
    pub max_difficulty: u8,
    /// Seconds per step of the cookie's coarse time; a cookie is accepted in
    /// its own step and the next one.
    pub cookie_period: u64,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        AdmissionConfig {
            enabled: true,
            threshold: 2000,
            hold_ms: 3000,
            v4_prefix: 24,
            v6_prefix: 64,
            prefix_rate: 200,
            prefix_burst: 400,
            table_slots: 1 << 16,
            max_difficulty: 16,
            cookie_period: 30,
        }
    }
}

/// How the defence answers a fresh-key request that would need an X25519.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Go ahead with the key agreement.
    Admit,
    /// Outer 429 `urn:httpcrypt:admission` with this cookie to echo.
    Challenge(AdmitCookie),
    /// Outer 429 `urn:httpcrypt:busy`: the source's budget is spent; retry
    /// after this many milliseconds.
    Busy {
        /// Milliseconds until the budget has a key agreement again.
        retry_after_ms: u64,
    },
}

/// The defence's state: demand meter, pressure, secrets, budget table.
pub struct Admission {
    pub(super) config: AdmissionConfig,
    secret: [u8; 32],
    previous: [u8; 32],
    rotated_ms: u64,
    buckets: [u32; BUCKETS],
    /// Of that demand, the requests whose echo verified (a proven return
    /// path): the puzzle follows these alone.
    proven: [u32; BUCKETS],
    bucket_at: u64,
    on: bool,
    last_hot_ms: u64,
    pub(super) hasher: crate::suite::SipKey,
    /// Per slot: budget in thousandths of a key agreement, and last refill (ms).
    pub(super) table: Box<[(u32, u64)]>,
    counts: AdmissionCounts,
}

impl core::fmt::Debug for Admission {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // The cookie secrets and the table's hash key stay out of logs.
        f.debug_struct("Admission")
            .field("config", &self.config)
            .field("on", &self.on)
            .field("slots", &self.table.len())
            .field("counts", &self.counts)
            .finish_non_exhaustive()
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        use zeroize::Zeroize;
        self.secret.zeroize();
        self.previous.zeroize();
    }
}

/// What the defence has decided so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AdmissionCounts {
    /// Requests admitted while the defence was on.
    pub admitted_on: u64,
    /// Requests admitted while it was off.
    pub admitted_off: u64,
    /// Challenges issued.
    pub challenged: u64,
    /// Requests refused for a spent prefix budget.
    pub busy: u64,
}

impl Admission {
    /// A defence with `config`, its first cookie `secret` and a `seed` for
    /// the budget table's hash. Allocates the table (16 bytes a slot).
    pub fn new(config: AdmissionConfig, secret: [u8; 32], seed: [u8; 16], now_ms: u64) -> Self {
        let slots = config.table_slots.clamp(1, 1 << 24).next_power_of_two();
        let full = config.prefix_burst.max(1).saturating_mul(1000);
        Admission {
            secret,
            previous: secret,
            rotated_ms: now_ms,
            buckets: [0; BUCKETS],
            proven: [0; BUCKETS],
            bucket_at: now_ms / BUCKET_MS,
            on: false,
            last_hot_ms: 0,
            hasher: crate::suite::SipKey::from_seed(seed),
            table: vec![(full, now_ms); slots].into_boxed_slice(),
            config,
            counts: AdmissionCounts::default(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &AdmissionConfig {
        &self.config
    }

    /// Decisions so far.
    pub fn counts(&self) -> AdmissionCounts {
        self.counts
    }

    /// Whether a new secret is due (every two cookie periods).
    pub fn rotation_due(&self, now_ms: u64) -> bool {
        now_ms >= self.rotated_ms + 2 * self.config.cookie_period.max(1) * 1000
    }

    /// Starts issuing cookies under `secret`; cookies under the one before
    /// stay valid until the next rotation.
    pub fn rotate(&mut self, secret: [u8; 32], now_ms: u64) {
        // The oldest secret is overwritten here: cookies under it are void.
        self.previous = self.secret;
        self.secret = secret;
        self.rotated_ms = now_ms;
    }

    fn step(&self, now_ms: u64) -> u32 {
        (now_ms / 1000 / self.config.cookie_period.max(1)) as u32
    }

    /// Moves the meter to `now_ms`, zeroing buckets that fell out of it.
    fn advance(&mut self, now_ms: u64) {
        let at = now_ms / BUCKET_MS;
        if at <= self.bucket_at {
            return;
        }
        let gap = (at - self.bucket_at).min(BUCKETS as u64);
        for i in 1..=gap {
            let j = ((self.bucket_at + i) % BUCKETS as u64) as usize;
            self.buckets[j] = 0;
            self.proven[j] = 0;
        }
        self.bucket_at = at;
    }

    /// Fresh-key demand over the last second (key agreements asked for).
    pub fn demand(&mut self, now_ms: u64) -> u32 {
        self.advance(now_ms);
        self.buckets.iter().sum()
    }

    /// Fresh-key requests over the last second whose admission echo
    /// verified (address and puzzle), whatever their cookie's difficulty.
    pub fn proven_demand(&mut self, now_ms: u64) -> u32 {
        self.advance(now_ms);
        self.proven.iter().sum()
    }

    /// Whether the defence is on at `now_ms` (switching it as the demand says).
    pub fn is_on(&mut self, now_ms: u64) -> bool {
        if !self.config.enabled {
            return false;
        }
        let demand = u64::from(self.demand(now_ms));
        let threshold = u64::from(self.config.threshold.max(1));
        if demand > threshold {
            self.on = true;
        }
        if demand * 2 >= threshold {
            self.last_hot_ms = now_ms;
        } else if self.on && now_ms >= self.last_hot_ms + self.config.hold_ms {
            self.on = false;
        }
        self.on
    }

    /// The puzzle difficulty at `now_ms`: 0 while the *proven* demand
    /// (requests that echoed a valid cookie) is below twice the threshold,
    /// then 10 bits plus 2 per doubling of it, at most `max_difficulty`.
    ///
    /// Requests without a valid echo are refused before any key agreement,
    /// at the price of a challenge; making every newcomer solve a puzzle
    /// because of them would tax legitimate clients for work the server
    /// never does. Only clients that receive at their address and echo can
    /// make the server pay, so only they raise the price, and each prefix
    /// only while its budget lasts.
    pub fn difficulty(&mut self, now_ms: u64) -> u8 {
        if self.config.max_difficulty == 0 || !self.is_on(now_ms) {
            return 0;
        }
        let ratio = self.proven_demand(now_ms) / (2 * self.config.threshold.max(1));
        if ratio == 0 {
            return 0;
        }
        let doublings = 31 - ratio.leading_zeros();
        (10 + 2 * doublings).min(u32::from(self.config.max_difficulty)) as u8
    }

    /// Judges a fresh-key request from `addr` with request nonce `n0` and
    /// the `hc1-admit` echo it carried, at `now_ms` (spec §14.2). Call it only
    /// when an X25519 is about to run: a session-cache hit or a ticket skips
    /// the defence and is not demand.
    pub fn judge(
        &mut self,
        now_ms: u64,
        addr: IpAddr,
        n0: &[u8; NONCE_LEN],
        echo: Option<&[u8]>,
    ) -> Verdict {
        self.advance(now_ms);
        let i = (self.bucket_at % BUCKETS as u64) as usize;
        self.buckets[i] = self.buckets[i].saturating_add(1);
        if !self.is_on(now_ms) {
            self.counts.admitted_off += 1;
            return Verdict::Admit;
        }
        let step = self.step(now_ms);
        let verified = echo
            .filter(|e| verify_echo(&[&self.secret, &self.previous], step, addr, n0, e).is_ok());
        // The price in force before this request: its own proof does not
        // raise the bar it is judged against.
        let d = self.difficulty(now_ms);
        // Counted only while the source's prefix has budget: one prefix
        // can raise the price for everyone by at most its own rate.
        if verified.is_some() && self.budget_left(addr, now_ms) {
            self.proven[i] = self.proven[i].saturating_add(1);
        }
        // A cookie issued while the load was lower names a lower difficulty
        // than the one in force: it is challenged again, or a client could
        // keep its cheap cookie for its whole life while the load rises.
        let valid = verified.is_some_and(|e| parse_echo(e).is_ok_and(|(c, _)| c.difficulty() >= d));
        if !valid {
            self.counts.challenged += 1;
            return Verdict::Challenge(issue_cookie(&self.secret, step, d, addr));
        }
        match self.spend(addr, now_ms) {
            Ok(()) => {
                self.counts.admitted_on += 1;
                Verdict::Admit
            }
            Err(ms) => {
                self.counts.busy += 1;
                Verdict::Busy { retry_after_ms: ms }
            }
        }
    }
}
