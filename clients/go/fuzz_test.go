package httpcrypt

import (
	"bytes"
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
