package httpcrypt

import (
	"encoding/binary"
	"strings"
)

// Request profiles (spec §4.5). Profile 1 is the contract's layout;
// profile 2 ("compact") is used with a key whose certificate has version 2.
const (
	Profile1       = 1
	ProfileCompact = 2
)

// Profile-2 constants (spec §4.5).
const (
	// CompactMaxPad is the longest cookie pad a profile-2 client sends
	// (servers still accept MaxPad).
	CompactMaxPad = 7
	// ResponseRandomLen is r in a profile-2 response body r || stream,
	// whose stream nonce is 0xff^8 || r.
	ResponseRandomLen = 16
	// NonceTimeLen is the big-endian unix time at the front of a
	// profile-2 request n0; the other 19 bytes are random.
	NonceTimeLen = 5
	// MaxBoundHost is the longest Host value record 0 can bind (u16 length).
	MaxBoundHost = 65535
	// compactSegmentLen is the nonce segment `2{b64u(n0)}`.
	compactSegmentLen = 1 + nonceB64Len
	compactMarker     = '2'
)

var (
	labelReq2 = []byte("hc2-req")
	labelRsp2 = []byte("hc2-rsp")
)

// NewCompactNonce returns a profile-2 request nonce: u40(t) || 19 random
// bytes, t being unix seconds on the (corrected) client clock. A time
// outside 0..2^40-1 is clamped.
func NewCompactNonce(t int64) [NonceLen]byte {
	var n0 [NonceLen]byte
	copy(n0[NonceTimeLen:], randomBytes(NonceLen-NonceTimeLen))
	putNonceTime(&n0, t)
	return n0
}

func putNonceTime(n0 *[NonceLen]byte, t int64) {
	t = max(0, min(t, 1<<40-1))
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(t))
	copy(n0[:NonceTimeLen], b[8-NonceTimeLen:])
}

// NonceTime reads the unix seconds in n0[0..5] (spec §4.5).
func NonceTime(n0 *[NonceLen]byte) int64 {
	var b [8]byte
	copy(b[8-NonceTimeLen:], n0[:NonceTimeLen])
	return int64(binary.BigEndian.Uint64(b[:]))
}

// CheckNonceTime is a profile-2 server's freshness check: the time in n0
// must be within window seconds of now (both ends pass), else stale.
func CheckNonceTime(n0 *[NonceLen]byte, now, window int64) (int64, error) {
	return checkWindow(NonceTime(n0), now, window)
}

// compactRequestAD0 is AD_0 before header_0 of a profile-2 request:
// "hc2-req" || u16(len(host)) || host. A longer Host is bad_host.
func compactRequestAD0(host string) ([]byte, error) {
	if len(host) > MaxBoundHost {
		return nil, errCode(CodeBadHost)
	}
	ad := make([]byte, 0, len(labelReq2)+2+len(host))
	ad = append(ad, labelReq2...)
	ad = binary.BigEndian.AppendUint16(ad, uint16(len(host)))
	return append(ad, host...), nil
}

// compactResponseAD0 is AD_0 before header_0 of a profile-2 response:
// "hc2-rsp" || request_n0.
func compactResponseAD0(requestN0 [NonceLen]byte) []byte {
	return append(append(make([]byte, 0, len(labelRsp2)+NonceLen), labelRsp2...), requestN0[:]...)
}

// CompactResponseNonce is the stream nonce of a profile-2 response:
// 0xff^8 || r.
func CompactResponseNonce(r [ResponseRandomLen]byte) [NonceLen]byte {
	var n0 [NonceLen]byte
	for i := 0; i < NonceLen-ResponseRandomLen; i++ {
		n0[i] = 0xff
	}
	copy(n0[NonceLen-ResponseRandomLen:], r[:])
	return n0
}

// NewCompactRequestSealer starts a profile-2 request stream at n0, binding
// host (the outer Host value exactly as sent) into record 0.
func NewCompactRequestSealer(k SessionKey, n0 [NonceLen]byte, host string) (*Sealer, error) {
	ad0, err := compactRequestAD0(host)
	if err != nil {
		return nil, err
	}
	return &Sealer{c: newChain(k, n0, false, ad0)}, nil
}

