package httpcrypt

import (
	"bytes"
	"crypto/ed25519"
	encasn1 "encoding/asn1"
	"encoding/hex"
	"math/big"
	"strings"
	"time"

	"golang.org/x/crypto/cryptobyte"
	"golang.org/x/crypto/cryptobyte/asn1"
)

// TLSA record parameters (spec §6.3).
const (
	TLSAUsageDANEEE  = 3
	TLSASelectorFull = 0
	TLSAMatchingFull = 0
	TLSAMaxDER       = 2048
)

var (
	oidEd25519  = encasn1.ObjectIdentifier{1, 3, 101, 112}
	oidX25519   = encasn1.ObjectIdentifier{1, 3, 101, 110}
	oidCN       = encasn1.ObjectIdentifier{2, 5, 4, 3}
	oidKeyUsage = encasn1.ObjectIdentifier{2, 5, 29, 15}

	tagVersion    = asn1.Tag(0).Constructed().ContextSpecific()
	tagIssuerUID  = asn1.Tag(1).ContextSpecific()
	tagSubjectUID = asn1.Tag(2).ContextSpecific()
	tagExtensions = asn1.Tag(3).Constructed().ContextSpecific()
)

// TLSACert is what a TLSA record's X.509 certificate states: a server key
// and its validity, plus the signed bytes to verify in authenticated mode.
type TLSACert struct {
	Serial    uint32
	NotBefore uint32
	NotAfter  uint32
	KexPublic [32]byte
	tbs       []byte
	signature []byte
}

// Verify checks the Ed25519 signature over the TBSCertificate (no signer-ID
// check: the signature is the check).
func (c *TLSACert) Verify(id *Identity) error { return id.Verify(c.tbs, c.signature) }

// Key is the discovered key the certificate states.
func (c *TLSACert) Key() DiscoveredKey {
	// TLSA has no place for the version: always used with v1 (spec §4.5).
	return DiscoveredKey{Version: CertVersion1, Serial: c.Serial, NotBefore: c.NotBefore, NotAfter: c.NotAfter, KexPublic: c.KexPublic}
}

func addAlgorithm(b *cryptobyte.Builder, oid encasn1.ObjectIdentifier) {
	b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) { b.AddASN1ObjectIdentifier(oid) })
}

func addName(b *cryptobyte.Builder, cn string) {
	b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddASN1(asn1.SET, func(b *cryptobyte.Builder) {
			b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
				b.AddASN1ObjectIdentifier(oidCN)
				b.AddASN1(asn1.UTF8String, func(b *cryptobyte.Builder) { b.AddBytes([]byte(cn)) })
			})
		})
	})
}

// addTime writes UTCTime through 2049 and GeneralizedTime from 2050
// (RFC 5280 §4.1.2.5).
func addTime(b *cryptobyte.Builder, secs uint32) {
	t := time.Unix(int64(secs), 0).UTC()
	if t.Year() < 2050 {
		b.AddASN1UTCTime(t)
	} else {
		b.AddASN1GeneralizedTime(t)
	}
}

// EncodeTLSA builds the X.509 form of a certificate, signed by the
// identity key (spec §6.3). Ed25519 is deterministic: one DER per input.
func EncodeTLSA(identity ed25519.PrivateKey, c *KeyCert) []byte {
	id := &Identity{key: identity.Public().(ed25519.PublicKey)}
	signer, kid := id.SignerID(), c.KID()
	var tb cryptobyte.Builder
	tb.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddASN1(tagVersion, func(b *cryptobyte.Builder) { b.AddASN1Int64(2) })
		b.AddASN1Uint64(uint64(c.Serial))
		addAlgorithm(b, oidEd25519)
		addName(b, "httpcrypt identity "+EncodeB64u(signer[:]))
		b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
			addTime(b, c.NotBefore)
			addTime(b, c.NotAfter)
		})
		addName(b, "httpcrypt kex "+EncodeB64u(kid[:]))
		b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
			addAlgorithm(b, oidX25519)
			b.AddASN1BitString(c.KexPublic[:])
		})
		b.AddASN1(tagExtensions, func(b *cryptobyte.Builder) {
			b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
				b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
					b.AddASN1ObjectIdentifier(oidKeyUsage)
					b.AddASN1Boolean(true)
					// keyUsage BIT STRING: keyAgreement (bit 4) only.
					b.AddASN1(asn1.OCTET_STRING, func(b *cryptobyte.Builder) {
						b.AddASN1(asn1.BIT_STRING, func(b *cryptobyte.Builder) { b.AddBytes([]byte{3, 0x08}) })
					})
				})
			})
		})
	})
	tbs := tb.BytesOrPanic()
	sig := ed25519.Sign(identity, tbs)
	var cb cryptobyte.Builder
	cb.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddBytes(tbs)
		addAlgorithm(b, oidEd25519)
		b.AddASN1BitString(sig)
	})
	return cb.BytesOrPanic()
}

// FormatTLSA is the zone-file RDATA `3 0 0 HEX`.
func FormatTLSA(der []byte) string {
	return "3 0 0 " + strings.ToUpper(hex.EncodeToString(der))
}

// readAlgorithm reads an AlgorithmIdentifier; it must have no parameters.
func readAlgorithm(s *cryptobyte.String) (encasn1.ObjectIdentifier, bool) {
	var alg cryptobyte.String
	var oid encasn1.ObjectIdentifier
	if !s.ReadASN1(&alg, asn1.SEQUENCE) || !alg.ReadASN1ObjectIdentifier(&oid) || !alg.Empty() {
		return nil, false
	}
	return oid, true
}

