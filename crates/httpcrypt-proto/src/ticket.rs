//! Session tickets (spec §7.2): the server seals `k || kid || expiry` under
//! a ticket key so a returning client can skip the key agreement without
//! the server keeping per-client state.
//!
//! `ticket = tid(10) || n(24) || XChaCha20-Poly1305(ticket_key, n, k || kid || expiry, AD = tid)`
//!
//! Short tickets (spec §7.3, a project extension a client asks for with the
//! inner request field `Ticket: short`): the server draws `h` and derives
//! the key `k' = SHA3-256("hc1-short-ticket" || ticket_key || tid || kid || h)`;
//! the cookie carries only `tid` and `h`, and the ticket key names its `kid`.

use rand_core::CryptoRngCore;
use zeroize::Zeroizing;

use crate::b64;
use crate::error::{Error, Result};
use crate::keys::{KeyId, SessionKey, KID_LEN};
use crate::suite::{sha3_256, XChaCha, NONCE_LEN, TAG_LEN};

const PLAIN_LEN: usize = 32 + KID_LEN + 4;
/// Bytes after the ticket ID: nonce, ciphertext, tag (the cookie value).
pub const SEALED_TICKET_LEN: usize = NONCE_LEN + PLAIN_LEN + TAG_LEN;
/// Bytes of a whole ticket.
pub const TICKET_LEN: usize = KID_LEN + SEALED_TICKET_LEN;
/// Inner response field carrying a ticket.
pub const TICKET_FIELD: &str = "Ticket";

/// Bytes of a short ticket's random part `h` (the cookie value, spec §7.3).
pub const SHORT_H_LEN: usize = 16;
/// Bytes of a short ticket as the `Ticket` response field carries it:
/// `tid || h || k'`.
pub const SHORT_TICKET_LEN: usize = KID_LEN + SHORT_H_LEN + 32;
/// The value of the inner request field [`TICKET_FIELD`] that asks for a
/// short ticket (spec §7.3).
pub const ASK_SHORT: &str = "short";
/// The value of the inner request field [`TICKET_FIELD`] that declines any
/// ticket for this answer (spec §7.3): a client that will not resume.
pub const DECLINE: &str = "none";

/// What a request's inner [`TICKET_FIELD`] asks of its answer (spec §7.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TicketAsk {
    /// No field, or a value that is no ask: tickets as D29 says.
    Unasked,
    /// `Ticket: short`: a short ticket.
    Short,
    /// `Ticket: none`: no ticket of either form.
    Decline,
}

impl TicketAsk {
    /// The ask of a request whose `Ticket` field is `value`.
    pub fn of(value: Option<&[u8]>) -> Self {
        match value {
            Some(v) if v == ASK_SHORT.as_bytes() => TicketAsk::Short,
            Some(v) if v == DECLINE.as_bytes() => TicketAsk::Decline,
            _ => TicketAsk::Unasked,
        }
    }
}
/// Domain-separation label of the short-ticket key derivation.
const SHORT_LABEL: &[u8] = b"hc1-short-ticket";

/// The ID under which a suite-2 key table holds a ticket key for short
/// tickets (spec/hybrid.md, `httpcrypt.md` §7.3): a server tries suite 1
/// first, and a short ticket carries no `kid`, so the suite-2 one must not
/// name a ticket key the suite-1 table holds.
pub fn suite2_tid(tid: &KeyId) -> KeyId {
    let h = sha3_256(&[b"hc1-short-ticket-suite2", &tid.0]);
    KeyId(h[..KID_LEN].try_into().expect("fixed layout"))
}

/// A ticket key and its ID. Rotates with the kex keys.
pub struct TicketKey {
    tid: KeyId,
    key: Zeroizing<[u8; 32]>,
}

impl core::fmt::Debug for TicketKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "TicketKey({:?})", self.tid)
    }
}

/// What a ticket holds once opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TicketContents {
    /// The session key.
    pub key: SessionKey,
    /// The kex key the session was agreed under.
    pub kid: KeyId,
    /// Last valid second (never after the kid's `not_after`).
    pub expiry: u32,
}