// NewCompactRequestOpener opens a profile-2 request stream whose nonce n0
// came from the path, under the outer Host the server parsed.
func NewCompactRequestOpener(k SessionKey, n0 [NonceLen]byte, host string, maxRecord int) (*Opener, error) {
	ad0, err := compactRequestAD0(host)
	if err != nil {
		return nil, err
	}
	return &Opener{c: newChain(k, n0, false, ad0), max: clampMax(maxRecord), state: stRecords}, nil
}

// NewCompactResponseSealer starts a profile-2 response stream at
// 0xff^8 || r, answering the request whose nonce is requestN0. The caller
// writes the 16 bytes r in front of the stream.
func NewCompactResponseSealer(k SessionKey, requestN0 [NonceLen]byte, r [ResponseRandomLen]byte) *Sealer {
	return &Sealer{c: newChain(k, CompactResponseNonce(r), true, compactResponseAD0(requestN0))}
}

// NewCompactResponseOpener opens a profile-2 response body (r || stream)
// answering the request whose nonce is requestN0. A body shorter than r is
// truncated.
func NewCompactResponseOpener(k SessionKey, requestN0 [NonceLen]byte, maxRecord int) *Opener {
	return &Opener{c: newChain(k, CompactResponseNonce([ResponseRandomLen]byte{}), true, compactResponseAD0(requestN0)),
		max: clampMax(maxRecord), state: stNonce, nonceLen: ResponseRandomLen}
}

// CompactNoncePath is `{mount}/2{b64u(n0)}`.
func (m Mount) CompactNoncePath(n0 *[NonceLen]byte) string {
	return string(m) + "/" + string(compactMarker) + EncodeB64u(n0[:])
}

// CompactGetTarget is `{mount}/2{b64u(n0)}?{b64u(stream)}`.
func (m Mount) CompactGetTarget(n0 *[NonceLen]byte, stream []byte) string {
	return m.CompactNoncePath(n0) + "?" + EncodeB64u(stream)
}

// RandomCompactPad returns 0–7 random base64url characters (spec §4.5).
func RandomCompactPad() string { return randomPad(CompactMaxPad) }

// FormatCompactCookie is FormatCookie for a profile-2 request: pads of
// 0–7 base64url characters, else bad_cookie.
func FormatCompactCookie(id KID, value []byte, namePad, valuePad string) (string, error) {
	if len(namePad) > CompactMaxPad || len(valuePad) > CompactMaxPad {
		return "", ErrBadCookie
	}
	return FormatCookie(id, value, namePad, valuePad)
}

// ParseNonceSegment decodes what follows `{mount}/`: 32 canonical
// base64url characters (profile 1) or `2` and such 32 characters
// (profile 2); anything else is bad_nonce_path (spec §11.1 step 3).
func ParseNonceSegment(s string) ([NonceLen]byte, int, error) {
	switch len(s) {
	case nonceB64Len:
		n0, err := ParseNoncePath(s)
		return n0, Profile1, err
	case compactSegmentLen:
		if rest, ok := strings.CutPrefix(s, string(compactMarker)); ok {
			n0, err := ParseNoncePath(rest)
			return n0, ProfileCompact, err
		}
	}
	return [NonceLen]byte{}, 0, errCode(CodeBadNoncePath)
}

// boundHostOK reports whether Go's HTTP client sends host verbatim as the
// outer Host field (printable ASCII without an IPv6 zone): only then can
// record 0 bind it (profile 2). Otherwise net/http rewrites it
// (punycode, zone removal) and the client stays on v1.
func boundHostOK(host string) bool {
	if host == "" || len(host) > MaxBoundHost {
		return false
	}
	for i := 0; i < len(host); i++ {
		if c := host[i]; c <= ' ' || c >= 0x7f || c == '%' {
			return false
		}
	}
	return true
}
