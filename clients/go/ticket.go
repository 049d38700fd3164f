package httpcrypt

import (
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

// TicketKey seals and opens tickets (the server's side; the client only
// carries tickets). Here for the vectors and the in-memory exchange tests.
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
