package httpcrypt

import (
	"crypto/ed25519"
	"strconv"
	"testing"
	"time"

	"golang.org/x/crypto/chacha20poly1305"
)

// BenchmarkFirstRequest: what a client pays for a first request and its
// answer: a key pair and the X25519 agreement, sealing a small inner
// request, opening and parsing a small response.
func BenchmarkFirstRequest(b *testing.B) {
	id := ed25519.NewKeyFromSeed(make([]byte, 32))
	server, _ := NewKexSecret(make([]byte, 32))
	cert := SignCert(id, 1, 0, 1<<31, server.Public())
	clientSecret := make([]byte, 32)
	clientSecret[0] = 7
	n0 := [NonceLen]byte{1}
	head := RequestHead{Method: "GET", Target: "/index.html", Fields: []Field{{"Host", "example.com"}, {"Date", FormatDate(1700000000)}}}
	// The response is the same every round (same key, same nonce), so it is
	// sealed once; the client's work is redone every round.
	c0, _ := NewKexSecret(clientSecret)
	k0, _ := server.SessionKey(c0.Public())
	rn0 := [NonceLen]byte{2}
	rsp := append([]byte(nil), rn0[:]...)
	rsp, _ = SealAll(NewResponseSealer(k0, n0, rn0), rsp, []byte("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nDate: Tue, 14 Nov 2023 22:13:20 GMT\r\n\r\nhello"), 16384)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, _ := NewKexSecret(clientSecret)
		k, err := c.SessionKey(cert.KexPublic[:])
		if err != nil {
			b.Fatal(err)
		}
		if _, err := FormatCookie(cert.KID(), c.Public(), "", ""); err != nil {
			b.Fatal(err)
		}
		if _, err := SealAll(NewRequestSealer(k, n0), nil, head.Format(nil), 16384); err != nil {
			b.Fatal(err)
		}
		plain, err := OpenAll(NewResponseOpener(k, n0, DefaultMaxRecord), rsp)
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := DecodeResponse(plain, DefaultLimits()); err != nil {
			b.Fatal(err)
		}
	}
}

var benchSizes = []int{16 << 10, 1 << 20}

func sizeName(n int) string {
	if n >= 1<<20 {
		return strconv.Itoa(n>>20) + "MiB"
	}
	return strconv.Itoa(n>>10) + "KiB"
}

