package httpcrypt

import (
	"crypto/ed25519"
	"encoding/binary"
	"strings"
	"unicode/utf8"

	"filippo.io/edwards25519"
)

// Certificate constants (spec §5).
const (
	// CertVersion1 is the contract's version byte; CertVersionCompact (2)
	// says the key also takes profile-2 requests (spec §4.5).
	CertVersion1       = 1
	CertVersionCompact = 2
	CertLen            = 118
	signedLen          = 54
	SignerLen          = 8
	certPrefix         = "hc1 "
	// CertTextLen is the length of the text form `hc1 {b64u(cert)}`.
	CertTextLen = 4 + 158
)

var certContext = []byte("httpcrypt-cert-v1")

// Identity is a server's Ed25519 identity public key, already checked to
// be a valid point.
type Identity struct {
	key ed25519.PublicKey
}

// ParseIdentity accepts the 32 key bytes; bytes that are not a curve
// point are bad_signature (spec §2).
func ParseIdentity(b []byte) (*Identity, error) {
	if len(b) != ed25519.PublicKeySize {
		return nil, ErrBadSignature
	}
	if _, err := new(edwards25519.Point).SetBytes(b); err != nil {
		return nil, ErrBadSignature
	}
	return &Identity{key: append(ed25519.PublicKey(nil), b...)}, nil
}

// ParseIdentityB64 parses the base64url text of an identity key.
func ParseIdentityB64(s string) (*Identity, error) {
	b, err := decodeFixed(s, 32)
	if err != nil {
		return nil, err
	}
	return ParseIdentity(b)
}

// Bytes returns the 32 key bytes.
func (id *Identity) Bytes() []byte { return append([]byte(nil), id.key...) }

// SignerID is SHA3-256(identity_public)[0..8].
func (id *Identity) SignerID() [SignerLen]byte {
	h := sha3Concat(id.key)
	return [SignerLen]byte(h[:SignerLen])
}

func isSmallOrder(p *edwards25519.Point) bool {
	return new(edwards25519.Point).MultByCofactor(p).Equal(edwards25519.NewIdentityPoint()) == 1
}

// Verify checks an Ed25519 signature strictly (spec D14): the key and R
// must not have small order, s must be reduced (crypto/ed25519 checks s
// and recomputes R's encoding).
func (id *Identity) Verify(msg, sig []byte) error {
	if len(sig) != ed25519.SignatureSize {
		return ErrBadSignature
	}
	a, err := new(edwards25519.Point).SetBytes(id.key)
	if err != nil || isSmallOrder(a) {
		return ErrBadSignature
	}
	r, err := new(edwards25519.Point).SetBytes(sig[:32])
	if err != nil || isSmallOrder(r) {
		return ErrBadSignature
	}
	if !ed25519.Verify(id.key, msg, sig) {
		return ErrBadSignature
	}
	return nil
}

// KeyCert is a key certificate: an identity vouches for an X25519 key and
// its validity window (spec §5).
type KeyCert struct {
	// Version is the version byte: 1, or 2 for a key that also takes
	// profile-2 requests (spec §4.5). Zero encodes as 1.
	Version   uint8
	Serial    uint32
	NotBefore uint32
	NotAfter  uint32
	KexPublic [32]byte
	Signer    [SignerLen]byte
	Signature [64]byte
}

// SignCert makes a certificate signed by the identity key (for tests and
// servers; Ed25519 is deterministic).
func SignCert(identity ed25519.PrivateKey, serial, notBefore, notAfter uint32, kexPublic []byte) *KeyCert {
	return SignCertVersion(identity, CertVersion1, serial, notBefore, notAfter, kexPublic)
}

// SignCertVersion is SignCert with the version byte (1 or 2); the
// signature covers it.
func SignCertVersion(identity ed25519.PrivateKey, version uint8, serial, notBefore, notAfter uint32, kexPublic []byte) *KeyCert {
	c := &KeyCert{Version: version, Serial: serial, NotBefore: notBefore, NotAfter: notAfter}
	copy(c.KexPublic[:], kexPublic)
	id := &Identity{key: identity.Public().(ed25519.PublicKey)}
	c.Signer = id.SignerID()
	b := c.Encode()
	copy(c.Signature[:], ed25519.Sign(identity, signedMessage(b)))
	return c
}

func signedMessage(b []byte) []byte {
	return append(append([]byte(nil), certContext...), b[:signedLen]...)
}

// Encode returns the 118 certificate bytes.
func (c *KeyCert) Encode() []byte {
	b := make([]byte, CertLen)
	b[0], b[1] = c.version(), 1
	binary.BigEndian.PutUint32(b[2:], c.Serial)
	binary.BigEndian.PutUint32(b[6:], c.NotBefore)
	binary.BigEndian.PutUint32(b[10:], c.NotAfter)
	copy(b[14:46], c.KexPublic[:])
	copy(b[46:54], c.Signer[:])
	copy(b[54:], c.Signature[:])
	return b
}

func (c *KeyCert) version() uint8 {
	if c.Version == 0 {
		return CertVersion1
	}
	return c.Version
}

// Profile is the request profile the key takes: 2 for a version-2
// certificate, else 1 (spec §4.5).
func (c *KeyCert) Profile() int {
	if c.version() == CertVersionCompact {
		return ProfileCompact
	}
	return Profile1
}