// readTime reads a UTCTime or GeneralizedTime in its RFC 5280 form (the
// form the year demands) within the u32 range.
func readTime(s *cryptobyte.String) (uint32, bool) {
	var t time.Time
	utc := s.PeekASN1Tag(asn1.UTCTime)
	if utc && !s.ReadASN1UTCTime(&t) || !utc && !s.ReadASN1GeneralizedTime(&t) {
		return 0, false
	}
	if utc != (t.Year() < 2050) || t.Unix() < 0 || t.Unix() > 1<<32-1 {
		return 0, false
	}
	return uint32(t.Unix()), true
}

// ReadTLSA reads a TLSA record (spec §6.3): usage 3, selector 0, matching 0
// and at most 2048 bytes (bad_record), then a canonical DER X.509 v3
// certificate of an X25519 key signed with Ed25519 (bad_certificate).
// Names and extensions are ignored, except that their encoding must be DER.
func ReadTLSA(usage, selector, matching int, data []byte) (*TLSACert, error) {
	if usage != TLSAUsageDANEEE || selector != TLSASelectorFull || matching != TLSAMatchingFull || len(data) > TLSAMaxDER {
		return nil, ErrBadRecord
	}
	c, ok := parseTLSA(data)
	if !ok {
		return nil, ErrBadCertificate
	}
	return c, nil
}

func parseTLSA(data []byte) (*TLSACert, bool) {
	in := cryptobyte.String(data)
	var cert, tbsElem cryptobyte.String
	if !in.ReadASN1(&cert, asn1.SEQUENCE) || !in.Empty() || !cert.ReadASN1Element(&tbsElem, asn1.SEQUENCE) {
		return nil, false
	}
	outerAlg, ok := readAlgorithm(&cert)
	var sig encasn1.BitString
	if !ok || !cert.ReadASN1BitString(&sig) || !cert.Empty() {
		return nil, false
	}
	if !outerAlg.Equal(oidEd25519) || sig.BitLength != 64*8 {
		return nil, false
	}
	c := &TLSACert{tbs: append([]byte(nil), tbsElem...), signature: sig.Bytes}

	tbs := tbsElem
	var body, ver cryptobyte.String
	var version int64
	if !tbs.ReadASN1(&body, asn1.SEQUENCE) ||
		!body.ReadASN1(&ver, tagVersion) || !ver.ReadASN1Integer(&version) || !ver.Empty() || version != 2 {
		return nil, false
	}
	serial := new(big.Int)
	if !body.ReadASN1Integer(serial) || serial.Sign() < 0 || serial.BitLen() > 32 {
		return nil, false
	}
	c.Serial = uint32(serial.Uint64())
	innerAlg, ok := readAlgorithm(&body)
	if !ok || !innerAlg.Equal(outerAlg) {
		return nil, false
	}
	var issuer, validity, subject, spki cryptobyte.String
	if !body.ReadASN1(&issuer, asn1.SEQUENCE) || !body.ReadASN1(&validity, asn1.SEQUENCE) {
		return nil, false
	}
	if c.NotBefore, ok = readTime(&validity); !ok {
		return nil, false
	}
	if c.NotAfter, ok = readTime(&validity); !ok || !validity.Empty() {
		return nil, false
	}
	if !body.ReadASN1(&subject, asn1.SEQUENCE) || !body.ReadASN1(&spki, asn1.SEQUENCE) {
		return nil, false
	}
	keyAlg, ok := readAlgorithm(&spki)
	var key encasn1.BitString
	if !ok || !keyAlg.Equal(oidX25519) || !spki.ReadASN1BitString(&key) || !spki.Empty() || key.BitLength != 32*8 {
		return nil, false
	}
	copy(c.KexPublic[:], key.Bytes)
	var skip cryptobyte.String
	var present bool
	if !body.ReadOptionalASN1(&skip, &present, tagIssuerUID) || !body.ReadOptionalASN1(&skip, &present, tagSubjectUID) {
		return nil, false
	}
	var exts cryptobyte.String
	if !body.ReadOptionalASN1(&exts, &present, tagExtensions) || !body.Empty() {
		return nil, false
	}
	if present && !extensionsAreDER(exts) {
		return nil, false
	}
	return c, true
}

// extensionsAreDER checks the one DER rule a reader that ignores
// extensions could miss: `critical` equal to its DEFAULT FALSE must be
// absent, and a BOOLEAN is 0x00 or 0xFF.
func extensionsAreDER(exts cryptobyte.String) bool {
	var list cryptobyte.String
	if !exts.ReadASN1(&list, asn1.SEQUENCE) || !exts.Empty() {
		return false
	}
	for !list.Empty() {
		var ext cryptobyte.String
		var oid encasn1.ObjectIdentifier
		if !list.ReadASN1(&ext, asn1.SEQUENCE) || !ext.ReadASN1ObjectIdentifier(&oid) {
			return false
		}
		if ext.PeekASN1Tag(asn1.BOOLEAN) {
			var raw cryptobyte.String
			if !ext.ReadASN1(&raw, asn1.BOOLEAN) || !bytes.Equal(raw, []byte{0xff}) {
				return false
			}
		}
		var value cryptobyte.String
		if !ext.ReadASN1(&value, asn1.OCTET_STRING) || !ext.Empty() {
			return false
		}
	}
	return true
}