// BenchmarkSeal: the sealed stream (16 KiB records) against raw
// XChaCha20-Poly1305 (chacha20poly1305.NewX) over the same 16 KiB chunks.
func BenchmarkSeal(b *testing.B) {
	k := SessionKey{1}
	n0 := [NonceLen]byte{3}
	for _, size := range benchSizes {
		msg := make([]byte, size)
		b.Run("stream/"+sizeName(size), func(b *testing.B) {
			b.SetBytes(int64(size))
			out := make([]byte, 0, size+(size/DefaultRecordSize+1)*RecordOverhead+TagLen)
			for i := 0; i < b.N; i++ {
				var err error
				if out, err = SealAll(NewRequestSealer(k, n0), out[:0], msg, DefaultRecordSize); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("xchacha/"+sizeName(size), func(b *testing.B) {
			b.SetBytes(int64(size))
			aead, _ := chacha20poly1305.NewX(k[:])
			out := make([]byte, 0, DefaultRecordSize+TagLen)
			for i := 0; i < b.N; i++ {
				for off, r := 0, uint64(0); off < size; off, r = off+DefaultRecordSize, r+1 {
					n := nonceAdd(&n0, r)
					out = aead.Seal(out[:0], n[:], msg[off:min(off+DefaultRecordSize, size)], nil)
				}
			}
		})
	}
}

// BenchmarkOpen: opening the sealed stream against raw XChaCha20-Poly1305
// Open over the same chunks.
func BenchmarkOpen(b *testing.B) {
	k := SessionKey{1}
	n0 := [NonceLen]byte{3}
	for _, size := range benchSizes {
		msg := make([]byte, size)
		stream, _ := SealAll(NewRequestSealer(k, n0), nil, msg, DefaultRecordSize)
		b.Run("stream/"+sizeName(size), func(b *testing.B) {
			b.SetBytes(int64(size))
			for i := 0; i < b.N; i++ {
				o := NewRequestOpener(k, n0, DefaultMaxRecord)
				if err := o.Receive(stream); err != nil {
					b.Fatal(err)
				}
				for {
					ev, ok, err := o.NextEvent()
					if err != nil {
						b.Fatal(err)
					}
					if !ok || ev.End {
						break
					}
				}
				if err := o.Finish(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("xchacha/"+sizeName(size), func(b *testing.B) {
			b.SetBytes(int64(size))
			aead, _ := chacha20poly1305.NewX(k[:])
			var sealed [][]byte
			for off, r := 0, uint64(0); off < size; off, r = off+DefaultRecordSize, r+1 {
				n := nonceAdd(&n0, r)
				sealed = append(sealed, aead.Seal(nil, n[:], msg[off:min(off+DefaultRecordSize, size)], nil))
			}
			out := make([]byte, 0, DefaultRecordSize)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for r, c := range sealed {
					n := nonceAdd(&n0, uint64(r))
					var err error
					if out, err = aead.Open(out[:0], n[:], c, nil); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkX25519 is one key agreement, the unit of the first request's cost.
func BenchmarkX25519(b *testing.B) {
	k := GenerateKexSecret()
	peer := GenerateKexSecret().Public()
	for i := 0; i < b.N; i++ {
		if _, err := k.Shared(peer); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPair runs the sealed stream and raw XChaCha20-Poly1305 over the
// same bytes alternately within each iteration, so both see the same
// machine load, and reports each one's time and the overhead. (The
// separate Seal/Open benchmarks run minutes apart on a shared machine.)
func BenchmarkPair(b *testing.B) {
	k := SessionKey{1}
	n0 := [NonceLen]byte{3}
	aead, _ := chacha20poly1305.NewX(k[:])
	for _, size := range benchSizes {
		msg := make([]byte, size)
		rs := DefaultRecordSize
		out := make([]byte, 0, size+(size/rs+1)*RecordOverhead+TagLen)
		raw := make([]byte, 0, rs+TagLen)
		stream, _ := SealAll(NewRequestSealer(k, n0), nil, msg, rs)
		var sealedChunks [][]byte
		for off, r := 0, uint64(0); off < size; off, r = off+rs, r+1 {
			n := nonceAdd(&n0, r)
			sealedChunks = append(sealedChunks, aead.Seal(nil, n[:], msg[off:min(off+rs, size)], nil))
		}
		b.Run("seal/"+sizeName(size), func(b *testing.B) {
			b.SetBytes(int64(size))
			var ts, tr time.Duration
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				out, _ = SealAll(NewRequestSealer(k, n0), out[:0], msg, rs)
				t1 := time.Now()
				for off, r := 0, uint64(0); off < size; off, r = off+rs, r+1 {
					n := nonceAdd(&n0, r)
					raw = aead.Seal(raw[:0], n[:], msg[off:min(off+rs, size)], nil)
				}
				ts, tr = ts+t1.Sub(t0), tr+time.Since(t1)
			}
			reportPair(b, ts, tr)
		})
		b.Run("open/"+sizeName(size), func(b *testing.B) {
			b.SetBytes(int64(size))
			var ts, tr time.Duration
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				openEvents(b, NewRequestOpener(k, n0, DefaultMaxRecord), stream)
				t1 := time.Now()
				for r, c := range sealedChunks {
					n := nonceAdd(&n0, uint64(r))
					var err error
					if raw, err = aead.Open(raw[:0], n[:], c, nil); err != nil {
						b.Fatal(err)
					}
				}
				ts, tr = ts+t1.Sub(t0), tr+time.Since(t1)
			}
			reportPair(b, ts, tr)
		})
	}
}

// openEvents opens a stream, consuming each record's plaintext in place.
func openEvents(b *testing.B, o *Opener, stream []byte) {
	if err := o.Receive(stream); err != nil {
		b.Fatal(err)
	}
	for {
		ev, ok, err := o.NextEvent()
		if err != nil {
			b.Fatal(err)
		}
		if !ok || ev.End {
			break
		}
	}
	if err := o.Finish(); err != nil {
		b.Fatal(err)
	}
}

func reportPair(b *testing.B, stream, raw time.Duration) {
	b.ReportMetric(float64(stream.Nanoseconds())/float64(b.N), "stream-ns/op")
	b.ReportMetric(float64(raw.Nanoseconds())/float64(b.N), "xchacha-ns/op")
	b.ReportMetric((float64(stream)/float64(raw)-1)*100, "overhead-%")
}