// DecodeCert parses 118 certificate bytes: wrong length, a version other
// than 1 and 2, or a suite other than 1 is bad_certificate.
func DecodeCert(b []byte) (*KeyCert, error) {
	if len(b) != CertLen || (b[0] != CertVersion1 && b[0] != CertVersionCompact) || b[1] != 1 {
		return nil, ErrBadCertificate
	}
	c := &KeyCert{
		Version:   b[0],
		Serial:    binary.BigEndian.Uint32(b[2:]),
		NotBefore: binary.BigEndian.Uint32(b[6:]),
		NotAfter:  binary.BigEndian.Uint32(b[10:]),
	}
	copy(c.KexPublic[:], b[14:46])
	copy(c.Signer[:], b[46:54])
	copy(c.Signature[:], b[54:])
	return c, nil
}

// ParseCertText parses the text form `hc1 {b64u(cert)}`, nothing around it.
func ParseCertText(text string) (*KeyCert, error) {
	body, ok := strings.CutPrefix(text, certPrefix)
	if !ok {
		return nil, ErrBadCertificate
	}
	b, err := DecodeB64u(body)
	if err != nil {
		return nil, err
	}
	return DecodeCert(b)
}

// Text returns the text form.
func (c *KeyCert) Text() string { return certPrefix + EncodeB64u(c.Encode()) }

// KID is the key ID of the certified key.
func (c *KeyCert) KID() KID { return KeyID(c.KexPublic[:]) }

// ValidAt: not_before <= now <= not_after (both ends included).
func (c *KeyCert) ValidAt(now int64) bool {
	return int64(c.NotBefore) <= now && now <= int64(c.NotAfter)
}

// Verify checks the signer ID, then the signature (bad_signature).
func (c *KeyCert) Verify(id *Identity) error {
	if c.Signer != id.SignerID() {
		return ErrBadSignature
	}
	return id.Verify(signedMessage(c.Encode()), c.Signature[:])
}

// Key reduces a verified (or opportunistically accepted) certificate to
// the discovered key a client uses.
func (c *KeyCert) Key() DiscoveredKey {
	return DiscoveredKey{Version: c.version(), Serial: c.Serial, NotBefore: c.NotBefore, NotAfter: c.NotAfter, KexPublic: c.KexPublic}
}

// DiscoveredKey is a server key without its signature, made only after the
// form's signature verified in authenticated mode (spec §6.3, D25).
type DiscoveredKey struct {
	// Version is the version byte of the certificate the key came from
	// (2: the key also takes profile-2 requests); a key learnt via TLSA is
	// always 1, and 0 reads as 1 (spec §4.5).
	Version   uint8
	Serial    uint32
	NotBefore uint32
	NotAfter  uint32
	KexPublic [32]byte
}

// ValidAt: not_before <= now <= not_after.
func (k *DiscoveredKey) ValidAt(now int64) bool {
	return int64(k.NotBefore) <= now && now <= int64(k.NotAfter)
}

// KID is the key ID.
func (k *DiscoveredKey) KID() KID { return KeyID(k.KexPublic[:]) }

// Profile is the request profile a client uses with this key: 2 exactly
// when its certificate had version 2 (spec §4.5), else 1.
func (k *DiscoveredKey) Profile() int {
	if k.Version == CertVersionCompact {
		return ProfileCompact
	}
	return Profile1
}

func better(serial, notBefore uint32, bs, bnb uint32) bool {
	return serial > bs || serial == bs && notBefore > bnb
}

// ChooseKey picks the valid key with the highest serial (later not_before
// on ties); none valid is not_valid.
func ChooseKey(keys []DiscoveredKey, now int64) (*DiscoveredKey, error) {
	var best *DiscoveredKey
	for i := range keys {
		k := &keys[i]
		if !k.ValidAt(now) {
			continue
		}
		if best == nil || better(k.Serial, k.NotBefore, best.Serial, best.NotBefore) {
			best = k
		}
	}
	if best == nil {
		return nil, ErrNotValid
	}
	return best, nil
}

// ChooseCert picks among certificates valid now (and, with an identity,
// verifying under it) the highest serial. None: bad_signature when a valid
// certificate failed verification, not_valid otherwise (spec §5, D11).
func ChooseCert(certs []*KeyCert, now int64, id *Identity) (*KeyCert, error) {
	var best *KeyCert
	badSig := false
	for _, c := range certs {
		if !c.ValidAt(now) {
			continue
		}
		if id != nil && c.Verify(id) != nil {
			badSig = true
			continue
		}
		if best == nil || better(c.Serial, c.NotBefore, best.Serial, best.NotBefore) {
			best = c
		}
	}
	if best == nil {
		if badSig {
			return nil, ErrBadSignature
		}
		return nil, ErrNotValid
	}
	return best, nil
}

// ParseCertList parses application/httpcrypt-certs: one text form per
// line, LF or CRLF, empty lines skipped, every other line must parse.
func ParseCertList(body []byte) ([]*KeyCert, error) {
	if !utf8.Valid(body) {
		return nil, ErrBadCertificate
	}
	var out []*KeyCert
	for _, l := range strings.Split(string(body), "\n") {
		l = strings.TrimSuffix(l, "\r")
		if l == "" {
			continue
		}
		c, err := ParseCertText(l)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// FormatCertList formats certificates as application/httpcrypt-certs.
func FormatCertList(certs []*KeyCert) string {
	var b strings.Builder
	for _, c := range certs {
		b.WriteString(c.Text())
		b.WriteByte('\n')
	}
	return b.String()
}
