//! A fixed one-way delay for the round-trip experiment: packets that an
//! iptables `NFQUEUE` rule sends to the queue are held for `delay` and then
//! accepted. This kernel has neither `netem` nor nft's `queue`; in a network
//! namespace with the rule on the loopback OUTPUT chain, every packet of the
//! benchmark ports (SYN and SYN-ACK included) is delayed once, so a round
//! trip takes 2 × delay. The kernel keeps the packets; only their verdicts
//! wait here (polled every 100 µs, so each packet waits up to 0.1 ms more).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nfq::{Queue, Verdict};

/// Delays every packet of queue `num` by `delay`, until killed.
pub fn run(num: u16, delay: Duration) -> Result<()> {
    let mut q =
        Queue::open().context("opening the NFQUEUE socket (root, netfilter queue support)")?;
    q.bind(num).context("binding the queue")?;
    q.set_copy_range(num, 0)?;
    q.set_queue_max_len(num, 1 << 16)?;
    q.set_nonblocking(true);
    eprintln!(
        "delay: queue {num}, {} ms each way",
        delay.as_secs_f64() * 1e3
    );
    let mut held = VecDeque::new();
    let tick = Duration::from_micros(100);
    loop {
        loop {
            match q.recv() {
                Ok(m) => held.push_back((Instant::now() + delay, m)),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e.into()),
            }
        }
        let now = Instant::now();
        while held.front().is_some_and(|(due, _)| *due <= now) {
            if let Some((_, mut m)) = held.pop_front() {
                m.set_verdict(Verdict::Accept);
                q.verdict(m)?;
            }
        }
        let wait = held.front().map_or(tick, |(due, _)| {
            due.saturating_duration_since(now).min(tick)
        });
        std::thread::sleep(wait);
    }
}
