package httpcrypt

// The rspamd compatibility profile (spec/rspamd-profile.md): rspamd's
// base32, key IDs, the `Key` header, `rspamadm keypair` files and the
// cryptobox (XChaCha20 + Poly1305 over the bare ciphertext). Only the
// protocol pieces are here, no transport.

import (
	"bytes"
	"crypto/subtle"
	"strconv"
	"strings"

	"golang.org/x/crypto/blake2b"
	"golang.org/x/crypto/chacha20"
	// Deprecated in favour of AEADs, but rspamd's tag is bare Poly1305.
	"golang.org/x/crypto/poly1305"
)

// Error codes of the rspamd profile (spec §12).
const (
	CodeBadBase32    = "bad_base32"
	CodeBadKeyHeader = "bad_key_header"
	CodeBadKeypair   = "bad_keypair"
)

const rspamdAlphabet = "ybndrfg8ejkmcpqxot1uwisza345h769"

// EncodeRspamdBase32 writes b as rspamd's base32: z-base-32 letters, bits
// taken least significant first, no padding.
func EncodeRspamdBase32(b []byte) string {
	n := (len(b)*8 + 4) / 5
	out := make([]byte, n)
	for j := 0; j < n; j++ {
		bit := 5 * j
		v := int(b[bit/8]) >> (bit % 8)
		if bit%8 > 3 && bit/8+1 < len(b) {
			v |= int(b[bit/8+1]) << (8 - bit%8)
		}
		out[j] = rspamdAlphabet[v&31]
	}
	return string(out)
}

// decodeBits decodes text into n bytes, requiring every bit beyond 8n to be zero.
func decodeBits(s string, n int) ([]byte, bool) {
	out := make([]byte, n+1)
	for j := 0; j < len(s); j++ {
		v := strings.IndexByte(rspamdAlphabet, s[j])
		if v < 0 {
			return nil, false
		}
		bit := 5 * j
		out[bit/8] |= byte(v << (bit % 8))
		if bit%8 > 3 {
			out[bit/8+1] |= byte(v >> (8 - bit%8))
		}
	}
	if 5*len(s) > 8*(n+1) {
		return nil, false // more characters than n bytes (+ under 8 spare bits) need
	}
	return out[:n], out[n] == 0
}

// DecodeRspamdBase32 decodes strictly: alphabet characters only, a length
// some byte string encodes to, zero unused bits (bad_base32).
func DecodeRspamdBase32(s string) ([]byte, error) {
	n := len(s) * 5 / 8
	if (n*8+4)/5 != len(s) {
		return nil, errCode(CodeBadBase32)
	}
	b, ok := decodeBits(s, n)
	if !ok {
		return nil, errCode(CodeBadBase32)
	}
	return b, nil
}

// decodeRspamdKey decodes a 32-byte key: 52 characters, or the 51 that
// rspamd also accepts (255 bits, the top bit taken as zero).
func decodeRspamdKey(s string) ([]byte, bool) {
	switch len(s) {
	case 52:
		b, err := DecodeRspamdBase32(s)
		return b, err == nil
	case 51:
		return decodeBits(s, 32)
	}
	return nil, false
}

// RspamdKeyID is BLAKE2b-512 of a public key; the short ID is its first 5 bytes.
func RspamdKeyID(public []byte) [64]byte { return blake2b.Sum512(public) }

// RspamdKeyHeader is a parsed `Key` field.
type RspamdKeyHeader struct {
	// Encrypted is false for a value without `=` (a plaintext request).
	Encrypted    bool
	ShortID      [5]byte
	ClientPublic []byte
}

