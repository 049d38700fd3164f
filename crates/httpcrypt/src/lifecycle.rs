//! The listener's defences against peers that hold a connection without
//! making progress (spec §11.6): deadlines for request heads and bodies, a
//! minimum transfer rate after a grace period (as Apache's mod_reqtimeout
//! `MinRate`), a write-progress deadline for answers nobody reads, an idle
//! keep-alive timeout, and, when every slot is taken, shedding the
//! connection that made the least progress instead of refusing the
//! newcomer.
//!
//! The hot path only counts: each connection's [`Progress`] is a few
//! atomics its socket and bodies update (bytes read and written, whether
//! the server waits on the peer). One ticker per listener ([`Slots::check`])
//! looks at every connection and decides; a connection it cuts is woken
//! through its own waker and reset. No lock is taken per read or write: a
//! new connection is pushed, as its handle and its start, onto a short list
//! of arrivals (one lock per accepted connection, on a few warm cache
//! lines), which the ticker moves into its table of connections once per
//! tick.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::conn::{ConnState, Cut, Progress};

pin_project_lite::pin_project! {
    /// The body of a request as the listener hands it to the service:
    /// hyper's, noting when the service waits for the peer's bytes (the
    /// body deadline and the minimum rate count only that time, not the
    /// time a slow upstream takes to accept the body).
    #[derive(Debug)]
    pub struct RequestBody {
        #[pin]
        body: hyper::body::Incoming,
        // `None` for a request without a body.
        conn: Option<ConnState>,
    }

    impl PinnedDrop for RequestBody {
        fn drop(this: Pin<&mut Self>) {
            if let Some(conn) = &this.conn {
                conn.progress().body_waits(false);
            }
        }
    }
}

impl RequestBody {
    pub(crate) fn new(body: hyper::body::Incoming, conn: &ConnState) -> Self {
        use http_body::Body as _;
        let conn = (!body.is_end_stream()).then(|| conn.clone());
        RequestBody { body, conn }
    }

    /// A body no connection watches: for a listener whose connections
    /// carry several requests at once (`listen::run_h2`), where the
    /// connection's progress is not one request's.
    pub(crate) fn detached(body: hyper::body::Incoming) -> Self {
        RequestBody { body, conn: None }
    }
}

impl http_body::Body for RequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, hyper::Error>>> {
        let mut this = self.project();
        let r = this.body.as_mut().poll_frame(cx);
        if let Some(conn) = this.conn {
            conn.progress().body_waits(r.is_pending());
            // hyper finished reading the body before it hands out its end.
            let end = match &r {
                Poll::Ready(None) => true,
                Poll::Ready(Some(Ok(_))) => this.body.is_end_stream(),
                _ => false,
            };
            if end {
                conn.progress().body_open(false);
            }
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// The deadlines and rates of [`Slots`] (from `ListenOptions`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadlines {
    /// A request head, complete: from the connection's start for its first
    /// request, from its first byte for later ones.
    pub header: Duration,
    /// A keep-alive connection between requests, no byte of a new head.
    pub keepalive: Duration,
    /// Time spent waiting for one request body's bytes, in total.
    pub body: Duration,
    /// Bytes per second a body must keep coming at, on average over the
    /// time spent waiting for it, once `grace` has passed (0: no rule).
    pub min_rate: u64,
    /// See `min_rate`.
    pub grace: Duration,
    /// An answer's bytes making no progress at all (the peer stopped
    /// reading).
    pub write: Duration,
}

impl Deadlines {
    /// How often the ticker looks: a quarter of the shortest deadline,
    /// between 100 ms and a second.
    pub(crate) fn period(&self) -> Duration {
        [self.header, self.keepalive, self.body, self.write]
            .into_iter()
            .min()
            .unwrap_or(Duration::from_secs(4))
            .div_f64(4.0)
            .clamp(Duration::from_millis(100), Duration::from_secs(1))
    }
}

/// Every live connection of one listener, with what the ticker last saw of
/// each.
#[derive(Debug)]
pub(crate) struct Slots {
    limits: Deadlines,
    period: Duration,
    /// Connections accepted since the ticker last looked, and when. Apart
    /// from `table`: an accepted connection writes 24 bytes here, where
    /// its entry in the table (three cache lines) missed the caches and
    /// held the lock until the store had gone out.
    arrivals: Mutex<Vec<(ConnState, Instant)>>,
    table: Mutex<Vec<Entry>>,
}

/// The ticker's view of one connection.
#[derive(Debug)]
struct Entry {
    conn: ConnState,
    born: Instant,
    /// The request count and in-flight flag the current phase started with.
    requests: u32,
    in_flight: bool,
    /// When the current phase (waiting for a head, or a request in
    /// flight) started, and the bytes read by then.
    phase_start: Instant,
    phase_read: u64,
    /// Waiting for a head: when its first byte was seen.
    head_seen: Option<Instant>,
    /// A request in flight: time spent waiting for its body.
    waited: Duration,
    /// Since when every write has found the send buffer full, and the
    /// bytes written by then.
    blocked: Option<(Instant, u64)>,
    /// Since when no byte went out while writes found the buffer full.
    frozen: Option<Instant>,
    /// Counters at the last tick.
    read: u64,
    written: u64,
    /// Bytes per second the peer moves where the server waits on it (the
    /// shedding order), `None` when the server does not wait on it.
    score: Option<u64>,
}

/// Why a connection was cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Idle,
    Head,
    Body,
    Write,
}

