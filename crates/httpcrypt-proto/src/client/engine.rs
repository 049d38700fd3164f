//! The client's memory across exchanges (spec §6.5, §8, §11.5, §14.5):
//! what it keeps per server ([`HostState`]) and what a refusal or an
//! inner problem means for it. Time is a parameter; nothing here waits or
//! sends.

use crate::admission::{self, AdmitCookie};
use crate::cert::{self, DiscoveredKey, KeyCert};
use crate::error::problem_type;
use crate::inner::{self, Field, ResponseHead};
use crate::keys::{IdentityPublic, SessionKey};
use crate::outer;
use crate::replay;
use crate::ticket::{AnyTicket, ShortTicket, Ticket, TICKET_FIELD};
use crate::token::{self, RANDOM_FIELD};

use super::pq::{Pq, PqState, ServerKey, Suite};
use super::retry::Retry;

/// How long a client keeps echoing an admission cookie: the server accepts
/// it for at least one full cookie period (30 s by default).
pub const ADMIT_REUSE_SECS: u64 = 25;
/// How many requests a client presents one short ticket with before it asks
/// for a new one (spec §7.3): requests that carry the same ticket are
/// linkable to each other, as requests under one reused key pair are.
pub const SHORT_TICKET_REUSE: u32 = 16;
/// Seconds after its first use a client asks for a new short ticket.
pub const SHORT_TICKET_MAX_AGE: u64 = 600;

/// When a client asks for a new short ticket (spec §7.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShortPolicy {
    /// Requests per short ticket (at least 1; 1 asks on every request, so
    /// no two requests share a ticket).
    pub reuse: u32,
    /// Seconds after its first use.
    pub max_age: u64,
}

/// How much a held short ticket has been used (spec §7.3): the count and
/// clock that [`ShortPolicy`] is applied to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShortUse {
    /// Requests that presented it since it arrived or was last asked about.
    uses: u32,
    /// When that count started (unix seconds): its first use, or the last
    /// request that asked for a new one.
    first_used: Option<u64>,
}

impl ShortUse {
    /// Whether a request at `now` asks for a new short ticket under
    /// `policy`: on the ticket's last use, or once it is `max_age` old.
    pub fn asks(&self, policy: &ShortPolicy, now: u64) -> bool {
        self.uses.saturating_add(1) >= policy.reuse
            || self
                .first_used
                .is_some_and(|f| now >= f.saturating_add(policy.max_age))
    }

    /// Counts one request at `now` that presented the ticket.
    pub fn used(&mut self, now: u64) {
        self.uses = self.uses.saturating_add(1);
        self.first_used.get_or_insert(now);
    }

    /// Notes that a request at `now` asked for a new ticket: the count
    /// starts again, so requests sent before the new ticket arrives
    /// (concurrent ones) present this one without asking too.
    pub fn asked(&mut self, now: u64) {
        self.uses = 0;
        self.first_used = Some(now);
    }
}

impl Default for ShortPolicy {
    fn default() -> Self {
        ShortPolicy {
            reuse: SHORT_TICKET_REUSE,
            max_age: SHORT_TICKET_MAX_AGE,
        }
    }
}

/// A short ticket the client holds, with its use so far.
#[derive(Debug, Clone)]
struct HeldShort {
    ticket: ShortTicket,
    suite: Suite,
    used: ShortUse,
}

/// Largest problem document a client reads (refusals, inner problems).
pub const PROBLEM_LIMIT: usize = 64 * 1024;

/// Whether a field of an inner response is for the client itself (a
/// ticket, a token) rather than for its caller.
pub fn is_own_field(f: &Field) -> bool {
    f.is(TICKET_FIELD) || f.is(RANDOM_FIELD)
}