impl TicketKey {
    /// A ticket key from its parts.
    pub fn new(tid: KeyId, key: [u8; 32]) -> Self {
        TicketKey {
            tid,
            key: Zeroizing::new(key),
        }
    }

    /// A fresh random ticket key.
    pub fn generate(rng: &mut impl CryptoRngCore) -> Self {
        let mut tid = [0u8; KID_LEN];
        rng.fill_bytes(&mut tid);
        let mut key = Zeroizing::new([0u8; 32]);
        rng.fill_bytes(&mut key[..]);
        Self::new(KeyId(tid), *key)
    }

    /// The ticket-key ID.
    pub fn tid(&self) -> KeyId {
        self.tid
    }

    /// The raw key bytes, for storage.
    pub fn to_bytes(&self) -> Zeroizing<[u8; 32]> {
        self.key.clone()
    }

    /// Seals a ticket with the nonce `n` (fresh random per ticket).
    pub fn seal(&self, contents: &TicketContents, n: [u8; NONCE_LEN]) -> Ticket {
        let mut t = [0u8; TICKET_LEN];
        t[..KID_LEN].copy_from_slice(&self.tid.0);
        t[KID_LEN..KID_LEN + NONCE_LEN].copy_from_slice(&n);
        let body = &mut t[KID_LEN + NONCE_LEN..];
        body[..32].copy_from_slice(contents.key.as_bytes());
        body[32..32 + KID_LEN].copy_from_slice(&contents.kid.0);
        body[32 + KID_LEN..PLAIN_LEN].copy_from_slice(&contents.expiry.to_be_bytes());
        let tag = XChaCha::new(&self.key).seal_in_place(&n, &self.tid.0, &mut body[..PLAIN_LEN]);
        body[PLAIN_LEN..].copy_from_slice(&tag);
        Ticket(t)
    }

    /// The key `k'` of the short ticket `(tid, h)` issued for a session
    /// under `kid` (spec §7.3).
    pub fn short_key(&self, kid: &KeyId, h: &[u8; SHORT_H_LEN]) -> SessionKey {
        let k = Zeroizing::new(sha3_256(&[
            SHORT_LABEL,
            &self.key[..],
            &self.tid.0,
            &kid.0,
            h,
        ]));
        SessionKey::from_bytes(*k)
    }

    /// A short ticket with the random part `h` (fresh random per ticket)
    /// for a session under `kid`.
    pub fn issue_short(&self, kid: &KeyId, h: [u8; SHORT_H_LEN]) -> ShortTicket {
        ShortTicket {
            tid: self.tid,
            h,
            key: self.short_key(kid, &h),
        }
    }

    /// Opens `ticket[10..]` (as carried in the cookie). A ticket that fails
    /// to open or has expired at `now` is `unknown_key` (spec §11).
    pub fn open(&self, sealed: &[u8; SEALED_TICKET_LEN], now: u64) -> Result<TicketContents> {
        let n: [u8; NONCE_LEN] = sealed[..NONCE_LEN].try_into().expect("fixed layout");
        let tag: [u8; TAG_LEN] = sealed[NONCE_LEN + PLAIN_LEN..]
            .try_into()
            .expect("fixed layout");
        let mut plain = Zeroizing::new([0u8; PLAIN_LEN]);
        plain.copy_from_slice(&sealed[NONCE_LEN..NONCE_LEN + PLAIN_LEN]);
        XChaCha::new(&self.key)
            .open_in_place(&n, &self.tid.0, &tag, &mut plain[..])
            .map_err(|_| Error::UnknownKey)?;
        let key: [u8; 32] = plain[..32].try_into().expect("fixed layout");
        let kid: [u8; KID_LEN] = plain[32..32 + KID_LEN].try_into().expect("fixed layout");
        let expiry = u32::from_be_bytes(plain[32 + KID_LEN..].try_into().expect("fixed layout"));
        TicketContents {
            key: SessionKey::from_bytes(key),
            kid: KeyId(kid),
            expiry,
        }
        .unexpired(now)
    }
}

impl TicketContents {
    /// The contents, if the ticket is still valid at `now` (`unknown_key`
    /// after its expiry, spec §11).
    fn unexpired(self, now: u64) -> Result<Self> {
        if now > u64::from(self.expiry) {
            return Err(Error::UnknownKey);
        }
        Ok(self)
    }
}

