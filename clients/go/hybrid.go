package httpcrypt

// Suite 2, the hybrid key agreement (spec/hybrid.md): X25519 and
// ML-KEM-768 (FIPS 203) joined by X-Wing's combiner, so that a session key
// stays secret while either problem stays hard. This file holds the
// ML-KEM keys and their `hck1 ` text, the combiner and both halves of the
// agreement; hybrid_cert.go the suite-2 certificates, lists and DNS forms.
//
// ML-KEM-768 is the standard library's crypto/mlkem, SHA3-256 and
// SHAKE-256 are crypto/sha3, X25519 is crypto/ecdh (suite.go). The glue
// written here is the combiner (one SHA3-256) and the seed expansion of the
// X-Wing draft's test vectors.

import (
	"crypto/mlkem"
	"crypto/sha3"
	"strings"
)

// Sizes of suite 2 (spec/hybrid.md H1, H2).
const (
	// SuiteHybrid is the suite byte of a suite-2 certificate.
	SuiteHybrid = 2
	// KemCiphertextLen is the ML-KEM-768 ciphertext ct_M in front of a
	// hybrid request's sealed stream.
	KemCiphertextLen = mlkem.CiphertextSize768
	// KemPublicLen is the ML-KEM-768 encapsulation key ek_M.
	KemPublicLen = mlkem.EncapsulationKeySize768
	// KemSeedLen is the ML-KEM seed d || z (FIPS 203 KeyGen_internal).
	KemSeedLen = mlkem.SeedSize
	// KemTextLen is the length of the key text `hck1 {b64u(ek_M)}`.
	KemTextLen    = len(kemTextPrefix) + (KemPublicLen*8+5)/6
	kemTextPrefix = "hck1 "
)

