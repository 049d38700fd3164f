package httpcrypt

import (
	"bytes"
	"crypto/sha3"
	"reflect"
	"testing"
)

// FuzzOpener: any input either fails or yields exactly what was sealed,
// and never panics. `go test` runs the seeds; `go test -fuzz FuzzOpener`
// explores.
func FuzzOpener(f *testing.F) {
	k := SessionKey{7}
	n0 := [NonceLen]byte{1}
	good, _ := SealAll(NewRequestSealer(k, n0), nil, []byte("GET / HTTP/1.1\r\n\r\nbody"), 5)
	f.Add(good, uint8(3))
	f.Add([]byte{0x80, 0, 0, 0}, uint8(1))
	f.Add([]byte{}, uint8(0))
	f.Fuzz(func(t *testing.T, body []byte, step uint8) {
		out, err := openInSteps(NewRequestOpener(k, n0, DefaultMaxRecord), body, int(step)+1)
		if err == nil && !bytes.Equal(body, good) {
			t.Fatalf("a stream other than the sealed one opened: %x", body)
		}
		if err == nil && string(out) != "GET / HTTP/1.1\r\n\r\nbody" {
			t.Fatalf("wrong plaintext %q", out)
		}
	})
}

// FuzzInnerHeads: the head parsers never panic, and what they accept
// formats to a head that parses back to the same thing.
func FuzzInnerHeads(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 200\r\n\r\n"))
	f.Add([]byte("0 0 HTTP/1.1\r\n0:0\r\n\r\n"))
	f.Fuzz(func(t *testing.T, head []byte) {
		if h, err := ParseRequestHead(head, DefaultLimits()); err == nil {
			again, err := ParseRequestHead(h.Format(nil), DefaultLimits())
			if err != nil || !reflect.DeepEqual(again, h) {
				t.Fatalf("request head %q does not survive format/parse: %v", head, err)
			}
		}
		if h, err := ParseResponseHead(head, DefaultLimits()); err == nil {
			again, err := ParseResponseHead(h.Format(nil), DefaultLimits())
			if err != nil || !reflect.DeepEqual(again, h) {
				t.Fatalf("response head %q does not survive format/parse: %v", head, err)
			}
		}
		_, _, _ = DecodeResponse(head, DefaultLimits())
	})
}

// FuzzCompactResponseOpener: a profile-2 response body (r || stream)
// either fails or is exactly the sealed one, whatever the input split.
func FuzzCompactResponseOpener(f *testing.F) {
	k := SessionKey{9}
	reqN0 := [NonceLen]byte{0, 0, 0, 0, 1}
	r := [ResponseRandomLen]byte{2}
	good, _ := SealAll(NewCompactResponseSealer(k, reqN0, r), append([]byte(nil), r[:]...), []byte("HTTP/1.1 200 OK\r\n\r\nok"), 4)
	f.Add(good, uint8(2))
	f.Add(good[:16], uint8(0))
	f.Add([]byte{}, uint8(0))
	f.Fuzz(func(t *testing.T, body []byte, step uint8) {
		out, err := openInSteps(NewCompactResponseOpener(k, reqN0, DefaultMaxRecord), body, int(step)+1)
		if err == nil && (!bytes.Equal(body, good) || string(out) != "HTTP/1.1 200 OK\r\n\r\nok") {
			t.Fatalf("a body other than the sealed one opened: %x", body)
		}
	})
}

// openInSteps feeds body to o in pieces of step bytes, draining events
// after each, and returns the plaintext and the first error (Finish's
// included).
func openInSteps(o *Opener, body []byte, step int) ([]byte, error) {
	var out []byte
	for off := 0; off < len(body); off += step {
		if err := o.Receive(body[off:min(off+step, len(body))]); err != nil {
			return out, err
		}
		for {
			ev, ok, err := o.NextEvent()
			if err != nil {
				return out, err
			}
			if !ok || ev.End {
				break
			}
			out = append(out, ev.Data...)
		}
	}
	return out, o.Finish()
}

