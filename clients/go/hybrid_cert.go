package httpcrypt

// Suite-2 certificates (spec/hybrid.md H2): a v1 certificate with suite
// byte 2 and the hash of the ML-KEM encapsulation key inside the signed
// part; readers of both suites (AnyCert); the lists of `OPTIONS {mount}/pq`
// with their `hck1 ` key texts; the eleven-address AAAA form (H4).

import (
	"crypto/ed25519"
	"crypto/sha3"
	"encoding/binary"
	"strings"
	"unicode/utf8"
)

// Suite-2 certificate sizes.
const (
	// HybridCertLen is the encoded suite-2 certificate.
	HybridCertLen = 150
	// HybridCertTextLen is its text form `hc1 {b64u(cert)}`.
	HybridCertTextLen = 4 + 200
	hybridSignedLen   = 86
	hybridAAAAChunks  = 11
)

// HybridCert is a suite-2 certificate: an identity vouches for an X25519
// key and an ML-KEM-768 key (by hash) from NotBefore to NotAfter.
type HybridCert struct {
	// Version is 1, or 2 for a key that also takes profile-2 requests
	// (spec §4.5); zero encodes as 1.
	Version   uint8
	Serial    uint32
	NotBefore uint32
	NotAfter  uint32
	KexPublic [32]byte
	KemHash   KemHash
	Signer    [SignerLen]byte
	Signature [64]byte
}

// SignHybridCert makes a suite-2 certificate signed by the identity key
// (for servers and tests; Ed25519 is deterministic).
func SignHybridCert(identity ed25519.PrivateKey, version uint8, serial, notBefore, notAfter uint32, kexPublic []byte, kemHash KemHash) *HybridCert {
	c := &HybridCert{Version: version, Serial: serial, NotBefore: notBefore, NotAfter: notAfter, KemHash: kemHash}
	copy(c.KexPublic[:], kexPublic)
	id := &Identity{key: identity.Public().(ed25519.PublicKey)}
	c.Signer = id.SignerID()
	copy(c.Signature[:], ed25519.Sign(identity, hybridSignedMessage(c.Encode())))
	return c
}

func hybridSignedMessage(b []byte) []byte {
	return append(append([]byte(nil), certContext...), b[:hybridSignedLen]...)
}

// Encode returns the 150 certificate bytes.
func (c *HybridCert) Encode() []byte {
	b := make([]byte, HybridCertLen)
	b[0], b[1] = c.Version, SuiteHybrid
	if b[0] == 0 {
		b[0] = CertVersion1
	}
	binary.BigEndian.PutUint32(b[2:], c.Serial)
	binary.BigEndian.PutUint32(b[6:], c.NotBefore)
	binary.BigEndian.PutUint32(b[10:], c.NotAfter)
	copy(b[14:46], c.KexPublic[:])
	copy(b[46:78], c.KemHash[:])
	copy(b[78:86], c.Signer[:])
	copy(b[86:], c.Signature[:])
	return b
}

// DecodeHybridCert parses 150 certificate bytes: another length, a version
// other than 1 and 2, or a suite other than 2 is bad_certificate.
func DecodeHybridCert(b []byte) (*HybridCert, error) {
	if len(b) != HybridCertLen || (b[0] != CertVersion1 && b[0] != CertVersionCompact) || b[1] != SuiteHybrid {
		return nil, ErrBadCertificate
	}
	c := &HybridCert{
		Version:   b[0],
		Serial:    binary.BigEndian.Uint32(b[2:]),
		NotBefore: binary.BigEndian.Uint32(b[6:]),
		NotAfter:  binary.BigEndian.Uint32(b[10:]),
	}
	copy(c.KexPublic[:], b[14:46])
	copy(c.KemHash[:], b[46:78])
	copy(c.Signer[:], b[78:86])
	copy(c.Signature[:], b[86:])
	return c, nil
}

// ParseHybridCertText parses the text form of a suite-2 certificate.
func ParseHybridCertText(text string) (*HybridCert, error) {
	c, err := ParseAnyCertText(text)
	if err != nil {
		return nil, err
	}
	if c.Hybrid == nil {
		return nil, ErrBadCertificate
	}
	return c.Hybrid, nil
}

// Text returns the text form (204 characters).
func (c *HybridCert) Text() string { return certPrefix + EncodeB64u(c.Encode()) }

// KID is the suite-2 key ID, SHA3-256(kex_public || kem_hash)[0..10]. It
// differs from the v1 key ID of the same kex key, so the cookie tells the
// server the suite before it reads the body.
func (c *HybridCert) KID() KID {
	h := sha3.New256()
	h.Write(c.KexPublic[:])
	h.Write(c.KemHash[:])
	return KID(h.Sum(nil)[:KIDLen])
}

// ValidAt: not_before <= now <= not_after (both ends included).
func (c *HybridCert) ValidAt(now int64) bool {
	return int64(c.NotBefore) <= now && now <= int64(c.NotAfter)
}

// Verify checks the signer ID, then the signature (bad_signature). The
// suite byte and kem_hash are signed, so a stripped certificate fails.
func (c *HybridCert) Verify(id *Identity) error {
	if c.Signer != id.SignerID() {
		return ErrBadSignature
	}
	return id.Verify(hybridSignedMessage(c.Encode()), c.Signature[:])
}

// AnyCert is a certificate of either suite, as a reader of suite 2 takes
// them: exactly one of Classical (suite 1) and Hybrid (suite 2) is set.
type AnyCert struct {
	Classical *KeyCert
	Hybrid    *HybridCert
}