/// What a client keeps about one server (`host[:port]`).
#[derive(Debug, Default)]
pub struct HostState {
    keys: Vec<DiscoveredKey>,
    /// A DNSSEC-validated identity learnt by discovery (a pinned identity
    /// lives in the client's settings and takes precedence).
    identity: Option<IdentityPublic>,
    fetched: u64,
    /// Seconds the keys may be reused; 0: until none is valid.
    max_age: u64,
    ticket: Option<(Ticket, SessionKey)>,
    /// The suite of the session the ticket resumes.
    ticket_suite: Suite,
    /// The last short ticket (spec §7.3), kept apart from the v1 one.
    short: Option<HeldShort>,
    /// Suite 2: keys, pin, and whether the last discovery found none.
    pq: PqState,
    /// The last `Random` token the server gave, and the session key it is bound to.
    token: Option<(Vec<u8>, SessionKey)>,
    /// Server time minus local time, learnt from a `stale` answer.
    clock_offset: i64,
    /// The last admission cookie the server issued, and when (unix seconds).
    admit: Option<(AdmitCookie, u64)>,
}

impl HostState {
    /// The key to use at `now`, if the cached keys are still fresh and one
    /// of them is valid.
    pub fn fresh_key(&self, now: u64) -> Option<DiscoveredKey> {
        let fresh = self.max_age == 0 || now < self.fetched + self.max_age;
        if !fresh {
            return None;
        }
        cert::choose_key(&self.keys, now).ok().copied()
    }

    /// The key for the next request at `now` in mode `pq`, if what is held
    /// settles it; `None`: discover first. With suite 2 wanted, a fresh
    /// suite-2 key goes first; v1 keys serve only while the origin is not
    /// pinned and the last discovery found no suite 2 (spec/hybrid.md H5).
    pub fn next_key(&self, pq: Pq, now: u64) -> Option<ServerKey> {
        if pq != Pq::Off {
            if let Some(k) = self.pq.fresh_key(now) {
                return Some(ServerKey::Hybrid(k.clone()));
            }
            if self.pq.pinned(pq, now) || !self.pq.absent() {
                return None;
            }
        }
        self.fresh_key(now).map(ServerKey::Classical)
    }

    /// What the client keeps for suite 2.
    pub fn pq(&self) -> &PqState {
        &self.pq
    }

    /// What the client keeps for suite 2, to update it.
    pub fn pq_mut(&mut self) -> &mut PqState {
        &mut self.pq
    }

    /// The cached keys.
    pub fn keys(&self) -> &[DiscoveredKey] {
        &self.keys
    }

    /// Caches `keys`, fetched at `now`, for `max_age` seconds (0: until
    /// none is valid).
    pub fn set_keys(&mut self, keys: Vec<DiscoveredKey>, now: u64, max_age: u64) {
        self.keys = keys;
        self.fetched = now;
        self.max_age = max_age;
    }

    /// The identity discovery validated with DNSSEC, if any.
    pub fn identity(&self) -> Option<IdentityPublic> {
        self.identity
    }

    /// Keeps an identity discovery validated with DNSSEC (spec §6.4).
    pub fn learn_identity(&mut self, identity: IdentityPublic) {
        self.identity = Some(identity);
    }

    /// `now` corrected by what the last `stale` answer taught.
    pub fn corrected(&self, now: u64) -> u64 {
        now.saturating_add_signed(self.clock_offset)
    }

    /// The last ticket and the session key it carries.
    pub fn ticket(&self) -> Option<&(Ticket, SessionKey)> {
        self.ticket.as_ref()
    }

    /// The ticket to present with a request to `key`: a ticket of a v1
    /// session is never presented to a suite-2 key, which would make the
    /// request classical (spec/hybrid.md H3); a hybrid session's ticket may
    /// go anywhere, since it carries the hybrid key.
    pub fn ticket_for(&self, key: &ServerKey) -> Option<(&(Ticket, SessionKey), Suite)> {
        let t = self.ticket.as_ref()?;
        match (key.suite(), self.ticket_suite) {
            (Suite::Hybrid, Suite::Classical) => None,
            _ => Some((t, self.ticket_suite)),
        }
    }

    /// The short ticket to present with a request to `key`, by the same
    /// suite rule as [`HostState::ticket_for`].
    pub fn short_ticket_for(&self, key: &ServerKey) -> Option<(&ShortTicket, Suite)> {
        let t = self.short.as_ref()?;
        match (key.suite(), t.suite) {
            (Suite::Hybrid, Suite::Classical) => None,
            _ => Some((&t.ticket, t.suite)),
        }
    }

