package httpcrypt

import (
	"io"
	"net/http"
	"testing"
)

// Erratum E2: the answer to HEAD and a 304 carry the representation's
// Content-Length with an empty body; any body there is a mismatch, and
// the same length with an empty body answering a GET is one too.
func TestDecodeResponseHeadAnd304(t *testing.T) {
	headLen := "HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\n\r\n"
	cases := []struct {
		name, method, msg, want string
	}{
		{"head-length", "HEAD", headLen, ""},
		{"head-length-to-get", "GET", headLen, CodeContentLengthMismatch},
		{"304-length", "GET", "HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n", ""},
		{"304-body", "GET", "HTTP/1.1 304 Not Modified\r\n\r\nx", CodeContentLengthMismatch},
		{"head-body", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", CodeContentLengthMismatch},
		{"head-body-no-length", "HEAD", "HTTP/1.1 200 OK\r\n\r\nhello", CodeContentLengthMismatch},
		{"head-no-length", "HEAD", "HTTP/1.1 200 OK\r\n\r\n", ""},
		{"head-bad-length", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n", CodeContentLengthMismatch},
		{"head-two-lengths", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", CodeContentLengthMismatch},
	}
	for _, c := range cases {
		h, body, err := DecodeResponseTo(c.method, []byte(c.msg), DefaultLimits())
		if c.want != "" {
			if CodeOf(err) != c.want {
				t.Errorf("%s: want %s, got %v", c.name, c.want, err)
			}
			continue
		}
		if err != nil || len(body) != 0 {
			t.Errorf("%s: want an empty body, got %q, %v", c.name, body, err)
			continue
		}
		if h.Status != 200 && h.Status != 304 {
			t.Errorf("%s: status %d", c.name, h.Status)
		}
	}
}

// The Transport reads no body for a HEAD answer that declares the length
// a GET would get, and reports that length; the same answer to a GET is
// a content_length_mismatch.
func TestTransportHeadAnswerWithLength(t *testing.T) {
	m := newMemServer(t, 1_800_000_000)
	m.rawInner = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1048576\r\n\r\n"
	c := memClient(m, Options{})
	req, _ := http.NewRequest(http.MethodHead, "http://example.test/big", nil)
	rsp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rsp.Body)
	rsp.Body.Close()
	if err != nil || len(b) != 0 || rsp.ContentLength != 1048576 {
		t.Fatalf("HEAD: body %q, length %d, err %v", b, rsp.ContentLength, err)
	}
	_, err = memFetch(t, c, http.MethodGet, nil, -1)
	wantCode(t, err, CodeContentLengthMismatch)

	m.rawInner = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
	req, _ = http.NewRequest(http.MethodHead, "http://example.test/big", nil)
	rsp, err = c.Do(req)
	if err == nil {
		_, err = io.ReadAll(rsp.Body)
		rsp.Body.Close()
	}
	wantCode(t, err, CodeContentLengthMismatch)
}

// A sealed 413 is the server's verdict on a record of ours: record_too_large
// (spec §4.4); the outer 413 is body_too_large.
func TestTransportInner413IsRecordTooLarge(t *testing.T) {
	m := newMemServer(t, 1_800_000_000)
	m.rawInner = "HTTP/1.1 413 Too Large\r\nContent-Type: application/problem+json\r\nContent-Length: 47\r\n\r\n" +
		`{"type":"urn:httpcrypt:too-large","status":413}`
	_, err := memFetch(t, memClient(m, Options{}), http.MethodGet, nil, -1)
	wantCode(t, err, CodeRecordTooLarge)
}
