package httpcrypt

import "encoding/base64"

// b64u is base64url without padding (spec §1.2).
var b64u = base64.RawURLEncoding.Strict()

// EncodeB64u encodes b as base64url without padding.
func EncodeB64u(b []byte) string { return b64u.EncodeToString(b) }

func isB64Char(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

func isB64(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isB64Char(s[i]) {
			return false
		}
	}
	return true
}

// DecodeB64u decodes canonical base64url: no padding, nothing outside the
// alphabet (encoding/base64 would skip CR and LF), no length of 1 mod 4,
// no non-zero unused bits. Failure is bad_base64.
func DecodeB64u(s string) ([]byte, error) {
	if !isB64(s) || len(s)%4 == 1 {
		return nil, ErrBadBase64
	}
	b, err := b64u.DecodeString(s)
	if err != nil {
		return nil, ErrBadBase64
	}
	return b, nil
}

// decodeFixed decodes a base64url field that must hold exactly n bytes.
func decodeFixed(s string, n int) ([]byte, error) {
	if len(s) != base64.RawURLEncoding.EncodedLen(n) {
		return nil, ErrBadBase64
	}
	return DecodeB64u(s)
}
