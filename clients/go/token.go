package httpcrypt

import "crypto/subtle"

// Token fields (spec §8.4).
const (
	ClientRandomField = "Client-Random"
	RandomField       = "Random"
)

var tokenLabel = []byte("hc1-token")

// NewClientRandom returns 24 fresh random bytes and their field value.
func NewClientRandom() ([24]byte, string) {
	var cr [24]byte
	copy(cr[:], randomBytes(24))
	return cr, EncodeB64u(cr[:])
}

// ServerRandom is SHA3-256("hc1-token" || secret || k || cr)[0..16].
func ServerRandom(secret []byte, k SessionKey, cr [24]byte) [16]byte {
	h := sha3Concat(tokenLabel, secret, k[:], cr[:])
	return [16]byte(h[:16])
}

// FormatRandom is the server's `Random` value: b64u(cr || sr).
func FormatRandom(secret []byte, k SessionKey, cr [24]byte) string {
	sr := ServerRandom(secret, k, cr)
	return EncodeB64u(append(cr[:], sr[:]...))
}

// VerifyRandom rechecks a `Random` value (bad_token) and returns its
// client random.
func VerifyRandom(secret []byte, k SessionKey, value string) ([24]byte, error) {
	raw, err := decodeFixed(value, 40)
	if err != nil {
		return [24]byte{}, ErrBadToken
	}
	cr := [24]byte(raw[:24])
	sr := ServerRandom(secret, k, cr)
	if subtle.ConstantTimeCompare(sr[:], raw[24:]) != 1 {
		return [24]byte{}, ErrBadToken
	}
	return cr, nil
}