// DecodeAnyCert decodes by the suite byte; a length that does not match
// the suite, or another suite, is bad_certificate.
func DecodeAnyCert(b []byte) (AnyCert, error) {
	if len(b) < 2 {
		return AnyCert{}, ErrBadCertificate
	}
	switch b[1] {
	case 1:
		c, err := DecodeCert(b)
		return AnyCert{Classical: c}, err
	case SuiteHybrid:
		c, err := DecodeHybridCert(b)
		return AnyCert{Hybrid: c}, err
	}
	return AnyCert{}, ErrBadCertificate
}

// ParseAnyCertText parses `hc1 {b64u(cert)}` of either suite.
func ParseAnyCertText(text string) (AnyCert, error) {
	body, ok := strings.CutPrefix(text, certPrefix)
	if !ok {
		return AnyCert{}, ErrBadCertificate
	}
	b, err := DecodeB64u(body)
	if err != nil {
		return AnyCert{}, err
	}
	return DecodeAnyCert(b)
}

// Suite is 1 or 2.
func (c AnyCert) Suite() int {
	if c.Hybrid != nil {
		return SuiteHybrid
	}
	return 1
}

// KID is the key ID a cookie names: of the kex key (suite 1) or of the
// pair (suite 2).
func (c AnyCert) KID() KID {
	if c.Hybrid != nil {
		return c.Hybrid.KID()
	}
	return c.Classical.KID()
}

// Verify checks the signature under id.
func (c AnyCert) Verify(id *Identity) error {
	if c.Hybrid != nil {
		return c.Hybrid.Verify(id)
	}
	return c.Classical.Verify(id)
}

// HybridCertList is a certificate list that may hold both suites and
// encapsulation key texts: the answer to `OPTIONS {mount}/pq`.
type HybridCertList struct {
	// Certs in list order.
	Certs []AnyCert
	// Kems are the `hck1 ` lines in list order.
	Kems []*KemPublic
}

// ParseHybridCertList parses application/httpcrypt-certs as a reader of
// suite 2 does: LF or CRLF, blank lines skipped, every other line a
// certificate of either suite or a key text, and every one must parse.
func ParseHybridCertList(body []byte) (*HybridCertList, error) {
	if !utf8.Valid(body) {
		return nil, ErrBadCertificate
	}
	l := &HybridCertList{}
	for _, line := range strings.Split(string(body), "\n") {
		line = strings.TrimSuffix(line, "\r")
		switch {
		case line == "":
		case strings.HasPrefix(line, kemTextPrefix):
			k, err := ParseKemText(line)
			if err != nil {
				return nil, err
			}
			l.Kems = append(l.Kems, k)
		default:
			c, err := ParseAnyCertText(line)
			if err != nil {
				return nil, err
			}
			l.Certs = append(l.Certs, c)
		}
	}
	return l, nil
}

// Hybrid returns the suite-2 certificates in list order.
func (l *HybridCertList) Hybrid() []*HybridCert {
	var out []*HybridCert
	for _, c := range l.Certs {
		if c.Hybrid != nil {
			out = append(out, c.Hybrid)
		}
	}
	return out
}

// KemFor returns the list's key text that c names, or nil.
func (l *HybridCertList) KemFor(c *HybridCert) *KemPublic {
	for _, k := range l.Kems {
		if k.Hash() == c.KemHash {
			return k
		}
	}
	return nil
}

// FormatHybridCertList formats the `OPTIONS {mount}/pq` answer: the
// certificates, then each distinct key text once, LF line ends.
func FormatHybridCertList(certs []*HybridCert, kems []*KemPublic) string {
	var b strings.Builder
	for _, c := range certs {
		b.WriteString(c.Text())
		b.WriteByte('\n')
	}
	seen := map[KemHash]bool{}
	for _, k := range kems {
		if !seen[k.Hash()] {
			seen[k.Hash()] = true
			b.WriteString(k.Text())
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// ParseHybridTXT parses a TXT record at _httpcrypt-pq.{host}: its
// character-strings joined, UTF-8 (bad_record), then a suite-2
// certificate text.
func ParseHybridTXT(strs [][]byte) (*HybridCert, error) {
	text, err := joinTXT(strs)
	if err != nil {
		return nil, err
	}
	return ParseHybridCertText(text)
}

// ParseKemTXT parses the TXT record at _httpcrypt-kem.{host}: the key
// text in character-strings of at most 255 bytes, joined.
func ParseKemTXT(strs [][]byte) (*KemPublic, error) {
	text, err := joinTXT(strs)
	if err != nil {
		return nil, err
	}
	return ParseKemText(text)
}

// FormatHybridAAAA returns the eleven addresses at _httpcrypt-pq.{host}
// carrying a suite-2 certificate (zero-padded to 154 bytes, chunks of 14,
// as spec §6.2).
func FormatHybridAAAA(c *HybridCert) [][16]byte {
	return formatAAAAChunks(c.Encode(), hybridAAAAChunks)
}

// ParseHybridAAAA reassembles a suite-2 certificate from its AAAA RRset in
// any order: exactly eleven addresses, prefix 0xfd0, orders 0–10 once
// each, zero padding (bad_record otherwise), then the certificate decodes.
func ParseHybridAAAA(addrs [][16]byte) (*HybridCert, error) {
	b, err := joinAAAAChunks(addrs, hybridAAAAChunks, HybridCertLen)
	if err != nil {
		return nil, err
	}
	return DecodeHybridCert(b)
}
