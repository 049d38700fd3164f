package httpcrypt

import (
	"strings"
	"unicode/utf8"
)

// AAAA chunk set (spec §6.2).
const (
	aaaaChunks        = 9
	aaaaChunk         = 14
	identityTXTPrefix = "hc1-id "
)

// FormatAAAA returns the nine addresses carrying a certificate.
func FormatAAAA(c *KeyCert) [][16]byte { return formatAAAAChunks(c.Encode(), aaaaChunks) }

// ParseAAAA reassembles a certificate from its AAAA set in any order:
// exactly nine addresses, prefix 0xfd0, orders 0–8 once each, zero
// padding (bad_record otherwise), then the certificate decodes.
func ParseAAAA(addrs [][16]byte) (*KeyCert, error) {
	b, err := joinAAAAChunks(addrs, aaaaChunks, CertLen)
	if err != nil {
		return nil, err
	}
	return DecodeCert(b)
}

// formatAAAAChunks spreads cert over chunks addresses: zero-padded to
// chunks·14 bytes, address j = fd 0j || chunk j (spec §6.2).
func formatAAAAChunks(cert []byte, chunks int) [][16]byte {
	padded := make([]byte, chunks*aaaaChunk)
	copy(padded, cert)
	out := make([][16]byte, chunks)
	for j := range out {
		out[j][0] = 0xfd
		out[j][1] = byte(j)
		copy(out[j][2:], padded[j*aaaaChunk:(j+1)*aaaaChunk])
	}
	return out
}

// joinAAAAChunks reassembles certLen bytes from exactly chunks addresses
// in any order (bad_record: another count, a wrong prefix, an order out
// of range or twice, padding that is not zero).
func joinAAAAChunks(addrs [][16]byte, chunks, certLen int) ([]byte, error) {
	if len(addrs) != chunks {
		return nil, ErrBadRecord
	}
	padded := make([]byte, chunks*aaaaChunk)
	seen := make([]bool, chunks)
	for _, a := range addrs {
		order := int(a[1] & 0x0f)
		if a[0] != 0xfd || a[1]>>4 != 0 || order >= chunks || seen[order] {
			return nil, ErrBadRecord
		}
		seen[order] = true
		copy(padded[order*aaaaChunk:], a[2:])
	}
	for _, b := range padded[certLen:] {
		if b != 0 {
			return nil, ErrBadRecord
		}
	}
	return padded[:certLen], nil
}

// ParseTXT parses a TXT record at _httpcrypt.{host}: its character-strings
// joined, UTF-8 (bad_record), then the text form.
func ParseTXT(strs [][]byte) (*KeyCert, error) {
	text, err := joinTXT(strs)
	if err != nil {
		return nil, err
	}
	return ParseCertText(text)
}

// joinTXT joins a TXT record's character-strings, which must be UTF-8
// (bad_record).
func joinTXT(strs [][]byte) (string, error) {
	var joined []byte
	for _, s := range strs {
		joined = append(joined, s...)
	}
	if !utf8.Valid(joined) {
		return "", ErrBadRecord
	}
	return string(joined), nil
}

// ParseIdentityTXT parses `hc1-id {b64u(identity_public)}`.
func ParseIdentityTXT(text string) (*Identity, error) {
	rest, ok := strings.CutPrefix(text, identityTXTPrefix)
	if !ok {
		return nil, ErrBadRecord
	}
	return ParseIdentityB64(rest)
}

// FormatIdentityTXT formats the identity TXT record.
func FormatIdentityTXT(id *Identity) string { return identityTXTPrefix + EncodeB64u(id.key) }
