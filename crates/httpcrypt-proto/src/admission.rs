//! Load-aware admission before the key agreement (spec §14): a demand meter,
//! per-source-prefix budgets, the stateless address-bound admission cookie
//! and the hash puzzle, and the decision that ties them together.
//!
//! Everything here is sans-IO: the caller passes the time (milliseconds),
//! the peer address and fresh secrets. Nothing on the judging path
//! allocates: the budget table is allocated once, in [`Admission::new`].

use std::net::IpAddr;

use siphasher::sip::SipHasher13;
use subtle::ConstantTimeEq;

use crate::b64;
use crate::error::{Error, Result};
use crate::suite::{sha3_256, NONCE_LEN};

/// Name of the outer cookie pair that echoes an admission cookie (spec §14.3).
pub const ADMIT_COOKIE: &str = "hc1-admit";
/// Bytes of an admission cookie: `t(4) || d(1) || mac(16)`.
pub const COOKIE_LEN: usize = 21;
/// Bytes of a puzzle solution.
pub const SOLUTION_LEN: usize = 8;
/// Bytes of an echo: `cookie || solution`.
pub const ECHO_LEN: usize = COOKIE_LEN + SOLUTION_LEN;
/// Characters of a cookie's base64url form.
pub const COOKIE_B64_LEN: usize = b64::encoded_len(COOKIE_LEN);
/// Characters of an echo's base64url form.
pub const ECHO_B64_LEN: usize = b64::encoded_len(ECHO_LEN);
/// The highest puzzle difficulty (leading zero bits) a client accepts to solve.
pub const MAX_DIFFICULTY: u8 = 24;

const MAC_LABEL: &[u8] = b"hc1-admit";
const PUZZLE_LABEL: &[u8] = b"hc1-puzzle";
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

/// An admission cookie as issued: coarse time, difficulty, MAC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmitCookie(pub [u8; COOKIE_LEN]);

impl AdmitCookie {
    /// The coarse time step it was issued in.
    pub fn step(&self) -> u32 {
        u32::from_be_bytes([self.0[0], self.0[1], self.0[2], self.0[3]])
    }

    /// The puzzle difficulty (leading zero bits) it demands.
    pub fn difficulty(&self) -> u8 {
        self.0[4]
    }

    /// Its base64url text (28 characters), appended to `out`.
    pub fn encode_to(&self, out: &mut String) {
        b64::encode_to(&self.0, out);
    }

    /// Parses the 28-character text form.
    pub fn parse(text: &[u8]) -> Result<Self> {
        b64::decode_array::<COOKIE_LEN>(text)
            .map(AdmitCookie)
            .map_err(|_| Error::BadAdmission)
    }
}