// xwingLabel is X-Wing's label, the six ASCII characters \.//^\ .
var xwingLabel = []byte(`\.//^\`)

// KemHash is SHA3-256(ek_M): what a suite-2 certificate signs in place of
// the 1,184-byte key.
type KemHash [32]byte

// KemPublic is an ML-KEM-768 encapsulation key that passed FIPS 203's
// modulus check, with its hash.
type KemPublic struct {
	ek   *mlkem.EncapsulationKey768
	hash KemHash
}

// ParseKemPublic takes the 1,184 key bytes; another length, or a key that
// fails the modulus check, is bad_certificate.
func ParseKemPublic(b []byte) (*KemPublic, error) {
	if len(b) != KemPublicLen {
		return nil, ErrBadCertificate
	}
	ek, err := mlkem.NewEncapsulationKey768(b)
	if err != nil {
		return nil, ErrBadCertificate
	}
	return &KemPublic{ek: ek, hash: sha3.Sum256(b)}, nil
}

// ParseKemText parses `hck1 {b64u(ek_M)}` exactly: the prefix (else
// bad_certificate), strict base64url (else bad_base64), then the key.
func ParseKemText(text string) (*KemPublic, error) {
	body, ok := strings.CutPrefix(text, kemTextPrefix)
	if !ok {
		return nil, ErrBadCertificate
	}
	b, err := DecodeB64u(body)
	if err != nil {
		return nil, err
	}
	return ParseKemPublic(b)
}

// Bytes returns ek_M.
func (k *KemPublic) Bytes() []byte { return k.ek.Bytes() }

// Hash returns SHA3-256(ek_M).
func (k *KemPublic) Hash() KemHash { return k.hash }

// Text returns the key text `hck1 {b64u(ek_M)}` (1,584 characters).
func (k *KemPublic) Text() string { return kemTextPrefix + EncodeB64u(k.ek.Bytes()) }

// Check is kem_mismatch unless c signs the hash of this key.
func (k *KemPublic) Check(c *HybridCert) error {
	if k.hash != c.KemHash {
		return ErrKemMismatch
	}
	return nil
}

// KemSecret is a server's ML-KEM-768 key pair, made from its 64-byte seed
// d || z. The client never holds one; it is here for the vectors and the
// in-memory server of the tests.
type KemSecret struct {
	dk     *mlkem.DecapsulationKey768
	public *KemPublic
}

// NewKemSecret makes the key pair of a 64-byte seed (FIPS 203
// KeyGen_internal(d, z)).
func NewKemSecret(seed []byte) (*KemSecret, error) {
	dk, err := mlkem.NewDecapsulationKey768(seed)
	if err != nil {
		return nil, ErrBadCertificate
	}
	pub, err := ParseKemPublic(dk.EncapsulationKey().Bytes())
	if err != nil {
		return nil, err
	}
	return &KemSecret{dk: dk, public: pub}, nil
}

// Public returns the encapsulation key.
func (s *KemSecret) Public() *KemPublic { return s.public }

// Decapsulate decapsulates exactly 1,088 bytes (bad_ciphertext otherwise).
// A ciphertext made for another key gives an unrelated secret (implicit
// rejection), never an error.
func (s *KemSecret) Decapsulate(ct []byte) ([]byte, error) {
	if len(ct) != KemCiphertextLen {
		return nil, ErrBadCiphertext
	}
	ss, err := s.dk.Decapsulate(ct)
	if err != nil {
		return nil, ErrBadCiphertext
	}
	return ss, nil
}

// Combine is X-Wing's combiner, the hybrid session key
// k = SHA3-256(ss_M || ss_X || ct_X || pk_X || "\.//^\") (spec/hybrid.md H1).
func Combine(ssM, ssX, ctX, pkX []byte) SessionKey {
	h := sha3.New256()
	for _, p := range [][]byte{ssM, ssX, ctX, pkX, xwingLabel} {
		h.Write(p)
	}
	var k SessionKey
	h.Sum(k[:0])
	return k
}

// HybridAgreement is the client's half of one hybrid agreement: its
// X25519 public key ct_X (the cookie value), the ML-KEM ciphertext ct_M
// (sent before the sealed stream) and the session key.
type HybridAgreement struct {
	CtX [32]byte
	CtM []byte
	Key SessionKey
}

// NewHybridAgreement encapsulates to the suite-2 key (kem_mismatch when
// the key text is not the one cert names) with the client's X25519 key
// client, which should be fresh for every request.
func NewHybridAgreement(cert *HybridCert, kem *KemPublic, client *KexSecret) (*HybridAgreement, error) {
	if err := kem.Check(cert); err != nil {
		return nil, err
	}
	ssM, ctM := kem.ek.Encapsulate()
	defer clear(ssM)
	return HybridAgreementFrom(cert.KexPublic[:], client, ctM, ssM)
}

// HybridAgreementFrom is the agreement for an ML-KEM encapsulation made
// already (ct_M, ss_M), as test vectors state it: X25519 between client
// and the server's kex key (small_order on an all-zero result), then the
// combiner.
func HybridAgreementFrom(kexPublic []byte, client *KexSecret, ctM, ssM []byte) (*HybridAgreement, error) {
	if len(ctM) != KemCiphertextLen {
		return nil, ErrBadCiphertext
	}
	ssX, err := client.Shared(kexPublic)
	if err != nil {
		return nil, err
	}
	defer clear(ssX)
	a := &HybridAgreement{CtX: [32]byte(client.Public()), CtM: append([]byte(nil), ctM...)}
	a.Key = Combine(ssM, ssX, a.CtX[:], kexPublic)
	return a, nil
}

// HybridDecapsulate is the server's half: the ciphertext's length first
// (fewer than 1,088 bytes is bad_ciphertext; only the first 1,088 are
// read), then X25519 with the client's ct_X (small_order), then ML-KEM
// decapsulation and the combiner.
func HybridDecapsulate(kex *KexSecret, kem *KemSecret, ctX, ctM []byte) (SessionKey, error) {
	if len(ctM) < KemCiphertextLen {
		return SessionKey{}, ErrBadCiphertext
	}
	ssX, err := kex.Shared(ctX)
	if err != nil {
		return SessionKey{}, err
	}
	defer clear(ssX)
	ssM, err := kem.Decapsulate(ctM[:KemCiphertextLen])
	if err != nil {
		return SessionKey{}, err
	}
	defer clear(ssM)
	return Combine(ssM, ssX, ctX, kex.Public()), nil
}

// XWingExpandSeed is the X-Wing draft's key generation from a 32-byte
// seed, which this protocol does not use (its two halves are separate keys,
// spec/hybrid.md H1) but the draft's test vectors need: SHAKE-256(seed),
// the first 64 bytes the ML-KEM seed, the next 32 the X25519 secret.
func XWingExpandSeed(seed []byte) (*KemSecret, *KexSecret, error) {
	x := sha3.SumSHAKE256(seed, KemSeedLen+32)
	defer clear(x)
	kem, err := NewKemSecret(x[:KemSeedLen])
	if err != nil {
		return nil, nil, err
	}
	kex, err := NewKexSecret(x[KemSeedLen:])
	if err != nil {
		return nil, nil, err
	}
	return kem, kex, nil
}
