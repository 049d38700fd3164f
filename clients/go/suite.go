package httpcrypt

import (
	"crypto/ecdh"
	"crypto/rand"
	"crypto/subtle"
	"errors"

	"golang.org/x/crypto/chacha20"
	"golang.org/x/crypto/sha3"
)

// Sizes of suite 1 (spec §1.3, §2).
const (
	KeyLen   = 32
	NonceLen = 24
	TagLen   = 16
	KIDLen   = 10
)

// KID is a key ID or ticket ID: SHA3-256(kex_public)[0..10] (spec §2).
type KID [KIDLen]byte

// String is the 14-character base64url form.
func (k KID) String() string { return EncodeB64u(k[:]) }

// KeyID returns the key ID of an X25519 public key.
func KeyID(public []byte) KID {
	h := sha3.Sum256(public)
	var k KID
	copy(k[:], h[:KIDLen])
	return k
}

// SessionKey is k = HChaCha20(X25519(own, peer), 0^16), equal at both ends.
type SessionKey [KeyLen]byte

// String never prints the key.
func (SessionKey) String() string { return "SessionKey(..)" }

// KexSecret is an X25519 key pair (the client's, or a server's in tests).
// It uses crypto/ecdh, which refuses an all-zero shared secret.
type KexSecret struct {
	priv   *ecdh.PrivateKey
	public []byte
}

// NewKexSecret makes a key pair from 32 secret bytes (X25519 clamps).
func NewKexSecret(secret []byte) (*KexSecret, error) {
	priv, err := ecdh.X25519().NewPrivateKey(secret)
	if err != nil {
		return nil, errors.New("httpcrypt: X25519 secret must be 32 bytes")
	}
	return &KexSecret{priv: priv, public: priv.PublicKey().Bytes()}, nil
}

// GenerateKexSecret draws a fresh key pair from crypto/rand.
func GenerateKexSecret() *KexSecret {
	priv, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		panic("httpcrypt: crypto/rand failed: " + err.Error())
	}
	return &KexSecret{priv: priv, public: priv.PublicKey().Bytes()}
}

// Public returns the X25519 public key.
func (k *KexSecret) Public() []byte { return append([]byte(nil), k.public...) }

// Shared returns the raw X25519 output; an all-zero result (small-order
// peer key) is small_order.
func (k *KexSecret) Shared(peer []byte) ([]byte, error) {
	pub, err := ecdh.X25519().NewPublicKey(peer)
	if err != nil {
		return nil, ErrSmallOrder
	}
	s, err := k.priv.ECDH(pub)
	if err != nil {
		return nil, ErrSmallOrder
	}
	var zero [KeyLen]byte
	if subtle.ConstantTimeCompare(s, zero[:]) == 1 {
		return nil, ErrSmallOrder // crypto/ecdh refuses it already; checked again
	}
	return s, nil
}

// SessionKey derives k against the peer's public key (spec §2).
func (k *KexSecret) SessionKey(peer []byte) (SessionKey, error) {
	shared, err := k.Shared(peer)
	if err != nil {
		return SessionKey{}, err
	}
	return sessionKeyFromShared(shared), nil
}

func sessionKeyFromShared(shared []byte) SessionKey {
	var zero [16]byte
	sub, err := chacha20.HChaCha20(shared, zero[:])
	if err != nil {
		panic("httpcrypt: HChaCha20 with a 32-byte key failed")
	}
	var sk SessionKey
	copy(sk[:], sub)
	return sk
}

// nonceAdd returns (n0 + i) mod 2^192, n0 read big-endian (spec §3.2).
func nonceAdd(n0 *[NonceLen]byte, i uint64) [NonceLen]byte {
	out := *n0
	carry := i
	for j := NonceLen - 1; j >= 0 && carry != 0; j-- {
		sum := uint64(out[j]) + (carry & 0xff)
		out[j] = byte(sum)
		carry = (carry >> 8) + (sum >> 8)
	}
	return out
}

func sha3Concat(parts ...[]byte) [32]byte {
	h := sha3.New256()
	for _, p := range parts {
		h.Write(p)
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("httpcrypt: crypto/rand failed: " + err.Error())
	}
	return b
}