    /// Whether the next request at `now` asks for a short ticket: when none
    /// is held, when the one held is on its last use under `policy`, or
    /// when it was first used `policy.max_age` seconds ago or more.
    pub fn asks_ticket(&self, policy: &ShortPolicy, now: u64) -> bool {
        match &self.short {
            None => true,
            Some(t) => t.used.asks(policy, now),
        }
    }

    /// Notes that a request at `now` asked for a new short ticket: the
    /// held one's count starts again, so requests sent before the new
    /// ticket arrives (concurrent ones) present it without asking too.
    pub fn asked_ticket(&mut self, now: u64) {
        if let Some(t) = &mut self.short {
            t.used.asked(now);
        }
    }

    /// Forgets the short ticket held (its ticket key is gone, spec §7.3).
    pub fn drop_short_ticket(&mut self) {
        self.short = None;
    }

    /// Counts one request at `now` that presented the short ticket held.
    pub fn used_short_ticket(&mut self, now: u64) {
        if let Some(t) = &mut self.short {
            t.used.used(now);
        }
    }

    /// The token to present under session key `k`: only one the server
    /// issued under that very key proves an earlier round trip (spec §8).
    pub fn token_for(&self, k: &SessionKey) -> Option<&[u8]> {
        match &self.token {
            Some((t, bound)) if bound == k => Some(t),
            _ => None,
        }
    }

    /// The admission cookie to echo at `now` (spec §14.5): one issued less
    /// than [`ADMIT_REUSE_SECS`] ago, on a fresh-key request only (tickets
    /// skip the defence).
    pub fn admit_cookie(&self, now: u64, with_ticket: bool) -> Option<AdmitCookie> {
        match self.admit {
            Some((c, at)) if !with_ticket && now < at + ADMIT_REUSE_SECS => Some(c),
            _ => None,
        }
    }

    /// Takes an `unknown-key` refusal's certificates (spec §4.4): in
    /// authenticated mode (`identity`, or `require_identity` without one)
    /// only those the identity signed. The ticket is dropped; usable
    /// certificates replace the keys, otherwise the keys are cleared so the
    /// next attempt finds keys again. Returns whether they were usable.
    pub fn took_unknown_key(
        &mut self,
        certs: Vec<KeyCert>,
        identity: Option<&IdentityPublic>,
        require_identity: bool,
        now: u64,
    ) -> bool {
        let certs: Vec<KeyCert> = match identity {
            Some(id) => certs.into_iter().filter(|c| c.verify(id).is_ok()).collect(),
            None if require_identity => Vec::new(),
            None => certs,
        };
        let usable = cert::choose(&certs, now, identity).is_ok();
        self.ticket = None;
        self.short = None;
        if usable {
            self.keys = certs.iter().map(DiscoveredKey::from).collect();
            self.fetched = now;
        } else {
            self.keys.clear();
        }
        usable
    }

    /// Takes the suite-2 lines (`hybrid_certs`) of an `unknown-key`
    /// refusal in mode `pq` (see [`PqState::took_unknown_key`]); when they
    /// settle the retry the ticket is dropped as for v1. `false`: take the
    /// refusal's v1 certificates with [`HostState::took_unknown_key`].
    pub fn took_unknown_key_hybrid(
        &mut self,
        pq: Pq,
        lines: &[String],
        identity: Option<&IdentityPublic>,
        require_identity: bool,
        now: u64,
    ) -> bool {
        if pq == Pq::Off {
            return false;
        }
        let settled = self
            .pq
            .took_unknown_key(pq, lines, identity, require_identity, now);
        if settled {
            self.ticket = None;
            self.short = None;
        }
        settled
    }

    /// Takes an admission challenge's cookie, received at `now`.
    pub fn took_admission(&mut self, cookie: AdmitCookie, now: u64) {
        self.admit = Some((cookie, now));
    }