// ParseRspamdKeyHeader parses `{b32(short ID or ID)}={b32(client public)}`.
func ParseRspamdKeyHeader(v string) (*RspamdKeyHeader, error) {
	v = strings.Trim(v, " \t")
	id, key, ok := strings.Cut(v, "=")
	if !ok {
		return &RspamdKeyHeader{}, nil
	}
	idb, err := DecodeRspamdBase32(id)
	if err != nil || len(idb) < 5 {
		return nil, errCode(CodeBadKeyHeader)
	}
	pub, ok := decodeRspamdKey(key)
	if !ok {
		return nil, errCode(CodeBadKeyHeader)
	}
	return &RspamdKeyHeader{Encrypted: true, ShortID: [5]byte(idb[:5]), ClientPublic: pub}, nil
}

// RspamdKeypair is a server key pair read from an `rspamadm keypair` file.
type RspamdKeypair struct {
	Secret *KexSecret
	Public []byte
}

// ShortID is the first 5 bytes of the key ID.
func (k *RspamdKeypair) ShortID() [5]byte {
	id := RspamdKeyID(k.Public)
	return [5]byte(id[:5])
}

// uclTokens splits the UCL subset: comments dropped, quoted strings kept
// whole, braces and separators as their own tokens.
func uclTokens(text string) ([]string, bool) {
	var toks []string
	for i := 0; i < len(text); {
		c := text[i]
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			i++
		case c == '#' || strings.HasPrefix(text[i:], "//"):
			for i < len(text) && text[i] != '\n' {
				i++
			}
		case strings.HasPrefix(text[i:], "/*"):
			end := strings.Index(text[i+2:], "*/")
			if end < 0 {
				return nil, false
			}
			i += end + 4
		case c == '"' || c == '\'':
			end := strings.IndexByte(text[i+1:], c)
			if end < 0 {
				return nil, false
			}
			toks = append(toks, text[i:i+end+2])
			i += end + 2
		case strings.IndexByte("{}=:;,", c) >= 0:
			toks = append(toks, string(c))
			i++
		default:
			j := i
			for j < len(text) && strings.IndexByte(" \t\r\n{}=:;,\"'#", text[j]) < 0 {
				j++
			}
			toks = append(toks, text[i:j])
			i = j
		}
	}
	return toks, true
}

func unquote(t string) string {
	if len(t) >= 2 && (t[0] == '"' || t[0] == '\'') {
		return t[1 : len(t)-1]
	}
	return t
}

// ParseRspamdKeypair reads an `rspamadm keypair` block (UCL subset, or
// its JSON form); every failure is bad_keypair.
func ParseRspamdKeypair(text string) (*RspamdKeypair, error) {
	bad := errCode(CodeBadKeypair)
	toks, ok := uclTokens(text)
	if !ok {
		return nil, bad
	}
	// Strip optional outer braces and an optional `keypair { … }` wrapper.
	strip := func() bool {
		if len(toks) >= 2 && toks[0] == "{" && toks[len(toks)-1] == "}" {
			toks = toks[1 : len(toks)-1]
			return true
		}
		if len(toks) >= 3 && unquote(toks[0]) == "keypair" {
			i := 1
			if toks[i] == ":" || toks[i] == "=" {
				i++
			}
			if i < len(toks) && toks[i] == "{" && toks[len(toks)-1] == "}" {
				toks = toks[i+1 : len(toks)-1]
				return true
			}
		}
		return false
	}
	for k := 0; k < 3 && strip(); k++ {
	}
	aliases := map[string]string{
		"pubkey": "pubkey", "public": "pubkey", "public_key": "pubkey",
		"privkey": "privkey", "private": "privkey", "private_key": "privkey", "secret": "privkey", "secret_key": "privkey",
		"id": "id", "encoding": "encoding", "algorithm": "algorithm", "type": "type",
	}
	fields := map[string]string{}
	seen := map[string]bool{}
	for i := 0; i < len(toks); {
		name := unquote(toks[i])
		if strings.ContainsAny(toks[i], "{}=:;,") && len(toks[i]) == 1 {
			return nil, bad
		}
		i++
		if i < len(toks) && (toks[i] == "=" || toks[i] == ":") {
			i++
		}
		if i >= len(toks) || len(toks[i]) == 1 && strings.Contains("{}=:;,", toks[i]) {
			return nil, bad
		}
		value := unquote(toks[i])
		i++
		if i < len(toks) && (toks[i] == ";" || toks[i] == ",") {
			i++
		}
		key, known := aliases[strings.ToLower(name)]
		if seen[strings.ToLower(name)] || known && seen[key] {
			return nil, bad
		}
		seen[strings.ToLower(name)] = true
		if known {
			seen[key] = true
			fields[key] = value
		}
	}
	for f, want := range map[string]string{"encoding": "base32", "algorithm": "curve25519", "type": "kex"} {
		if v, ok := fields[f]; ok && !strings.EqualFold(v, want) {
			return nil, bad
		}
	}
	priv, ok1 := decodeRspamdKey(fields["privkey"])
	pub, ok2 := decodeRspamdKey(fields["pubkey"])
	if !ok1 || !ok2 {
		return nil, bad
	}
	secret, err := NewKexSecret(priv)
	if err != nil || !bytes.Equal(secret.Public(), pub) {
		return nil, bad
	}
	if id, ok := fields["id"]; ok {
		want := RspamdKeyID(pub)
		if id != EncodeRspamdBase32(want[:]) {
			return nil, bad
		}
	}
	return &RspamdKeypair{Secret: secret, Public: pub}, nil
}