impl Verdict {
    fn cut(self) -> Cut {
        match self {
            Verdict::Idle => Cut::Close,
            _ => Cut::Reset,
        }
    }
}

impl Slots {
    pub(crate) fn new(limits: Deadlines) -> Self {
        Slots {
            period: limits.period(),
            limits,
            arrivals: Mutex::new(Vec::new()),
            table: Mutex::new(Vec::new()),
        }
    }

    /// The ticker's period.
    pub(crate) fn period(&self) -> Duration {
        self.period
    }

    /// A connection was accepted at `now`.
    pub(crate) fn add(&self, conn: &ConnState, now: Instant) {
        self.arrivals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((conn.clone(), now));
    }

    /// The table, with the connections that arrived since the last look
    /// moved into it (the lock order is always table, then arrivals).
    fn settled(&self) -> std::sync::MutexGuard<'_, Vec<Entry>> {
        let mut table = self.lock();
        let mut arrivals = self.arrivals.lock().unwrap_or_else(|p| p.into_inner());
        table.extend(
            arrivals
                .drain(..)
                .map(|(conn, born)| Entry::new(conn, born)),
        );
        table
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Entry>> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One tick: forgets closed connections, cuts those past a deadline.
    pub(crate) fn check(&self, now: Instant) {
        let mut table = self.settled();
        table.retain(|e| e.conn.progress().flags.load(Relaxed) & Progress::CLOSED == 0);
        for e in table.iter_mut() {
            if e.conn.progress().is_cut() {
                continue;
            }
            if let Some(why) = e.tick(&self.limits, self.period, now) {
                tracing::debug!(peer = ?e.conn.peer(), ?why, "cutting a connection that makes no progress");
                e.conn.progress().cut(why.cut());
            }
        }
    }

    /// Every slot is taken and a client is waiting: cuts the connection
    /// that made the least progress among those the server waits on, if
    /// any moves less than the minimum rate. Idle keep-alive connections
    /// go first (oldest first), then the slowest peers; connections the
    /// server itself keeps busy, and those younger than a second, are
    /// spared. Returns whether one was cut.
    pub(crate) fn shed(&self, now: Instant) -> bool {
        let table = self.settled();
        let floor = self.limits.min_rate.max(1);
        let young = Duration::from_secs(1).max(self.period);
        let victim = table
            .iter()
            .filter(|e| {
                let p = e.conn.progress();
                p.flags.load(Relaxed) & Progress::CLOSED == 0
                    && !p.is_cut()
                    && now.saturating_duration_since(e.born) >= young
            })
            .filter_map(|e| {
                let idle = !e.in_flight && e.requests > 0 && e.head_seen.is_none();
                let score = e.score.filter(|s| *s < floor)?;
                // Idle first, then the lowest rate, then the oldest phase.
                Some(((!idle, score, e.phase_start), e))
            })
            .min_by_key(|(key, _)| *key);
        match victim {
            Some(((busy, _, _), e)) => {
                tracing::debug!(peer = ?e.conn.peer(), "every slot is taken: shedding the slowest connection");
                e.conn
                    .progress()
                    .cut(if busy { Cut::Reset } else { Cut::Close });
                true
            }
            None => false,
        }
    }
}

impl Entry {
    fn new(conn: ConnState, born: Instant) -> Self {
        Entry {
            conn,
            born,
            requests: 0,
            in_flight: false,
            phase_start: born,
            phase_read: 0,
            head_seen: None,
            waited: Duration::ZERO,
            blocked: None,
            frozen: None,
            read: 0,
            written: 0,
            score: None,
        }
    }