/// The address bytes a cookie is bound to: IPv4 as IPv4-mapped IPv6.
fn addr16(addr: IpAddr) -> [u8; 16] {
    match addr {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

/// `SHA3-256("hc1-admit" || secret || t || d || addr16)[0..16]` (spec §14.3).
pub fn cookie_mac(secret: &[u8; 32], step: u32, difficulty: u8, addr: IpAddr) -> [u8; 16] {
    let h = sha3_256(&[
        MAC_LABEL,
        secret,
        &step.to_be_bytes(),
        &[difficulty],
        &addr16(addr),
    ]);
    let mut mac = [0u8; 16];
    mac.copy_from_slice(&h[..16]);
    mac
}

/// Issues the cookie for `addr` in time step `step`.
pub fn issue_cookie(secret: &[u8; 32], step: u32, difficulty: u8, addr: IpAddr) -> AdmitCookie {
    let mut c = [0u8; COOKIE_LEN];
    c[..4].copy_from_slice(&step.to_be_bytes());
    c[4] = difficulty;
    c[5..].copy_from_slice(&cookie_mac(secret, step, difficulty, addr));
    AdmitCookie(c)
}

/// Leading zero bits of `h`.
fn leading_zero_bits(h: &[u8; 32]) -> u32 {
    let mut n = 0;
    for b in h {
        if *b == 0 {
            n += 8;
        } else {
            return n + b.leading_zeros();
        }
    }
    n
}

/// The puzzle hash `SHA3-256("hc1-puzzle" || cookie || n0 || solution)`.
pub fn puzzle_hash(
    cookie: &AdmitCookie,
    n0: &[u8; NONCE_LEN],
    solution: &[u8; SOLUTION_LEN],
) -> [u8; 32] {
    sha3_256(&[PUZZLE_LABEL, &cookie.0, n0, solution])
}

/// Whether `solution` solves the cookie's puzzle for the request nonce `n0`.
pub fn puzzle_solved(
    cookie: &AdmitCookie,
    n0: &[u8; NONCE_LEN],
    solution: &[u8; SOLUTION_LEN],
) -> bool {
    let d = u32::from(cookie.difficulty());
    d == 0 || leading_zero_bits(&puzzle_hash(cookie, n0, solution)) >= d
}

/// Solves the cookie's puzzle for `n0`, trying at most `max_tries`
/// solutions counted up from `start`; `None` when the difficulty is above
/// [`MAX_DIFFICULTY`] or no solution was found within the bound.
pub fn solve_puzzle(
    cookie: &AdmitCookie,
    n0: &[u8; NONCE_LEN],
    start: u64,
    max_tries: u64,
) -> Option<[u8; SOLUTION_LEN]> {
    if cookie.difficulty() > MAX_DIFFICULTY {
        return None;
    }
    (0..max_tries)
        .map(|i| start.wrapping_add(i).to_be_bytes())
        .find(|s| puzzle_solved(cookie, n0, s))
}

/// The echo text `b64u(cookie || solution)` (39 characters) the client
/// sends as the value of the `hc1-admit` cookie pair.
pub fn format_echo(cookie: &AdmitCookie, solution: &[u8; SOLUTION_LEN]) -> String {
    let mut raw = [0u8; ECHO_LEN];
    raw[..COOKIE_LEN].copy_from_slice(&cookie.0);
    raw[COOKIE_LEN..].copy_from_slice(solution);
    b64::encode(&raw)
}

/// Parses an echo text into its cookie and solution.
pub fn parse_echo(text: &[u8]) -> Result<(AdmitCookie, [u8; SOLUTION_LEN])> {
    let raw = b64::decode_array::<ECHO_LEN>(text).map_err(|_| Error::BadAdmission)?;
    let mut c = [0u8; COOKIE_LEN];
    c.copy_from_slice(&raw[..COOKIE_LEN]);
    let mut s = [0u8; SOLUTION_LEN];
    s.copy_from_slice(&raw[COOKIE_LEN..]);
    Ok((AdmitCookie(c), s))
}

/// The value of the first `hc1-admit` pair in the `Cookie` fields, if any
/// (spec §14.3; pairs are split and trimmed as in §11.3).
pub fn find_echo<'a>(fields: impl IntoIterator<Item = &'a [u8]>) -> Option<&'a [u8]> {
    fields.into_iter().find_map(|field| {
        field.split(|b| *b == b';').find_map(|pair| {
            let pair = pair.trim_ascii();
            let eq = pair.iter().position(|b| *b == b'=')?;
            (pair[..eq].trim_ascii() == ADMIT_COOKIE.as_bytes())
                .then(|| pair[eq + 1..].trim_ascii())
        })
    })
}

