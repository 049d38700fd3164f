//! What keeps the embedded authority (`httpcrypt dns serve`) from being an
//! amplifier (spec §6.4.2): UDP answers are held to the size the query
//! allows (512 bytes without EDNS, RFC 1035 §4.2.1; the EDNS size offered,
//! capped, RFC 6891 §6.2.5) and are otherwise truncated with TC set, and
//! UDP responses are rate-limited per source prefix, as BIND's response
//! rate limiting does: a token bucket per /24 (IPv4) or /56 (IPv6), in a
//! table of bounded size; a response over the rate is dropped, and every
//! `slip`-th dropped one is sent as an empty truncated answer so that an
//! honest client behind that prefix retries over TCP, which needs a
//! handshake and is not limited.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

/// Largest UDP answer without EDNS (RFC 1035 §4.2.1).
pub const PLAIN_UDP_MAX: u16 = 512;
/// Default cap on the EDNS payload size honoured (the DNS flag day 2020
/// value: no IP fragmentation on common paths).
pub const DEFAULT_EDNS_MAX: u16 = 1232;
/// Default UDP responses per second per source prefix.
pub const DEFAULT_RATE: u32 = 100;
/// Default: every second response over the rate is sent truncated.
pub const DEFAULT_SLIP: u32 = 2;
/// Default number of source prefixes tracked.
pub const DEFAULT_PREFIXES: usize = 65_536;

/// The bounds of UDP answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseLimits {
    /// Largest EDNS payload size honoured (at least 512).
    pub edns_max: u16,
    /// UDP responses per second per /24 or /56; the bucket holds one
    /// second's worth. 0: no rate limit.
    pub rate: u32,
    /// Every `slip`-th response over the rate is sent truncated instead of
    /// dropped (0: drop all, 1: truncate all).
    pub slip: u32,
    /// Most prefixes tracked at once; a new prefix finding the table full
    /// (after forgetting idle ones) gets truncated answers only.
    pub prefixes: usize,
}

impl Default for ResponseLimits {
    fn default() -> Self {
        ResponseLimits {
            edns_max: DEFAULT_EDNS_MAX,
            rate: DEFAULT_RATE,
            slip: DEFAULT_SLIP,
            prefixes: DEFAULT_PREFIXES,
        }
    }
}

impl ResponseLimits {
    /// The largest UDP answer for a query that offered `edns` (its EDNS
    /// payload size, if it carried EDNS).
    pub fn udp_max(&self, edns: Option<u16>) -> usize {
        match edns {
            None => usize::from(PLAIN_UDP_MAX),
            Some(offered) => {
                usize::from(offered.clamp(PLAIN_UDP_MAX, self.edns_max.max(PLAIN_UDP_MAX)))
            }
        }
    }
}

/// What to do with one UDP response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Send it.
    Answer,
    /// Send an empty answer with TC set instead.
    Slip,
    /// Send nothing.
    Drop,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
    over: u32,
}

/// Per-prefix token buckets ([`ResponseLimits::rate`]).
#[derive(Debug)]
pub struct RateLimiter {
    limits: ResponseLimits,
    table: Mutex<HashMap<[u8; 8], Bucket>>,
}

/// The prefix a source is limited by: /24 for IPv4, /56 for IPv6 (an
/// IPv4-mapped address counts as IPv4).
fn prefix(ip: IpAddr) -> [u8; 8] {
    let mut k = [0u8; 8];
    match ip {
        IpAddr::V4(a) => {
            k[0] = 4;
            k[1..4].copy_from_slice(&a.octets()[..3]);
        }
        IpAddr::V6(a) => match a.to_ipv4_mapped() {
            Some(v4) => return prefix(IpAddr::V4(v4)),
            None => {
                k[0] = 6;
                k[1..].copy_from_slice(&a.octets()[..7]);
            }
        },
    }
    k
}