/// The last ticket opened, and what it held: a server keeps one per
/// connection, where a client presents the same ticket with every request.
/// The same ticket bytes under the same ticket key skip the AEAD (a v1
/// ticket) or the SHA3-256 (a short one); the expiry rule of
/// [`TicketKey::open`] still applies to v1 tickets, and a short ticket's
/// key is only asked for once its ticket key and kex key were found
/// unexpired (`ServerKeys::short_ticket_key`).
#[derive(Debug, Default)]
pub struct LastOpened(Option<Opened>);

#[derive(Debug)]
enum Opened {
    V1(KeyId, [u8; SEALED_TICKET_LEN], TicketContents),
    Short(DerivedShort),
}

/// A short ticket's key `k'` with what it was derived from.
#[derive(Debug)]
struct DerivedShort {
    tid: KeyId,
    kid: KeyId,
    h: [u8; SHORT_H_LEN],
    key: SessionKey,
}

impl DerivedShort {
    /// Derives the key of `(kid, h)` under `tk` with `derive`.
    fn new(
        tk: &TicketKey,
        kid: &KeyId,
        h: &[u8; SHORT_H_LEN],
        derive: impl FnOnce() -> SessionKey,
    ) -> Self {
        DerivedShort {
            tid: tk.tid,
            kid: *kid,
            h: *h,
            key: derive(),
        }
    }

    /// The key, when it is the one of `(kid, h)` under `tk`.
    fn key_for(&self, tk: &TicketKey, kid: &KeyId, h: &[u8; SHORT_H_LEN]) -> Option<&SessionKey> {
        (self.tid == tk.tid && self.kid == *kid && self.h == *h).then_some(&self.key)
    }
}

impl LastOpened {
    /// [`TicketKey::open`], answered from memory when `sealed` is the ticket
    /// this opened last under `tk`; a ticket that opens is remembered.
    pub fn open(
        &mut self,
        tk: &TicketKey,
        sealed: &[u8; SEALED_TICKET_LEN],
        now: u64,
    ) -> Result<TicketContents> {
        if let Some(Opened::V1(tid, last, contents)) = &self.0 {
            if *tid == tk.tid && last == sealed {
                return contents.clone().unexpired(now);
            }
        }
        let contents = tk.open(sealed, now)?;
        self.0 = Some(Opened::V1(tk.tid, *sealed, contents.clone()));
        Ok(contents)
    }

    /// [`TicketKey::short_key`], answered from memory when `(kid, h)` is the
    /// short ticket this derived last under `tk`; the key is remembered.
    pub fn short_key(&mut self, tk: &TicketKey, kid: &KeyId, h: &[u8; SHORT_H_LEN]) -> SessionKey {
        self.short_key_or(tk, kid, h, || tk.short_key(kid, h))
    }

    /// [`LastOpened::short_key`], with `derive` giving the key when it is
    /// not the one remembered (a server's [`ShortKeyMemo`], shared by its
    /// connections).
    pub fn short_key_or(
        &mut self,
        tk: &TicketKey,
        kid: &KeyId,
        h: &[u8; SHORT_H_LEN],
        derive: impl FnOnce() -> SessionKey,
    ) -> SessionKey {
        if let Some(Opened::Short(d)) = &self.0 {
            if let Some(key) = d.key_for(tk, kid, h) {
                return key.clone();
            }
        }
        let d = DerivedShort::new(tk, kid, h, derive);
        let key = d.key.clone();
        self.0 = Some(Opened::Short(d));
        key
    }
}

/// The short-ticket keys a server derived lately, whichever connection
/// presented them (spec §7.3): a client presents one short ticket on up to
/// R requests, over as many connections as it opens (a browser's parallel
/// connections, one new connection per request, a proxy's pooled
/// connections carrying many clients), and each connection's
/// [`LastOpened`] remembers only its own last one. A direct-mapped table:
/// the slot is named by `h`'s first bytes, and a new key takes the slot
/// whatever it held, so a lookup costs a comparison and the memory is
/// fixed. `h` is the client's to choose, so a client can only make others'
/// entries leave early, which costs the server the SHA3-256 it spends
/// without the memo. As with [`LastOpened`], a key is asked for only once
/// its ticket key and kex key were found unexpired.
#[derive(Debug)]
pub struct ShortKeyMemo {
    slots: Vec<Option<DerivedShort>>,
}