    /// Updates the view of the connection at `now`; the rule it broke, if
    /// any.
    fn tick(&mut self, lim: &Deadlines, period: Duration, now: Instant) -> Option<Verdict> {
        let p = self.conn.progress();
        let flags = p.flags.load(Relaxed);
        let requests = p.requests.load(Relaxed);
        let read = p.read.load(Relaxed);
        let written = p.written.load(Relaxed);
        let in_flight = flags & Progress::IN_FLIGHT != 0;
        if requests != self.requests || in_flight != self.in_flight {
            self.requests = requests;
            self.in_flight = in_flight;
            self.phase_start = now;
            // A request's bytes since the last tick are its own (its head
            // and the start of its body); between requests, they belong to
            // the exchange that just ended.
            self.phase_read = if in_flight { self.read } else { read };
            self.head_seen = None;
            self.waited = Duration::ZERO;
        }
        let rate = |bytes: u64, over: Duration| -> u64 {
            (bytes as f64 / over.as_secs_f64().max(1e-3)) as u64
        };
        // The last write found the send buffer full: the peer reads slowly
        // or not at all.
        if flags & Progress::WRITE_BLOCKED != 0 {
            let (since, at) = *self.blocked.get_or_insert((now, written));
            let stuck = now.saturating_duration_since(since);
            self.score = Some(if stuck < period {
                u64::MAX
            } else {
                rate(written.wrapping_sub(at), stuck)
            });
            let frozen = if written != self.written {
                *self.frozen.insert(now)
            } else {
                // No byte went out over the last tick either.
                let last = now.checked_sub(period).unwrap_or(now).max(self.born);
                *self.frozen.get_or_insert(last)
            };
            self.read = read;
            self.written = written;
            return (now.saturating_duration_since(frozen) >= lim.write).then_some(Verdict::Write);
        }
        self.blocked = None;
        self.frozen = None;
        self.read = read;
        self.written = written;
        let phase = now.saturating_duration_since(self.phase_start);
        if !in_flight {
            let head = read.wrapping_sub(self.phase_read);
            if head > 0 && self.head_seen.is_none() {
                self.head_seen = Some(now);
            }
            self.score = Some(rate(head, phase));
            return match (requests, self.head_seen) {
                // The first head counts from the connection's start.
                (0, _) if phase >= lim.header => Some(Verdict::Head),
                (0, _) => None,
                (_, None) if phase >= lim.keepalive => Some(Verdict::Idle),
                (_, Some(seen)) if now.saturating_duration_since(seen) >= lim.header => {
                    Some(Verdict::Head)
                }
                _ => None,
            };
        }
        if flags & Progress::BODY_WAIT == 0 {
            // The service has the turn (or the answer streams freely).
            self.score = None;
            return None;
        }
        self.waited += period;
        let body = read.wrapping_sub(self.phase_read);
        self.score = Some(rate(body, self.waited));
        let allowed = if lim.min_rate == 0 {
            lim.body
        } else {
            lim.grace
                .max(Duration::from_secs_f64(body as f64 / lim.min_rate as f64))
                .min(lim.body)
        };
        (self.waited >= allowed).then_some(Verdict::Body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Deadlines {
        Deadlines {
            header: Duration::from_secs(10),
            keepalive: Duration::from_secs(15),
            body: Duration::from_secs(300),
            min_rate: 500,
            grace: Duration::from_secs(10),
            write: Duration::from_secs(30),
        }
    }

    /// Ticks `slots` every period from `start` for `for_secs` seconds;
    /// `each` runs before every tick. The second at which `conn` was cut.
    fn cut_at(
        slots: &Slots,
        conn: &ConnState,
        start: Instant,
        for_secs: u64,
        mut each: impl FnMut(&Progress, u64),
    ) -> Option<u64> {
        for s in 1..=for_secs {
            each(conn.progress(), s);
            slots.check(start + Duration::from_secs(s));
            if conn.progress().is_cut() {
                return Some(s);
            }
        }
        None
    }

    #[test]
    fn a_body_below_the_minimum_rate_is_cut_once_the_grace_has_passed() {
        let slots = Slots::new(limits());
        let t0 = Instant::now();
        let conn = ConnState::default();
        slots.add(&conn, t0);
        conn.progress().request();
        conn.progress().body_waits(true);
        // Four bytes a second: well below 500.
        let at = cut_at(&slots, &conn, t0, 60, |p, _| p.read(4));
        assert!(matches!(at, Some(10..=12)), "{at:?}");
        assert!(conn.progress().resets());
    }

    #[test]
    fn a_body_at_the_minimum_rate_is_not_cut_before_the_deadline() {
        let slots = Slots::new(Deadlines {
            body: Duration::from_secs(40),
            ..limits()
        });
        let t0 = Instant::now();
        let conn = ConnState::default();
        slots.add(&conn, t0);
        conn.progress().request();
        conn.progress().body_waits(true);
        let at = cut_at(&slots, &conn, t0, 60, |p, _| p.read(600));
        assert!(matches!(at, Some(40..=41)), "{at:?}");
    }

    #[test]
    fn time_the_service_spends_elsewhere_does_not_count() {
        let slots = Slots::new(limits());
        let t0 = Instant::now();
        let conn = ConnState::default();
        slots.add(&conn, t0);
        conn.progress().request();
        // The body came at once; the service (a slow upstream) answers late.
        conn.progress().read(100);
        let at = cut_at(&slots, &conn, t0, 120, |_, _| {});
        assert_eq!(at, None);
    }

    #[test]
    fn an_answer_nobody_reads_is_cut_after_the_write_timeout() {
        let slots = Slots::new(limits());
        let t0 = Instant::now();
        let conn = ConnState::default();
        slots.add(&conn, t0);
        conn.progress().request();
        conn.progress().wrote(Some(4 << 20));
        conn.progress().wrote(None);
        let at = cut_at(&slots, &conn, t0, 60, |_, _| {});
        assert!(matches!(at, Some(30..=32)), "{at:?}");
        // A slow reader that keeps reading is not.
        let conn = ConnState::default();
        slots.add(&conn, t0);
        conn.progress().request();
        let at = cut_at(&slots, &conn, t0, 60, |p, _| {
            p.wrote(Some(100));
            p.wrote(None);
        });
        assert_eq!(at, None);
    }

    #[test]
    fn heads_and_idle_connections_have_deadlines() {
        let slots = Slots::new(limits());
        let t0 = Instant::now();
        // A first head that never completes, though bytes keep coming.
        let first = ConnState::default();
        slots.add(&first, t0);
        let at = cut_at(&slots, &first, t0, 60, |p, _| p.read(1));
        assert!(matches!(at, Some(10..=11)), "{at:?}");
        // An idle keep-alive connection: closed, not reset.
        let idle = ConnState::default();
        slots.add(&idle, t0);
        idle.progress().request();
        idle.progress().read(100);
        idle.progress().answered();
        let at = cut_at(&slots, &idle, t0, 60, |_, _| {});
        assert!(matches!(at, Some(15..=17)), "{at:?}");
        assert!(!idle.progress().resets());
        // A later head counts from its first byte.
        let later = ConnState::default();
        slots.add(&later, t0);
        later.progress().request();
        later.progress().answered();
        let at = cut_at(&slots, &later, t0, 60, |p, s| {
            if s >= 5 {
                p.read(1)
            }
        });
        assert!(matches!(at, Some(15..=16)), "{at:?}");
    }

    #[test]
    fn shedding_takes_idle_then_the_slowest_and_spares_good_transfers() {
        let slots = Slots::new(limits());
        let t0 = Instant::now();
        let new = |slots: &Slots| {
            let c = ConnState::default();
            slots.add(&c, t0);
            c
        };
        let reader = new(&slots);
        reader.progress().request();
        let slow = new(&slots);
        slow.progress().request();
        slow.progress().body_waits(true);
        let slower = new(&slots);
        slower.progress().request();
        slower.progress().body_waits(true);
        let idle = new(&slots);
        idle.progress().request();
        idle.progress().answered();
        for s in 1..=3 {
            reader.progress().wrote(Some(1 << 20));
            reader.progress().wrote(None);
            slow.progress().read(100);
            slower.progress().read(10);
            slots.check(t0 + Duration::from_secs(s));
        }
        let now = t0 + Duration::from_secs(3);
        let order: Vec<bool> = (0..4).map(|_| slots.shed(now)).collect();
        assert_eq!(order, [true, true, true, false]);
        assert!(idle.progress().is_cut() && !idle.progress().resets());
        assert!(slower.progress().resets() && slow.progress().resets());
        assert!(!reader.progress().is_cut(), "a good download was shed");
        // Nobody younger than a second is shed.
        let young = new(&slots);
        assert!(!slots.shed(t0 + Duration::from_millis(500)));
        assert!(!young.progress().is_cut());
    }
}