impl RateLimiter {
    /// A limiter with `limits`.
    pub fn new(limits: ResponseLimits) -> Self {
        RateLimiter {
            limits,
            table: Mutex::new(HashMap::new()),
        }
    }

    /// The limits it applies.
    pub fn limits(&self) -> &ResponseLimits {
        &self.limits
    }

    /// Prefixes currently tracked.
    pub fn tracked(&self) -> usize {
        self.table.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Takes a token for a response to `src` at `now`.
    pub fn check(&self, src: IpAddr, now: Instant) -> Verdict {
        let l = &self.limits;
        if l.rate == 0 {
            return Verdict::Answer;
        }
        let rate = f64::from(l.rate);
        let key = prefix(src);
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        if !table.contains_key(&key) && table.len() >= l.prefixes {
            // Buckets idle for a second are full again: the same as absent.
            table.retain(|_, b| now.saturating_duration_since(b.last).as_secs_f64() < 1.0);
            if table.len() >= l.prefixes {
                return Verdict::Slip;
            }
        }
        let b = table.entry(key).or_insert(Bucket {
            tokens: rate,
            last: now,
            over: 0,
        });
        let elapsed = now.saturating_duration_since(b.last).as_secs_f64();
        b.tokens = (b.tokens + elapsed * rate).min(rate);
        b.last = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            return Verdict::Answer;
        }
        b.over = b.over.wrapping_add(1);
        if l.slip > 0 && b.over % l.slip == 0 {
            Verdict::Slip
        } else {
            Verdict::Drop
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn sizes() {
        let l = ResponseLimits::default();
        assert_eq!(l.udp_max(None), 512);
        assert_eq!(l.udp_max(Some(100)), 512);
        assert_eq!(l.udp_max(Some(1232)), 1232);
        assert_eq!(l.udp_max(Some(4096)), 1232);
    }

    #[test]
    fn buckets_per_prefix_refill_and_slip() {
        let r = RateLimiter::new(ResponseLimits {
            rate: 10,
            slip: 2,
            prefixes: 2,
            ..ResponseLimits::default()
        });
        let t = Instant::now();
        let a: IpAddr = "192.0.2.1".parse().unwrap_or(IpAddr::from([0; 4]));
        let same: IpAddr = "192.0.2.200".parse().unwrap_or(IpAddr::from([0; 4]));
        let verdicts: Vec<Verdict> = (0..20)
            .map(|i| r.check(if i % 2 == 0 { a } else { same }, t))
            .collect();
        assert!(verdicts[..10].iter().all(|v| *v == Verdict::Answer));
        assert_eq!(
            verdicts[10..]
                .iter()
                .filter(|v| **v == Verdict::Slip)
                .count(),
            5
        );
        assert_eq!(
            verdicts[10..]
                .iter()
                .filter(|v| **v == Verdict::Drop)
                .count(),
            5
        );
        // Another prefix has its own bucket; a third finds the table full.
        assert_eq!(r.check(IpAddr::from([192, 0, 3, 1]), t), Verdict::Answer);
        assert_eq!(r.check(IpAddr::from([192, 0, 4, 1]), t), Verdict::Slip);
        assert_eq!(r.tracked(), 2);
        // A second later the bucket is full again, and idle prefixes make room.
        let later = t + Duration::from_millis(1100);
        assert_eq!(
            r.check(IpAddr::from([192, 0, 4, 1]), later),
            Verdict::Answer
        );
        assert_eq!(r.check(a, later), Verdict::Answer);
        // IPv6 by /56.
        let v6 = |s: &str| s.parse::<IpAddr>().unwrap_or(IpAddr::from([0u16; 8]));
        assert_eq!(
            prefix(v6("2001:db8:0:ff::1")),
            prefix(v6("2001:db8:0:1::2"))
        );
        assert_ne!(
            prefix(v6("2001:db8:0:100::1")),
            prefix(v6("2001:db8:0:1::2"))
        );
        assert_eq!(prefix(v6("::ffff:192.0.2.9")), prefix(a));
    }
}