// hybridSeeds are the suite-2 texts of a vector case: a certificate
// text, a list holding both suites and a key text, and the key text.
func hybridSeeds(f *testing.F) (cert, list, kem string) {
	for _, v := range loadVectorsFrom(f, hybridVectorDir()) {
		switch v.Name {
		case "hybrid-cert-verify-ok":
			cert, kem = str(v.Input, "text"), str(v.Input, "kem_text")
		case "hybrid-cert-list-both-suites":
			list = str(v.Input, "body")
		}
	}
	if cert == "" || list == "" || kem == "" {
		f.Fatal("the hybrid seed vectors are missing")
	}
	return cert, list, kem
}

// FuzzHybridCertText: a certificate text of either suite never panics the
// reader, and what it accepts encodes back to the same text.
func FuzzHybridCertText(f *testing.F) {
	cert, _, _ := hybridSeeds(f)
	f.Add(cert)
	f.Add("hc1 AQI")
	f.Add("hc1 ")
	f.Fuzz(func(t *testing.T, text string) {
		c, err := ParseAnyCertText(text)
		if err != nil {
			return
		}
		again := ""
		if c.Hybrid != nil {
			again = c.Hybrid.Text()
			if h, err := ParseHybridCertText(again); err != nil || *h != *c.Hybrid {
				t.Fatalf("suite-2 certificate does not parse back: %v", err)
			}
		} else {
			again = c.Classical.Text()
		}
		if again != text || c.Suite() != int(mustB64(t, text[4:])[1]) {
			t.Fatalf("%q read as suite %d, writes %q", text, c.Suite(), again)
		}
	})
}

// FuzzKemText: a key text either fails or is exactly the text of a key
// that passed the modulus check, whose hash is SHA3-256 of its bytes.
func FuzzKemText(f *testing.F) {
	_, _, kem := hybridSeeds(f)
	f.Add(kem)
	f.Add(kem[:100])
	f.Add("hck1 ")
	f.Fuzz(func(t *testing.T, text string) {
		k, err := ParseKemText(text)
		if err != nil {
			return
		}
		if k.Text() != text || k.Hash() != KemHash(sha3.Sum256(k.Bytes())) || len(text) != KemTextLen {
			t.Fatalf("key text %q does not round-trip", text)
		}
	})
}

// FuzzHybridCertList: a list never panics the reader, and what it accepts
// formats (suite-2 certificates and key texts) to a list that reads back
// the same.
func FuzzHybridCertList(f *testing.F) {
	cert, list, kem := hybridSeeds(f)
	f.Add([]byte(list))
	f.Add([]byte(cert + "\r\n\r\n" + kem + "\n"))
	f.Add([]byte("\n\r\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		l, err := ParseHybridCertList(body)
		if err != nil {
			return
		}
		again, err := ParseHybridCertList([]byte(FormatHybridCertList(l.Hybrid(), l.Kems)))
		if err != nil || len(again.Hybrid()) != len(l.Hybrid()) {
			t.Fatalf("list does not read back: %v", err)
		}
		for i, c := range again.Hybrid() {
			if *c != *l.Hybrid()[i] {
				t.Fatalf("certificate %d differs", i)
			}
		}
		for _, k := range l.Kems {
			if again.KemFor(&HybridCert{KemHash: k.Hash()}) == nil {
				t.Fatal("a key text was lost")
			}
		}
	})
}

// FuzzHybridAAAA: any set of addresses either fails or reassembles a
// certificate whose own eleven addresses are the input in some order.
func FuzzHybridAAAA(f *testing.F) {
	cert, _, _ := hybridSeeds(f)
	c, err := ParseHybridCertText(cert)
	if err != nil {
		f.Fatal(err)
	}
	var seed []byte
	for _, a := range FormatHybridAAAA(c) {
		seed = append(seed, a[:]...)
	}
	f.Add(seed)
	f.Add(seed[:16*9])
	f.Fuzz(func(t *testing.T, raw []byte) {
		var addrs [][16]byte
		for i := 0; i+16 <= len(raw); i += 16 {
			addrs = append(addrs, [16]byte(raw[i:i+16]))
		}
		c, err := ParseHybridAAAA(addrs)
		if err != nil {
			return
		}
		own := map[[16]byte]bool{}
		for _, a := range FormatHybridAAAA(c) {
			own[a] = true
		}
		for _, a := range addrs {
			if !own[a] {
				t.Fatalf("address %x is not one of the certificate's", a)
			}
		}
	})
}

func mustB64(t *testing.T, s string) []byte {
	b, err := DecodeB64u(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