// rspamdStream returns the Poly1305 key and a cipher positioned at block 1.
func rspamdStream(nm SessionKey, nonce []byte) (*chacha20.Cipher, [32]byte) {
	c, err := chacha20.NewUnauthenticatedCipher(nm[:], nonce)
	if err != nil {
		panic("httpcrypt: XChaCha20 with a 32-byte key and 24-byte nonce failed")
	}
	var block [64]byte
	c.XORKeyStream(block[:], block[:])
	var pk [32]byte
	copy(pk[:], block[:32])
	return c, pk
}

// RspamdSeal is rspamd's cryptobox: nonce || Poly1305(ct) || ct.
func RspamdSeal(nm SessionKey, nonce [NonceLen]byte, plaintext []byte) []byte {
	c, pk := rspamdStream(nm, nonce[:])
	out := make([]byte, NonceLen+TagLen+len(plaintext))
	copy(out, nonce[:])
	ct := out[NonceLen+TagLen:]
	c.XORKeyStream(ct, plaintext)
	var tag [TagLen]byte
	poly1305.Sum(&tag, ct, &pk)
	copy(out[NonceLen:], tag[:])
	return out
}

// RspamdOpen opens a cryptobox: shorter than 40 bytes is truncated, a
// tag that does not verify integrity (checked before decrypting).
func RspamdOpen(nm SessionKey, body []byte) ([]byte, error) {
	if len(body) < NonceLen+TagLen {
		return nil, ErrTruncated
	}
	c, pk := rspamdStream(nm, body[:NonceLen])
	ct := body[NonceLen+TagLen:]
	var want [TagLen]byte
	poly1305.Sum(&want, ct, &pk)
	if subtle.ConstantTimeCompare(want[:], body[NonceLen:NonceLen+TagLen]) != 1 {
		return nil, ErrIntegrity
	}
	out := make([]byte, len(ct))
	c.XORKeyStream(out, ct)
	return out, nil
}

// FormatRspamdRequest is the outer request head the profile's client writes.
func FormatRspamdRequest(host, keyHeader string, bodyLen int) []byte {
	return []byte("POST /post HTTP/1.1\r\nHost: " + host + "\r\nContent-Length: " + strconv.Itoa(bodyLen) +
		"\r\nContent-Type: application/octet-stream\r\nConnection: close\r\nKey: " + keyHeader + "\r\n\r\n")
}

// FormatRspamdResponse is the outer response head of the profile.
func FormatRspamdResponse(bodyLen int) []byte {
	return []byte("HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(bodyLen) +
		"\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n")
}