impl ShortKeyMemo {
    /// A memo of `slots` keys (at least one).
    pub fn new(slots: usize) -> Self {
        ShortKeyMemo {
            slots: (0..slots.max(1)).map(|_| None).collect(),
        }
    }

    /// [`TicketKey::short_key`], answered from the memo when `(kid, h)` was
    /// derived under `tk` lately; a derived key is remembered.
    pub fn short_key(&mut self, tk: &TicketKey, kid: &KeyId, h: &[u8; SHORT_H_LEN]) -> SessionKey {
        let at = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize % self.slots.len();
        if let Some(key) = self.slots[at].as_ref().and_then(|d| d.key_for(tk, kid, h)) {
            return key.clone();
        }
        let d = DerivedShort::new(tk, kid, h, || tk.short_key(kid, h));
        let key = d.key.clone();
        self.slots[at] = Some(d);
        key
    }
}

/// A sealed ticket as the client stores it.
#[derive(Clone, PartialEq, Eq)]
pub struct Ticket(pub [u8; TICKET_LEN]);

impl core::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Ticket({:?})", self.tid())
    }
}

impl Ticket {
    /// The ticket-key ID (cookie name prefix).
    pub fn tid(&self) -> KeyId {
        KeyId(self.0[..KID_LEN].try_into().expect("fixed layout"))
    }

    /// `ticket[10..]` (cookie value).
    pub fn sealed(&self) -> &[u8] {
        &self.0[KID_LEN..]
    }

    /// The `Ticket` field value: `b64u(ticket)`.
    pub fn to_field(&self) -> String {
        b64::encode(&self.0)
    }

    /// Parses a `Ticket` field value.
    pub fn from_field(value: &[u8]) -> Result<Self> {
        Ok(Ticket(b64::decode_array::<TICKET_LEN>(value)?))
    }
}

/// A short ticket as the client holds it (spec §7.3): the cookie parts and
/// the key it seals under.
#[derive(Clone, PartialEq, Eq)]
pub struct ShortTicket {
    tid: KeyId,
    h: [u8; SHORT_H_LEN],
    key: SessionKey,
}

impl core::fmt::Debug for ShortTicket {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "ShortTicket({:?})", self.tid)
    }
}

impl ShortTicket {
    /// The ticket-key ID (cookie name prefix).
    pub fn tid(&self) -> KeyId {
        self.tid
    }

    /// The random part `h` (cookie value).
    pub fn h(&self) -> &[u8; SHORT_H_LEN] {
        &self.h
    }

    /// The key `k'` requests presenting this ticket are sealed under.
    pub fn key(&self) -> &SessionKey {
        &self.key
    }

    /// The `Ticket` field value: `b64u(tid || h || k')` (78 characters).
    pub fn to_field(&self) -> String {
        let mut b = Zeroizing::new([0u8; SHORT_TICKET_LEN]);
        b[..KID_LEN].copy_from_slice(&self.tid.0);
        b[KID_LEN..KID_LEN + SHORT_H_LEN].copy_from_slice(&self.h);
        b[KID_LEN + SHORT_H_LEN..].copy_from_slice(self.key.as_bytes());
        b64::encode(&b[..])
    }

    /// Parses a short `Ticket` field value.
    pub fn from_field(value: &[u8]) -> Result<Self> {
        let b = Zeroizing::new(b64::decode_array::<SHORT_TICKET_LEN>(value)?);
        Ok(ShortTicket {
            tid: KeyId(b[..KID_LEN].try_into().expect("fixed layout")),
            h: b[KID_LEN..KID_LEN + SHORT_H_LEN]
                .try_into()
                .expect("fixed layout"),
            key: SessionKey::from_bytes(
                b[KID_LEN + SHORT_H_LEN..].try_into().expect("fixed layout"),
            ),
        })
    }
}