/// Checks an echo against the secrets in use: the MAC for `addr`, the time
/// step (the current one or the one before), then the puzzle for `n0`.
pub fn verify_echo(
    secrets: &[&[u8; 32]],
    step_now: u32,
    addr: IpAddr,
    n0: &[u8; NONCE_LEN],
    echo: &[u8],
) -> Result<()> {
    let (cookie, solution) = parse_echo(echo)?;
    let step = cookie.step();
    if step > step_now || step_now - step > 1 {
        return Err(Error::BadAdmission);
    }
    let mac_ok = secrets
        .iter()
        .any(|s| bool::from(cookie_mac(s, step, cookie.difficulty(), addr).ct_eq(&cookie.0[5..])));
    if !mac_ok || !puzzle_solved(&cookie, n0, &solution) {
        return Err(Error::BadAdmission);
    }
    Ok(())
}

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
    config: AdmissionConfig,
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
    hasher: (u64, u64),
    /// Per slot: budget in thousandths of a key agreement, and last refill (ms).
    table: Box<[(u32, u64)]>,
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
            hasher: (
                u64::from_le_bytes(seed[..8].try_into().expect("8 bytes")),
                u64::from_le_bytes(seed[8..].try_into().expect("8 bytes")),
            ),
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

    fn slot(&self, addr: IpAddr) -> usize {
        use std::hash::Hasher;
        let mut h = SipHasher13::new_with_keys(self.hasher.0, self.hasher.1);
        h.write(&prefix_of(
            addr,
            self.config.v4_prefix,
            self.config.v6_prefix,
        ));
        (h.finish() as usize) & (self.table.len() - 1)
    }

    /// Whether `addr`'s prefix holds one key agreement now (nothing spent).
    fn budget_left(&self, addr: IpAddr, now_ms: u64) -> bool {
        let rate = u64::from(self.config.prefix_rate.max(1));
        let full = u64::from(self.config.prefix_burst.max(1)) * 1000;
        let (budget, at) = self.table[self.slot(addr)];
        let refill = now_ms.saturating_sub(at).saturating_mul(rate);
        (u64::from(budget) + refill).min(full) >= 1000
    }

    /// Takes one key agreement from `addr`'s prefix budget, or says how long
    /// until one is there.
    fn spend(&mut self, addr: IpAddr, now_ms: u64) -> std::result::Result<(), u64> {
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

/// Writes the outer problem document for a refusal into `out` (cleared
/// first; with enough capacity this allocates nothing): `admission` with the
/// cookie and its difficulty, or `busy` with `retry_after` seconds (spec §14.4).
pub fn format_refusal(verdict: &Verdict, out: &mut String) {
    use std::fmt::Write as _;
    out.clear();
    match verdict {
        Verdict::Admit => {}
        Verdict::Challenge(c) => {
            out.push_str("{\"type\":\"");
            out.push_str(crate::error::problem_type::ADMISSION);
            out.push_str("\",\"title\":\"admission cookie required\",\"status\":429,\"admit\":\"");
            c.encode_to(out);
            let _ = write!(out, "\",\"difficulty\":{}}}", c.difficulty());
        }
        Verdict::Busy { retry_after_ms } => {
            out.push_str("{\"type\":\"");
            out.push_str(crate::error::problem_type::BUSY);
            let _ = write!(
                out,
                "\",\"title\":\"key agreement budget spent\",\"status\":429,\"retry_after\":{}}}",
                retry_after_secs(*retry_after_ms)
            );
        }
    }
}

/// Whole seconds for `Retry-After` (at least 1).
pub fn retry_after_secs(ms: u64) -> u64 {
    ms.div_ceil(1000).max(1)
}

/// What a client reads from an outer 429 problem document (spec §14.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Echo this cookie (with a solved puzzle) in the next request.
    Admission(AdmitCookie),
    /// Wait this many seconds.
    Busy(u64),
}

