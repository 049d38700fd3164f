package httpcrypt

import (
	"crypto/sha3"
	"encoding/binary"

	"golang.org/x/crypto/chacha20poly1305"
)

// Ticket sizes (spec §7.2).
const (
	ticketPlainLen  = 32 + KIDLen + 4
	SealedTicketLen = NonceLen + ticketPlainLen + TagLen // 86
	TicketLen       = KIDLen + SealedTicketLen           // 96
	// TicketField is the inner response field carrying a ticket.
	TicketField = "Ticket"
)

// Short ticket sizes (spec §7.3).
const (
	// ShortHLen is the length of a short ticket's random part h, the
	// cookie value.
	ShortHLen = 16
	// ShortTicketLen is a short ticket as the Ticket field carries it:
	// tid || h || k' (78 base64url characters; a v1 ticket has 128).
	ShortTicketLen = KIDLen + ShortHLen + KeyLen
	// AskShort is the value of the inner request field Ticket that asks
	// for a short ticket.
	AskShort = "short"
	// Decline is the value of the inner request field Ticket that declines
	// any ticket for the answer: a one-shot client (spec §7.3).
	Decline = "none"
	// shortLabel separates the short-ticket key derivation.
	shortLabel = "hc1-short-ticket"
)

// Ticket is what a server returns in the inner `Ticket` field:
// tid(10) || n(24) || sealed(k || kid || expiry).
type Ticket [TicketLen]byte

// ParseTicketField decodes a `Ticket` field value (bad_base64 otherwise).
func ParseTicketField(v string) (*Ticket, error) {
	b, err := decodeFixed(v, TicketLen)
	if err != nil {
		return nil, err
	}
	t := Ticket(b)
	return &t, nil
}

// TID is the ticket key's ID, sent as the cookie name.
func (t *Ticket) TID() KID { return KID(t[:KIDLen]) }

// Sealed is ticket[10..], sent as the cookie value.
func (t *Ticket) Sealed() []byte { return t[KIDLen:] }

// Field is the base64url form for the inner `Ticket` field.
func (t *Ticket) Field() string { return EncodeB64u(t[:]) }

// ShortTicket is a short ticket as the client holds it (spec §7.3): the
// cookie parts tid and h, and the key k' its requests are sealed under
// (their responses are opened under it too).
type ShortTicket struct {
	TID KID
	H   [ShortHLen]byte
	Key SessionKey
}

// ParseShortTicketField decodes a short `Ticket` field value: exactly 78
// canonical base64url characters, else bad_base64.
func ParseShortTicketField(v string) (*ShortTicket, error) {
	b, err := decodeFixed(v, ShortTicketLen)
	if err != nil {
		return nil, err
	}
	t := &ShortTicket{TID: KID(b[:KIDLen]), H: [ShortHLen]byte(b[KIDLen : KIDLen+ShortHLen])}
	t.Key = SessionKey(b[KIDLen+ShortHLen:])
	return t, nil
}

// Field is the base64url form for the inner `Ticket` field: b64u(tid || h || k').
func (t *ShortTicket) Field() string {
	b := make([]byte, 0, ShortTicketLen)
	b = append(append(append(b, t.TID[:]...), t.H[:]...), t.Key[:]...)
	return EncodeB64u(b)
}

// isShortTicketField tells the two forms of a `Ticket` field apart by
// their length (spec §7.3): 78 characters for a short ticket.
func isShortTicketField(v string) bool { return len(v) == b64u.EncodedLen(ShortTicketLen) }

// TicketKey seals and opens tickets and derives short tickets' keys (the
// server's side; the client only carries tickets). Here for the vectors
// and the in-memory exchange tests.
type TicketKey struct {
	TID KID
	Key [32]byte
}

// TicketContents is what a ticket carries.
type TicketContents struct {
	Key    SessionKey
	KID    KID
	Expiry uint32
}

// Seal makes a ticket with the nonce n.
func (tk *TicketKey) Seal(c TicketContents, n [NonceLen]byte) *Ticket {
	aead, err := chacha20poly1305.NewX(tk.Key[:])
	if err != nil {
		panic("httpcrypt: XChaCha20-Poly1305 with a 32-byte key failed")
	}
	plain := make([]byte, 0, ticketPlainLen)
	plain = append(plain, c.Key[:]...)
	plain = append(plain, c.KID[:]...)
	plain = binary.BigEndian.AppendUint32(plain, c.Expiry)
	var t Ticket
	copy(t[:], tk.TID[:])
	copy(t[KIDLen:], n[:])
	aead.Seal(t[KIDLen+NonceLen:KIDLen+NonceLen], n[:], plain, tk.TID[:])
	return &t
}

// ShortKey is k' = SHA3-256("hc1-short-ticket" || ticket_key || tid ||
// kid || h), the key of the short ticket (tid, h) issued for a session
// under kex key kid (spec §7.3).
func (tk *TicketKey) ShortKey(kid KID, h [ShortHLen]byte) SessionKey {
	d := sha3.New256()
	d.Write([]byte(shortLabel))
	d.Write(tk.Key[:])
	d.Write(tk.TID[:])
	d.Write(kid[:])
	d.Write(h[:])
	return SessionKey(d.Sum(nil))
}

// IssueShort makes the short ticket with random part h (fresh random per
// ticket) for a session under kid.
func (tk *TicketKey) IssueShort(kid KID, h [ShortHLen]byte) *ShortTicket {
	return &ShortTicket{TID: tk.TID, H: h, Key: tk.ShortKey(kid, h)}
}

// Open opens ticket[10..]; a ticket that does not open or has expired
// (now > expiry) is unknown_key.
func (tk *TicketKey) Open(sealed []byte, now int64) (*TicketContents, error) {
	if len(sealed) != SealedTicketLen {
		return nil, ErrUnknownKey
	}
	aead, err := chacha20poly1305.NewX(tk.Key[:])
	if err != nil {
		panic("httpcrypt: XChaCha20-Poly1305 with a 32-byte key failed")
	}
	plain, err := aead.Open(nil, sealed[:NonceLen], sealed[NonceLen:], tk.TID[:])
	if err != nil {
		return nil, ErrUnknownKey
	}
	c := &TicketContents{Key: SessionKey(plain[:32]), KID: KID(plain[32 : 32+KIDLen])}
	c.Expiry = binary.BigEndian.Uint32(plain[32+KIDLen:])
	if now > int64(c.Expiry) {
		return nil, ErrUnknownKey
	}
	return c, nil
}
