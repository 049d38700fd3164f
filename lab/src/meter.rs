//! What one exchange costs: the flights on the wire (direction, size, whether
//! they carry application data) and the CPU of every step, charged to the side
//! and the phase that ran it.
//!
//! Every step runs inside [`client_step`] or [`server_step`]: two functions that
//! are never inlined, so `valgrind --tool=callgrind --toggle-collect=*server_step*`
//! counts the instructions of exactly one side (set-up outside them is not
//! counted).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Which way a flight goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// Client to server.
    C2s,
    /// Server to client.
    S2c,
}

/// Which side ran a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The client.
    Client,
    /// The server.
    Server,
}

/// What a step is for (Gutmann's phases).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Key agreement (ECDH/X25519, key derivation).
    KeyAgreement,
    /// Authentication (signature, certificate check).
    Auth,
    /// Protection of application data (AEAD seal/open, framing).
    Protect,
    /// A handshake flight that does several of the above inside one library
    /// call that cannot be split from outside.
    Handshake,
}

impl Phase {
    /// Snake-case name used in the JSON.
    pub fn name(self) -> &'static str {
        match self {
            Phase::KeyAgreement => "key_agreement",
            Phase::Auth => "auth",
            Phase::Protect => "protect",
            Phase::Handshake => "handshake",
        }
    }
}

/// One burst of bytes in one direction.
#[derive(Debug, Clone)]
pub struct Flight {
    /// Direction.
    pub dir: Dir,
    /// Bytes on the wire (above TCP).
    pub bytes: usize,
    /// Whether application data (request or response) is in it.
    pub app: bool,
    /// What it holds.
    pub label: String,
}

/// One timed step.
#[derive(Debug, Clone)]
pub struct Step {
    /// Who ran it.
    pub side: Side,
    /// What for.
    pub phase: Phase,
    /// What it was.
    pub label: &'static str,
    /// Thread CPU time.
    pub cpu: Duration,
}

/// The record of one exchange.
#[derive(Debug, Default, Clone)]
pub struct Run {
    /// Flights in order.
    pub flights: Vec<Flight>,
    /// Steps in order.
    pub steps: Vec<Step>,
    /// Set-up runs skip the callgrind markers so that they are not counted.
    unmarked: bool,
}

/// CPU time of the calling thread.
pub fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

// Each side counts its steps in its own static, so that the linker cannot
// fold `client_step::<F>` and `server_step::<F>` into one symbol (they
// would otherwise be identical code, and callgrind would see one name).
static CLIENT_STEPS: AtomicU64 = AtomicU64::new(0);
static SERVER_STEPS: AtomicU64 = AtomicU64::new(0);

/// Runs a client step (callgrind toggles on this symbol).
#[inline(never)]
pub fn client_step<R>(f: impl FnOnce() -> R) -> R {
    CLIENT_STEPS.fetch_add(1, Ordering::Relaxed);
    std::hint::black_box(f())
}

/// Runs a server step (callgrind toggles on this symbol).
#[inline(never)]
pub fn server_step<R>(f: impl FnOnce() -> R) -> R {
    SERVER_STEPS.fetch_add(1, Ordering::Relaxed);
    std::hint::black_box(f())
}

impl Run {
    /// A measured run.
    pub fn new() -> Run {
        Run::default()
    }

    /// A set-up run: steps run outside the callgrind markers.
    pub fn unmarked() -> Run {
        Run {
            unmarked: true,
            ..Run::default()
        }
    }

    /// Times `f` as a step of `side`.
    pub fn step<R>(
        &mut self,
        side: Side,
        phase: Phase,
        label: &'static str,
        f: impl FnOnce() -> R,
    ) -> R {
        let t0 = thread_cpu();
        let r = match (self.unmarked, side) {
            (true, _) => f(),
            (false, Side::Client) => client_step(f),
            (false, Side::Server) => server_step(f),
        };
        let cpu = thread_cpu().saturating_sub(t0);
        self.steps.push(Step {
            side,
            phase,
            label,
            cpu,
        });
        r
    }

    /// Records a flight; an empty one is not a flight.
    pub fn send(&mut self, dir: Dir, bytes: usize, app: bool, label: impl Into<String>) {
        if bytes > 0 {
            self.flights.push(Flight {
                dir,
                bytes,
                app,
                label: label.into(),
            });
        }
    }

    /// Total bytes in one direction.
    pub fn bytes(&self, dir: Dir) -> usize {
        self.flights
            .iter()
            .filter(|f| f.dir == dir)
            .map(|f| f.bytes)
            .sum()
    }

    /// Round trips (above the transport) until the client holds the first
    /// byte of the response: the number of client→server flight groups up to
    /// the first server→client flight that carries application data. `None`
    /// if no response came.
    pub fn rtts_first_byte(&self) -> Option<usize> {
        let mut rtts = 0;
        let mut last = None;
        for f in &self.flights {
            if f.dir == Dir::C2s && last != Some(Dir::C2s) {
                rtts += 1;
            }
            last = Some(f.dir);
            if f.dir == Dir::S2c && f.app {
                return Some(rtts);
            }
        }
        None
    }

    /// CPU of one side, all steps.
    pub fn cpu(&self, side: Side) -> Duration {
        self.steps
            .iter()
            .filter(|s| s.side == side)
            .map(|s| s.cpu)
            .sum()
    }

    /// CPU of one side in one phase.
    pub fn cpu_phase(&self, side: Side, phase: Phase) -> Duration {
        self.steps
            .iter()
            .filter(|s| s.side == side && s.phase == phase)
            .map(|s| s.cpu)
            .sum()
    }
}

/// A ready-made exchange to carry: the same inner HTTP/1.1 request and
/// response for every protocol, with bodies of the given sizes.
#[derive(Debug, Clone)]
pub struct Payload {
    /// Request body length.
    pub req_body: usize,
    /// Response body length.
    pub rsp_body: usize,
}

impl Payload {
    /// The plaintext HTTP/1.1 request (head and body), as plain HTTP sends it.
    pub fn request(&self) -> Vec<u8> {
        let mut v = format!(
            "POST /api HTTP/1.1\r\nHost: example.com\r\nContent-Length: {}\r\n\r\n",
            self.req_body
        )
        .into_bytes();
        v.extend(std::iter::repeat_n(b'q', self.req_body));
        v
    }

    /// The plaintext HTTP/1.1 response.
    pub fn response(&self) -> Vec<u8> {
        let mut v = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
            self.rsp_body
        )
        .into_bytes();
        v.extend(std::iter::repeat_n(b'r', self.rsp_body));
        v
    }
}