    /// Keeps the ticket and the token an authenticated inner response head
    /// carries, bound to the session key `k` they were sent under; a token
    /// that came with a short ticket is bound to that ticket's key, which
    /// the client presents next (spec §7.3).
    pub fn took_head(&mut self, fields: &[Field], k: &SessionKey) {
        self.took_head_in(fields, k, Suite::Classical);
    }

    /// [`HostState::took_head`] for an exchange in `suite` (a ticket of a
    /// hybrid session resumes it as hybrid, spec/hybrid.md H3).
    pub fn took_head_in(&mut self, fields: &[Field], k: &SessionKey, suite: Suite) {
        let issued = inner::field(fields, TICKET_FIELD).and_then(|t| AnyTicket::from_field(t).ok());
        if let Some(r) = inner::field(fields, RANDOM_FIELD) {
            let short = match &issued {
                Some(AnyTicket::Short(t)) => Some(t),
                _ => None,
            };
            self.token = Some((r.to_vec(), token::bound_key(k, short).clone()));
        }
        match issued {
            Some(AnyTicket::V1(t)) => {
                self.ticket = Some((t, k.clone()));
                self.ticket_suite = suite;
            }
            Some(AnyTicket::Short(ticket)) => {
                self.short = Some(HeldShort {
                    ticket,
                    suite,
                    used: ShortUse::default(),
                });
            }
            None => {}
        }
    }

    /// Judges an authenticated 425 answer to a `request_method` request,
    /// whose whole (small) body is `body` (see [`needs_problem_body`]).
    /// `stale` corrects the clock from the answer's `Date`; `stale` and
    /// `token-required` are worth one more attempt. A problem in answer to
    /// `HEAD` has no document (erratum E2): it counts as stale, since
    /// retrying a safe request once is harmless and the server's `Date` is
    /// in the head. `None`: the answer goes to the caller.
    pub fn took_problem(
        &mut self,
        request_method: &str,
        head: &ResponseHead,
        body: &[u8],
        now: u64,
    ) -> Option<Retry> {
        let p = outer::parse_problem(body).ok();
        let head_problem = request_method == "HEAD"
            && inner::field(&head.fields, "content-type") == Some(outer::PROBLEM_TYPE.as_bytes());
        if head_problem
            || p.as_ref()
                .is_some_and(|p| p.type_uri == problem_type::STALE)
        {
            if let Ok(server) = replay::check_date(inner::field(&head.fields, "date"), 0, u64::MAX)
            {
                self.clock_offset = server as i64 - now as i64;
            }
            return Some(Retry::Stale);
        }
        if p.is_some_and(|p| p.type_uri == problem_type::TOKEN_REQUIRED) {
            // The answer carried a token (and a ticket, so the next attempt
            // runs under the session key the token is bound to).
            return Some(Retry::TokenRequired);
        }
        None
    }
}

/// Whether an authenticated inner answer may be a protocol problem the
/// client acts on (`stale`, `token-required`: status 425), so that its
/// small body must be read before anything goes to the caller.
pub fn needs_problem_body(head: &ResponseHead) -> bool {
    head.status == 425
}

/// What a non-200 outer answer (unauthenticated: only hints, never data)
/// asks of the client.
#[derive(Debug)]
pub enum Refusal {
    /// `unknown-key` (spec §4.4), with the certificates it offered.
    UnknownKey(Vec<KeyCert>),
    /// A 429 admission challenge (spec §14): echo this cookie.
    Admission(AdmitCookie),
    /// A 429 `busy`: wait this many seconds.
    Busy(u64),
    /// Anything else: the call fails with this problem type (empty if none).
    Other(String),
}

impl Refusal {
    /// Whether this refusal, with status `status`, of a request that
    /// presented a short ticket says the ticket's key is gone: a 400
    /// `malformed` (`no_cookie`), since the contract's cookie shape (§11.3)
    /// does not cover short tickets. The client drops the ticket and tries
    /// once more with a key (spec §7.3).
    pub fn drops_short_ticket(&self, status: u16) -> bool {
        matches!(self, Refusal::Other(t) if status == 400 && t == problem_type::MALFORMED)
    }
}