/// A `Ticket` response field of either form: a v1 ticket (128 characters,
/// spec §7.2) or a short one (78 characters, §7.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnyTicket {
    /// A v1 ticket; requests presenting it seal under the session key.
    V1(Ticket),
    /// A short ticket, with its own key.
    Short(ShortTicket),
}

impl AnyTicket {
    /// Parses a `Ticket` field value; its length tells the form.
    pub fn from_field(value: &[u8]) -> Result<Self> {
        if value.len() == b64::encoded_len(SHORT_TICKET_LEN) {
            ShortTicket::from_field(value).map(AnyTicket::Short)
        } else {
            Ticket::from_field(value).map(AnyTicket::V1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_field_asks_short_declines_or_is_no_ask() {
        assert_eq!(TicketAsk::of(None), TicketAsk::Unasked);
        assert_eq!(TicketAsk::of(Some(b"short")), TicketAsk::Short);
        assert_eq!(TicketAsk::of(Some(b"none")), TicketAsk::Decline);
        for other in [&b"Short"[..], b"", b"none ", b"maybe"] {
            assert_eq!(TicketAsk::of(Some(other)), TicketAsk::Unasked, "{other:?}");
        }
    }

    #[test]
    fn seal_open() {
        let tk = TicketKey::new(KeyId([1; 10]), [2; 32]);
        let c = TicketContents {
            key: SessionKey::from_bytes([3; 32]),
            kid: KeyId([4; 10]),
            expiry: 1000,
        };
        let t = tk.seal(&c, [5; 24]);
        assert_eq!(TICKET_LEN, 96);
        assert_eq!(b64::encoded_len(SEALED_TICKET_LEN), 115);
        let sealed: [u8; SEALED_TICKET_LEN] = t.sealed().try_into().unwrap();
        assert_eq!(tk.open(&sealed, 1000).unwrap(), c);
        assert_eq!(tk.open(&sealed, 1001), Err(Error::UnknownKey));
        let mut bad = sealed;
        bad[40] ^= 1;
        assert_eq!(tk.open(&bad, 10), Err(Error::UnknownKey));
        let other = TicketKey::new(KeyId([9; 10]), [2; 32]);
        assert_eq!(
            other.open(&sealed, 10),
            Err(Error::UnknownKey),
            "AD binds the tid"
        );
        assert_eq!(Ticket::from_field(t.to_field().as_bytes()).unwrap(), t);
    }

    #[test]
    fn short_ticket_field_round_trip() {
        let tk = TicketKey::new(KeyId([1; 10]), [2; 32]);
        let t = tk.issue_short(&KeyId([4; 10]), [5; 16]);
        let field = t.to_field();
        assert_eq!(field.len(), 78);
        assert_eq!(ShortTicket::from_field(field.as_bytes()).unwrap(), t);
        assert_eq!(
            AnyTicket::from_field(field.as_bytes()).unwrap(),
            AnyTicket::Short(t.clone())
        );
        // The key depends on every input.
        assert_ne!(tk.short_key(&KeyId([4; 10]), &[6; 16]), *t.key());
        assert_ne!(tk.short_key(&KeyId([3; 10]), &[5; 16]), *t.key());
        let other = TicketKey::new(KeyId([9; 10]), [2; 32]);
        assert_ne!(other.short_key(&KeyId([4; 10]), &[5; 16]), *t.key());
        // A wrong length is neither form.
        assert!(AnyTicket::from_field(&field.as_bytes()[..77]).is_err());
        assert!(AnyTicket::from_field(b"").is_err());
    }

    #[test]
    fn last_opened_keeps_the_rules() {
        let tk = TicketKey::new(KeyId([1; 10]), [2; 32]);
        let c = TicketContents {
            key: SessionKey::from_bytes([3; 32]),
            kid: KeyId([4; 10]),
            expiry: 1000,
        };
        let sealed: [u8; SEALED_TICKET_LEN] = tk.seal(&c, [5; 24]).sealed().try_into().unwrap();
        let mut last = LastOpened::default();
        assert_eq!(last.open(&tk, &sealed, 10).unwrap(), c);
        // Remembered: still refused once expired.
        assert_eq!(last.open(&tk, &sealed, 1000).unwrap(), c);
        assert_eq!(last.open(&tk, &sealed, 1001), Err(Error::UnknownKey));
        // Other bytes are opened (and refused when they do not open); the
        // remembered ticket stays.
        let mut bad = sealed;
        bad[40] ^= 1;
        assert_eq!(last.open(&tk, &bad, 10), Err(Error::UnknownKey));
        assert_eq!(last.open(&tk, &sealed, 10).unwrap(), c);
        // The same bytes under another ticket key are not the remembered ticket.
        let other = TicketKey::new(KeyId([9; 10]), [2; 32]);
        assert_eq!(last.open(&other, &sealed, 10), Err(Error::UnknownKey));
    }

    /// A short ticket's key comes from memory only for the same ticket
    /// key ID, kex key and `h`; anything else is derived, and a v1 ticket
    /// and a short one take turns in the one slot without mixing.
    #[test]
    fn last_opened_remembers_a_short_ticket_exactly() {
        let tk = TicketKey::new(KeyId([1; 10]), [2; 32]);
        let other = TicketKey::new(KeyId([9; 10]), [2; 32]);
        let (kid, h) = (KeyId([4; 10]), [5u8; 16]);
        let mut last = LastOpened::default();
        let k = last.short_key(&tk, &kid, &h);
        assert_eq!(k, tk.short_key(&kid, &h));
        assert_eq!(last.short_key(&tk, &kid, &h), k);
        for (t, kid2, h2) in [
            (&other, kid, h),
            (&tk, KeyId([3; 10]), h),
            (&tk, kid, [6u8; 16]),
        ] {
            assert_eq!(last.short_key(t, &kid2, &h2), t.short_key(&kid2, &h2));
            assert_ne!(last.short_key(t, &kid2, &h2), k);
        }
        let c = TicketContents {
            key: SessionKey::from_bytes([3; 32]),
            kid,
            expiry: 1000,
        };
        let sealed: [u8; SEALED_TICKET_LEN] = tk.seal(&c, [5; 24]).sealed().try_into().unwrap();
        assert_eq!(last.open(&tk, &sealed, 10).unwrap(), c);
        assert_eq!(last.short_key(&tk, &kid, &h), k);
        assert_eq!(last.open(&tk, &sealed, 10).unwrap(), c);
    }

    /// The memo answers only for the same ticket key ID, kex key and `h`,
    /// and a key that lands in a taken slot replaces what was there; a
    /// connection's memory asks the memo only for a key it does not hold.
    #[test]
    fn the_memo_answers_exactly_and_keeps_one_key_per_slot() {
        let tk = TicketKey::new(KeyId([1; 10]), [2; 32]);
        let other = TicketKey::new(KeyId([9; 10]), [2; 32]);
        let (kid, h) = (KeyId([4; 10]), [5u8; 16]);
        let mut memo = ShortKeyMemo::new(4);
        let k = memo.short_key(&tk, &kid, &h);
        assert_eq!(k, tk.short_key(&kid, &h));
        assert_eq!(memo.short_key(&tk, &kid, &h), k);
        // Same slot (same first bytes of h), other inputs: derived anew.
        let mut h_same_slot = h;
        h_same_slot[15] ^= 1;
        for (t, kid2, h2) in [
            (&other, kid, h),
            (&tk, KeyId([3; 10]), h),
            (&tk, kid, h_same_slot),
        ] {
            assert_eq!(memo.short_key(t, &kid2, &h2), t.short_key(&kid2, &h2));
        }
        // The last of those took the slot: the first key is derived again,
        // and is still the same key.
        assert_eq!(memo.short_key(&tk, &kid, &h), k);
        // Another slot leaves this one alone.
        let h_other_slot = [6u8; 16];
        memo.short_key(&tk, &kid, &h_other_slot);
        assert!(memo.slots.iter().filter(|e| e.is_some()).count() >= 2);
        // A connection's memory derives through the memo only on a miss.
        let mut last = LastOpened::default();
        let mut asked = 0;
        for _ in 0..3 {
            let got = last.short_key_or(&tk, &kid, &h, || {
                asked += 1;
                memo.short_key(&tk, &kid, &h)
            });
            assert_eq!(got, k);
        }
        assert_eq!(asked, 1);
        assert_eq!(ShortKeyMemo::new(0).slots.len(), 1);
    }
}