/// Parses an `admission` or `busy` problem document.
pub fn parse_refusal(body: &[u8]) -> Result<Refusal> {
    let v: serde_json::Value = serde_json::from_slice(body).map_err(|_| Error::BadAdmission)?;
    match v.get("type").and_then(|t| t.as_str()) {
        Some(crate::error::problem_type::ADMISSION) => {
            let text = v
                .get("admit")
                .and_then(|a| a.as_str())
                .ok_or(Error::BadAdmission)?;
            AdmitCookie::parse(text.as_bytes()).map(Refusal::Admission)
        }
        Some(crate::error::problem_type::BUSY) => Ok(Refusal::Busy(
            v.get("retry_after").and_then(|r| r.as_u64()).unwrap_or(1),
        )),
        _ => Err(Error::BadAdmission),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 7));

    fn config() -> AdmissionConfig {
        AdmissionConfig {
            threshold: 100,
            hold_ms: 1000,
            prefix_rate: 10,
            prefix_burst: 5,
            table_slots: 64,
            max_difficulty: 12,
            ..AdmissionConfig::default()
        }
    }

    fn echo_for(c: &AdmitCookie, n0: &[u8; 24]) -> String {
        let s = solve_puzzle(c, n0, 0, 1 << 20).expect("solvable");
        format_echo(c, &s)
    }

    #[test]
    fn prefixes() {
        let p = |s: &str| prefix_of(s.parse().unwrap(), 24, 64);
        assert_eq!(p("10.1.2.3"), p("10.1.2.200"));
        assert_ne!(p("10.1.2.3"), p("10.1.3.3"));
        assert_eq!(p("2001:db8::1"), p("2001:db8::ffff:1"));
        assert_ne!(p("2001:db8:0:1::1"), p("2001:db8:0:2::1"));
        assert_eq!(
            prefix_of("10.1.2.3".parse().unwrap(), 20, 64),
            prefix_of("10.1.15.3".parse().unwrap(), 20, 64)
        );
    }

    #[test]
    fn find_echo_picks_the_pair() {
        let fields: [&[u8]; 2] = [b"a=b; abcdefghijklmn=x", b" hc1-admit = AAAA ;c=d"];
        assert_eq!(find_echo(fields), Some(&b"AAAA"[..]));
        assert_eq!(find_echo([&b"hc1-admitx=1"[..]]), None);
    }

    #[test]
    fn idle_admits_everything_without_cookies() {
        let mut a = Admission::new(config(), [1; 32], [2; 16], 1_000_000);
        for i in 0..100 {
            assert_eq!(
                a.judge(1_000_000 + i * 10, A, &[0; 24], None),
                Verdict::Admit
            );
        }
        assert_eq!(a.counts().challenged, 0);
    }

    /// Demand above the threshold turns the defence on; the challenge is
    /// answered with an echo; it turns off after the hold time.
    #[test]
    fn switches_on_challenges_and_switches_off() {
        let mut a = Admission::new(config(), [1; 32], [2; 16], 1_000_000);
        let mut t = 1_000_000;
        // 200 requests within 400 ms: above the threshold of 100/s.
        let mut challenged = None;
        for _ in 0..200 {
            t += 2;
            if let Verdict::Challenge(c) = a.judge(t, A, &[0; 24], None) {
                challenged = Some(c);
            }
        }
        let c = challenged.expect("the defence switched on");
        let n0 = [9u8; 24];
        let echo = echo_for(&c, &n0);
        assert_eq!(
            a.judge(t, A, &n0, Some(echo.as_bytes())),
            Verdict::Admit,
            "a solved echo from the same address is admitted"
        );
        let other: IpAddr = "192.0.2.8".parse().unwrap();
        assert!(matches!(
            a.judge(t, other, &n0, Some(echo.as_bytes())),
            Verdict::Challenge(_)
        ));
        assert!(
            matches!(
                a.judge(t, A, &[8; 24], Some(echo.as_bytes())),
                Verdict::Challenge(_)
            ) || c.difficulty() == 0,
            "the puzzle binds the nonce"
        );
        // Quiet for the hold time: off again, everything admitted.
        t += 3000;
        assert_eq!(a.judge(t, A, &[0; 24], None), Verdict::Admit);
    }

    #[test]
    fn budgets_limit_a_prefix_and_refill() {
        let mut a = Admission::new(config(), [1; 32], [2; 16], 1_000_000);
        let mut t = 1_000_000;
        for _ in 0..150 {
            t += 1;
            a.judge(t, A, &[0; 24], None);
        }
        assert!(a.is_on(t));
        let mut admitted = 0;
        let mut busy = 0;
        for i in 0..20u8 {
            let n0 = [i; 24];
            let Verdict::Challenge(c) = a.judge(t, A, &n0, None) else {
                panic!("expected a challenge");
            };
            let echo = echo_for(&c, &n0);
            match a.judge(t, A, &n0, Some(echo.as_bytes())) {
                Verdict::Admit => admitted += 1,
                Verdict::Busy { retry_after_ms } => {
                    assert!((1..=100).contains(&retry_after_ms));
                    busy += 1
                }
                v => panic!("{v:?}"),
            }
        }
        assert_eq!((admitted, busy), (5, 15), "burst of 5, then busy");
        // Another /24 has its own budget.
        let b: IpAddr = "192.0.3.7".parse().unwrap();
        let Verdict::Challenge(c) = a.judge(t, b, &[1; 24], None) else {
            panic!("expected a challenge");
        };
        let echo = echo_for(&c, &[1; 24]);
        assert_eq!(
            a.judge(t, b, &[1; 24], Some(echo.as_bytes())),
            Verdict::Admit
        );
    }

    #[test]
    fn cookies_expire_and_rotate() {
        let secret = [3u8; 32];
        let n0 = [0u8; 24];
        let c = issue_cookie(&secret, 100, 0, A);
        let echo = format_echo(&c, &[0; 8]);
        assert!(verify_echo(&[&secret], 100, A, &n0, echo.as_bytes()).is_ok());
        assert!(verify_echo(&[&secret], 101, A, &n0, echo.as_bytes()).is_ok());
        assert_eq!(
            verify_echo(&[&secret], 102, A, &n0, echo.as_bytes()),
            Err(Error::BadAdmission)
        );
        assert_eq!(
            verify_echo(&[&secret], 99, A, &n0, echo.as_bytes()),
            Err(Error::BadAdmission),
            "from the future"
        );
        assert_eq!(
            verify_echo(&[&[4; 32]], 100, A, &n0, echo.as_bytes()),
            Err(Error::BadAdmission)
        );
        // A raised difficulty invalidates the MAC.
        let mut raised = c;
        raised.0[4] = 1;
        assert_eq!(
            verify_echo(
                &[&secret],
                100,
                A,
                &n0,
                format_echo(&raised, &[0; 8]).as_bytes()
            ),
            Err(Error::BadAdmission)
        );
    }

    /// A roomy budget, so that one address can make proven demand.
    fn roomy() -> AdmissionConfig {
        AdmissionConfig {
            prefix_rate: 100_000,
            prefix_burst: 100_000,
            ..config()
        }
    }

    /// `n` echoes of `cookie` from `addr`, each for its own nonce.
    fn echo_many(a: &mut Admission, t: u64, addr: IpAddr, cookie: &AdmitCookie, n: u32) {
        for k in 0..n {
            let mut n0 = [0u8; 24];
            n0[..4].copy_from_slice(&k.to_le_bytes());
            let e = echo_for(cookie, &n0);
            a.judge(t, addr, &n0, Some(e.as_bytes()));
        }
    }

    #[test]
    fn difficulty_follows_the_proven_demand() {
        let mut a = Admission::new(roomy(), [1; 32], [2; 16], 0);
        let t = 1_000;
        // Junk alone (no echo) switches the defence on but never the puzzle:
        // it is refused before any key agreement.
        for _ in 0..5000 {
            a.judge(t, A, &[0; 24], None);
        }
        assert!(a.is_on(t));
        assert_eq!(a.difficulty(t), 0, "junk: cookie only");
        let Verdict::Challenge(c) = a.judge(t, A, &[0; 24], None) else {
            panic!("the defence is on")
        };
        assert_eq!(c.difficulty(), 0);
        // Echoing clients: between 1x and 2x of the threshold, cookie only.
        echo_many(&mut a, t, A, &c, 150);
        assert_eq!(a.proven_demand(t), 150);
        assert_eq!(a.difficulty(t), 0);
        // 2x to 4x: 10 bits (cheap echoes still count: they proved the path).
        echo_many(&mut a, t, A, &c, 100);
        assert_eq!(a.difficulty(t), 10);
        echo_many(&mut a, t, A, &c, 1000);
        assert_eq!(a.difficulty(t), 12, "capped at max_difficulty");
        // A second later the meter has forgotten them.
        assert_eq!(a.difficulty(t + 1_100), 0);
    }

    #[test]
    fn one_prefix_cannot_raise_the_puzzle_beyond_its_budget() {
        // Budget of 5 per /24: a thousand echoes from one address count
        // five times; another prefix's newcomers still see no puzzle.
        let mut a = Admission::new(config(), [1; 32], [2; 16], 0);
        let t = 1_000;
        for _ in 0..500 {
            a.judge(t, A, &[0; 24], None);
        }
        let Verdict::Challenge(c) = a.judge(t, A, &[0; 24], None) else {
            panic!("the defence is on")
        };
        echo_many(&mut a, t, A, &c, 1000);
        assert_eq!(a.proven_demand(t), 5);
        assert_eq!(a.difficulty(t), 0);
        let other: IpAddr = "198.51.100.9".parse().unwrap();
        match a.judge(t, other, &[0; 24], None) {
            Verdict::Challenge(c) => assert_eq!(c.difficulty(), 0),
            v => panic!("{v:?}"),
        }
    }

    #[test]
    fn a_cookie_below_the_difficulty_in_force_is_challenged_again() {
        let mut a = Admission::new(roomy(), [1; 32], [2; 16], 0);
        let t = 1_000;
        for _ in 0..150 {
            a.judge(t, A, &[0; 24], None);
        }
        assert_eq!(a.difficulty(t), 0);
        let Verdict::Challenge(cheap) = a.judge(t, A, &[0; 24], None) else {
            panic!("the defence is on")
        };
        assert_eq!(cheap.difficulty(), 0);
        let n0 = [9u8; 24];
        let echo = echo_for(&cheap, &n0);
        assert_eq!(a.judge(t, A, &n0, Some(echo.as_bytes())), Verdict::Admit);
        // The proven load rises: the same cheap cookie no longer admits.
        echo_many(&mut a, t, A, &cheap, 250);
        assert_eq!(a.difficulty(t), 10);
        let n1 = [10u8; 24];
        let echo = echo_for(&cheap, &n1);
        match a.judge(t, A, &n1, Some(echo.as_bytes())) {
            Verdict::Challenge(c) => assert_eq!(c.difficulty(), 10),
            v => panic!("expected a new challenge, got {v:?}"),
        }
    }

    #[test]
    fn an_echo_is_judged_at_the_price_before_it_arrived() {
        // Threshold 1: the second proven echo crosses 2x the threshold, yet
        // it is judged at the difficulty in force before it (0) and admitted.
        let mut a = Admission::new(
            AdmissionConfig {
                threshold: 1,
                ..config()
            },
            [1; 32],
            [2; 16],
            0,
        );
        let t = 1_000;
        for _ in 0..3 {
            a.judge(t, A, &[0; 24], None);
        }
        let Verdict::Challenge(c) = a.judge(t, A, &[0; 24], None) else {
            panic!("the defence is on")
        };
        assert_eq!(c.difficulty(), 0);
        for n in 1..=2u8 {
            let n0 = [n; 24];
            let echo = echo_for(&c, &n0);
            assert_eq!(a.judge(t, A, &n0, Some(echo.as_bytes())), Verdict::Admit);
        }
        assert_eq!(a.proven_demand(t), 2);
        assert_eq!(a.difficulty(t), 10);
    }

    #[test]
    fn refusal_documents_round_trip() {
        let c = issue_cookie(&[5; 32], 7, 11, A);
        let mut s = String::new();
        format_refusal(&Verdict::Challenge(c), &mut s);
        assert_eq!(parse_refusal(s.as_bytes()), Ok(Refusal::Admission(c)));
        format_refusal(
            &Verdict::Busy {
                retry_after_ms: 1500,
            },
            &mut s,
        );
        assert_eq!(parse_refusal(s.as_bytes()), Ok(Refusal::Busy(2)));
        assert!(parse_refusal(b"{}").is_err());
    }
}