/// Reads a non-200 outer answer with status `status` and body `body`.
pub fn judge_refusal(status: u16, body: &[u8]) -> Refusal {
    let problem = outer::parse_problem(body).ok();
    let type_uri = problem.map(|p| (p.type_uri, p.certs));
    match type_uri {
        Some((t, certs)) if t == problem_type::UNKNOWN_KEY => Refusal::UnknownKey(
            certs
                .iter()
                .filter_map(|l| KeyCert::from_text(l).ok())
                .collect(),
        ),
        other => {
            if status == 429 {
                match admission::parse_refusal(body) {
                    Ok(admission::Refusal::Admission(c)) => return Refusal::Admission(c),
                    Ok(admission::Refusal::Busy(secs)) => return Refusal::Busy(secs),
                    Err(_) => {}
                }
            }
            Refusal::Other(other.map(|(t, _)| t).unwrap_or_default())
        }
    }
}

/// How long the certificates of an `OPTIONS {mount}/` answer with this
/// `Cache-Control` value may be reused, in seconds (spec §6.5, §6.6): its
/// `max-age`, where `max-age=0` (a rotation is due) means "ask again soon",
/// not "keep forever" as a missing `max-age` (0) does.
pub fn options_max_age(cache_control: Option<&str>) -> u64 {
    cache_control
        .and_then(|v| {
            v.split(',')
                .find_map(|d| d.trim().strip_prefix("max-age=")?.parse().ok())
        })
        .map_or(0, |age: u64| age.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{IdentityKey, KexSecret};
    use rand_chacha::rand_core::SeedableRng;
    use rand_chacha::ChaCha20Rng;

    const NOW: u64 = 1_700_000_000;

    fn cert(identity: &IdentityKey, serial: u32, rng: &mut ChaCha20Rng) -> KeyCert {
        let kex = KexSecret::generate(rng);
        KeyCert::sign(
            identity,
            serial,
            (NOW - 60) as u32,
            (NOW + 3600) as u32,
            *kex.public(),
        )
    }

    #[test]
    fn keys_stay_fresh_for_their_max_age() {
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let id = IdentityKey::generate(&mut rng);
        let keys: Vec<DiscoveredKey> = [cert(&id, 1, &mut rng), cert(&id, 2, &mut rng)]
            .iter()
            .map(DiscoveredKey::from)
            .collect();
        let mut h = HostState::default();
        assert!(h.fresh_key(NOW).is_none());
        h.set_keys(keys, NOW, 10);
        assert_eq!(h.fresh_key(NOW + 9).map(|k| k.serial), Some(2));
        assert!(h.fresh_key(NOW + 10).is_none());
        h.max_age = 0;
        assert!(h.fresh_key(NOW + 10).is_some());
        assert!(h.fresh_key(NOW + 7200).is_none(), "no key valid then");
    }

    #[test]
    fn unknown_key_certificates_count_only_under_the_identity() {
        let mut rng = ChaCha20Rng::seed_from_u64(2);
        let id = IdentityKey::generate(&mut rng);
        let other = IdentityKey::generate(&mut rng);
        let good = cert(&id, 5, &mut rng);
        let bad = cert(&other, 6, &mut rng);
        let mut h = HostState {
            ticket: Some((
                Ticket([0; crate::ticket::TICKET_LEN]),
                session_key(&mut rng),
            )),
            ..HostState::default()
        };

        assert!(h.took_unknown_key(
            vec![good.clone(), bad.clone()],
            Some(&id.public()),
            false,
            NOW
        ));
        assert!(h.ticket().is_none());
        assert_eq!(h.keys().len(), 1);
        assert_eq!(h.fresh_key(NOW).map(|k| k.serial), Some(5));

        assert!(!h.took_unknown_key(vec![bad.clone()], Some(&id.public()), false, NOW));
        assert!(h.keys().is_empty(), "the next attempt finds keys again");
        assert!(!h.took_unknown_key(vec![good.clone()], None, true, NOW));
        assert!(h.took_unknown_key(vec![bad], None, false, NOW));
    }

    fn session_key(rng: &mut ChaCha20Rng) -> SessionKey {
        let a = KexSecret::generate(rng);
        let b = KexSecret::generate(rng);
        a.session_key(b.public()).expect("a session key")
    }

    #[test]
    fn the_token_is_presented_only_under_its_own_session_key() {
        let mut rng = ChaCha20Rng::seed_from_u64(3);
        let (k1, k2) = (session_key(&mut rng), session_key(&mut rng));
        let mut h = HostState::default();
        h.took_head(&[Field::new("random", "tok")], &k1);
        assert_eq!(h.token_for(&k1), Some(&b"tok"[..]));
        assert_eq!(h.token_for(&k2), None);
        assert!(h.ticket().is_none(), "no ticket field, no ticket");
    }

    /// A token that arrives with a short ticket is bound to the ticket's
    /// key, under which the next request goes (spec §7.3, §8.4).
    #[test]
    fn a_token_with_a_short_ticket_is_bound_to_the_tickets_key() {
        let mut rng = ChaCha20Rng::seed_from_u64(4);
        let k = session_key(&mut rng);
        let tk = crate::ticket::TicketKey::new(crate::KeyId([1; 10]), [2; 32]);
        let short = tk.issue_short(&crate::KeyId([3; 10]), [4; 16]);
        let mut h = HostState::default();
        h.took_head(
            &[
                Field::new(TICKET_FIELD, short.to_field()),
                Field::new("random", "tok"),
            ],
            &k,
        );
        assert_eq!(h.token_for(short.key()), Some(&b"tok"[..]));
        assert_eq!(h.token_for(&k), None);
    }

    #[test]
    fn the_admission_cookie_is_echoed_while_young_and_never_with_a_ticket() {
        let mut h = HostState::default();
        let c = AdmitCookie([0; admission::COOKIE_LEN]);
        assert_eq!(h.admit_cookie(NOW, false), None);
        h.took_admission(c, NOW);
        assert_eq!(h.admit_cookie(NOW + ADMIT_REUSE_SECS - 1, false), Some(c));
        assert_eq!(h.admit_cookie(NOW, true), None);
        assert_eq!(h.admit_cookie(NOW + ADMIT_REUSE_SECS, false), None);
    }

    fn head(status: u16, fields: Vec<Field>) -> ResponseHead {
        ResponseHead {
            status,
            reason: String::new(),
            fields,
        }
    }

    fn problem(type_uri: &str) -> Vec<u8> {
        format!(r#"{{"type":"{type_uri}","title":"t","status":425}}"#).into_bytes()
    }

    #[test]
    fn stale_corrects_the_clock_and_token_required_retries() {
        let mut h = HostState::default();
        let date = replay::format_date(NOW + 300);
        let stale = head(425, vec![Field::new("Date", date.as_str())]);
        assert!(needs_problem_body(&stale));
        assert_eq!(
            h.took_problem("GET", &stale, &problem(problem_type::STALE), NOW),
            Some(Retry::Stale)
        );
        assert_eq!(h.corrected(NOW), NOW + 300);
        assert_eq!(
            h.took_problem(
                "POST",
                &head(425, vec![]),
                &problem(problem_type::TOKEN_REQUIRED),
                NOW
            ),
            Some(Retry::TokenRequired)
        );
        assert_eq!(
            h.took_problem(
                "GET",
                &head(425, vec![]),
                &problem(problem_type::REPLAY),
                NOW
            ),
            None
        );
        assert_eq!(
            h.took_problem("GET", &head(425, vec![]), b"not json", NOW),
            None
        );
        // The answer to HEAD has no document: a problem type means stale.
        let ct = Field::new("content-type", outer::PROBLEM_TYPE);
        assert_eq!(
            h.took_problem("HEAD", &head(425, vec![ct]), b"", NOW),
            Some(Retry::Stale)
        );
        assert!(!needs_problem_body(&head(200, vec![])));
    }

    #[test]
    fn options_answers_are_cached_for_their_max_age() {
        assert_eq!(options_max_age(None), 0);
        assert_eq!(options_max_age(Some("public, max-age=300")), 300);
        assert_eq!(options_max_age(Some("max-age=0")), 1);
        assert_eq!(options_max_age(Some("no-cache")), 0);
    }

    #[test]
    fn refusals() {
        let mut rng = ChaCha20Rng::seed_from_u64(4);
        let id = IdentityKey::generate(&mut rng);
        let c = cert(&id, 1, &mut rng);
        let body = format!(
            r#"{{"type":"{}","title":"t","status":404,"certs":["{}","garbage"]}}"#,
            problem_type::UNKNOWN_KEY,
            c.to_text()
        );
        match judge_refusal(404, body.as_bytes()) {
            Refusal::UnknownKey(certs) => assert_eq!(certs, vec![c]),
            other => panic!("{other:?}"),
        }
        let busy = format!(
            r#"{{"type":"{}","title":"t","status":429,"retry_after":2}}"#,
            problem_type::BUSY
        );
        assert!(matches!(
            judge_refusal(429, busy.as_bytes()),
            Refusal::Busy(2)
        ));
        match judge_refusal(503, busy.as_bytes()) {
            Refusal::Other(t) => assert_eq!(t, problem_type::BUSY),
            other => panic!("{other:?}"),
        }
        assert!(matches!(judge_refusal(500, b"oops"), Refusal::Other(t) if t.is_empty()));
    }

    #[test]
    fn suite_2_goes_first_and_v1_only_when_found_absent_and_unpinned() {
        use crate::hybrid::cert::{format_cert_list, HybridCert};
        use crate::hybrid::KemSecret;
        let mut rng = ChaCha20Rng::seed_from_u64(5);
        let id = IdentityKey::generate(&mut rng);
        let v1 = DiscoveredKey::from(&cert(&id, 1, &mut rng));
        let kem = KemSecret::from_seed([2; 64]);
        let hc = HybridCert::sign(
            &id,
            crate::profile::Profile::V1,
            2,
            (NOW - 60) as u32,
            (NOW + 3600) as u32,
            *KexSecret::generate(&mut rng).public(),
            kem.public().hash(),
        );
        let mut h = HostState::default();
        h.set_keys(vec![v1], NOW, 0);
        assert_eq!(h.next_key(Pq::Off, NOW), Some(ServerKey::Classical(v1)));
        assert_eq!(h.next_key(Pq::Prefer, NOW), None, "discover suite 2 first");
        h.pq_mut().took_none(Pq::Prefer, NOW).unwrap();
        assert_eq!(h.next_key(Pq::Prefer, NOW), Some(ServerKey::Classical(v1)));
        assert_eq!(h.next_key(Pq::Require, NOW), None);

        // A v1 session's ticket is not presented to a suite-2 key.
        let k = session_key(&mut rng);
        let ticket = Field::new(
            TICKET_FIELD,
            Ticket([7; crate::ticket::TICKET_LEN]).to_field(),
        );
        h.took_head(std::slice::from_ref(&ticket), &k);
        let body = format_cert_list(std::slice::from_ref(&hc), &[kem.public()]);
        let hk = h
            .pq_mut()
            .took_answer(Pq::Prefer, 200, body.as_bytes(), None, false, 0, NOW)
            .unwrap()
            .unwrap();
        let key = ServerKey::Hybrid(hk);
        assert_eq!(h.next_key(Pq::Prefer, NOW), Some(key.clone()));
        assert_eq!(h.next_key(Pq::Off, NOW), Some(ServerKey::Classical(v1)));
        assert!(h.ticket_for(&key).is_none());
        assert!(h.ticket_for(&ServerKey::Classical(v1)).is_some());
        // A hybrid session's ticket goes to the suite-2 key, as hybrid.
        h.took_head_in(std::slice::from_ref(&ticket), &k, Suite::Hybrid);
        assert_eq!(h.ticket_for(&key).map(|(_, s)| s), Some(Suite::Hybrid));
        // Pinned: past the keys' life, nothing settles it without discovery.
        assert_eq!(h.next_key(Pq::Prefer, NOW + 3601), None);
    }

    #[test]
    fn only_a_malformed_400_drops_a_short_ticket() {
        let (status, body) = crate::outer::format_problem(&crate::Error::NoCookie, &[]).unwrap();
        assert!(judge_refusal(status, body.as_bytes()).drops_short_ticket(status));
        let (status, body) = crate::outer::format_problem(&crate::Error::Replay, &[]).unwrap();
        assert!(!judge_refusal(status, body.as_bytes()).drops_short_ticket(status));
        let (status, body) = crate::outer::format_problem(&crate::Error::UnknownKey, &[]).unwrap();
        assert!(!judge_refusal(status, body.as_bytes()).drops_short_ticket(status));
    }

    #[test]
    fn requests_sent_before_the_asked_ticket_arrives_do_not_ask_again() {
        use crate::ticket::TicketKey;
        let policy = ShortPolicy {
            reuse: 3,
            max_age: 600,
        };
        let mut h = HostState::default();
        let tk = TicketKey::new(crate::KeyId([1; 10]), [2; 32]);
        let t = tk.issue_short(&crate::KeyId([3; 10]), [4; 16]);
        let k = session_key(&mut ChaCha20Rng::seed_from_u64(4));
        h.took_head(&[Field::new(TICKET_FIELD, t.to_field())], &k);
        for at in [NOW, NOW + 1] {
            assert!(!h.asks_ticket(&policy, at));
            h.used_short_ticket(at);
        }
        // The third use asks; until the new ticket arrives, the next
        // (concurrent) requests present the held one without asking.
        assert!(h.asks_ticket(&policy, NOW + 2));
        h.used_short_ticket(NOW + 2);
        h.asked_ticket(NOW + 2);
        for at in [NOW + 2, NOW + 3] {
            assert!(!h.asks_ticket(&policy, at), "at {at}");
            h.used_short_ticket(at);
        }
        // Past the policy's age, it asks again.
        assert!(h.asks_ticket(&policy, NOW + 2 + 600));
    }

    #[test]
    fn a_short_ticket_is_presented_up_to_its_reuse_then_asked_for_again() {
        use crate::ticket::TicketKey;
        let mut rng = ChaCha20Rng::seed_from_u64(6);
        let id = IdentityKey::generate(&mut rng);
        let key = ServerKey::Classical(DiscoveredKey::from(&cert(&id, 1, &mut rng)));
        let policy = ShortPolicy {
            reuse: 3,
            max_age: 600,
        };
        let mut h = HostState::default();
        assert!(h.asks_ticket(&policy, NOW), "none held: ask");
        assert!(h.short_ticket_for(&key).is_none());
        let tk = TicketKey::new(crate::KeyId([1; 10]), [2; 32]);
        let give = |h: &mut HostState, b: u8| {
            let t = tk.issue_short(&crate::KeyId([3; 10]), [b; 16]);
            let k = session_key(&mut ChaCha20Rng::seed_from_u64(u64::from(b)));
            h.took_head(&[Field::new(TICKET_FIELD, t.to_field())], &k);
            t
        };
        let t1 = give(&mut h, 4);
        assert!(h.ticket().is_none(), "a short ticket is not a v1 one");
        // Uses 1 and 2 do not ask; use 3 (the last) asks.
        for (at, asks) in [(NOW, false), (NOW + 1, false), (NOW + 2, true)] {
            assert_eq!(h.short_ticket_for(&key).map(|(t, _)| t), Some(&t1));
            assert_eq!(h.asks_ticket(&policy, at), asks, "at {at}");
            h.used_short_ticket(at);
        }
        // The new ticket starts over.
        let t2 = give(&mut h, 5);
        assert_eq!(h.short_ticket_for(&key).map(|(t, _)| t), Some(&t2));
        assert!(!h.asks_ticket(&policy, NOW + 3));
        h.used_short_ticket(NOW + 3);
        // Age counts from the first use.
        assert!(!h.asks_ticket(&policy, NOW + 602));
        assert!(h.asks_ticket(&policy, NOW + 603));
        // Reuse 1: every request asks.
        let every = ShortPolicy {
            reuse: 1,
            max_age: 600,
        };
        give(&mut h, 6);
        assert!(h.asks_ticket(&every, NOW));
    }
}
