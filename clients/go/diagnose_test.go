package httpcrypt

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func wantDiagnosis(t *testing.T, err error, code, text string) {
	t.Helper()
	wantCode(t, err, code)
	if !strings.HasSuffix(err.Error(), text) {
		t.Fatalf("want the diagnosis %q, got %q", text, err.Error())
	}
}

// A plain web server answering 501 to OPTIONS is not an HTTPCrypt server.
func TestDiagnosisNotHTTPCrypt(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotImplemented)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	c, _ := newClient(Options{Mount: "/hc"})
	_, _, err := fetch(t, c, http.MethodGet, srv.URL+"/index.html", nil)
	wantDiagnosis(t, err, CodeNotHTTPCrypt, host+" is not an HTTPCrypt server (OPTIONS /hc/ answered 501)")
}

// `httpcrypt serve` asked under another mount answers 404: no endpoint.
func TestLiveDiagnosisNoEndpoint(t *testing.T) {
	s := startServe(t, "", "")
	c, _ := newClient(Options{Mount: "/elsewhere"})
	_, _, err := fetch(t, c, http.MethodGet, "http://"+s.addr+"/index.html", nil)
	wantDiagnosis(t, err, CodeNoEndpoint, "no HTTPCrypt endpoint at /elsewhere on "+s.addr+": wrong mount?")
}

// Nothing listens: the host and port are named with the reason.
func TestDiagnosisConnectFailed(t *testing.T) {
	addr := freePort(t)
	c, _ := newClient(Options{Mount: "/hc"})
	_, _, err := fetch(t, c, http.MethodGet, "http://"+addr+"/", nil)
	wantDiagnosis(t, err, CodeConnectFailed, "cannot connect to "+addr+": connection refused")
}

// A server that accepts and never answers: the call's deadline is named
// with the phase it ran out in.
func TestDiagnosisTimeout(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	c, _ := newClient(Options{Mount: "/hc"})
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+l.Addr().String()+"/", nil)
	begin := time.Now()
	_, err = c.Do(req)
	if time.Since(begin) > 5*time.Second {
		t.Fatalf("the deadline was not kept: %v", time.Since(begin))
	}
	wantDiagnosis(t, err, CodeTimeout, "timed out after 0.5 s while waiting for the answer")
}

// A pinned identity the server's certificates do not verify under.
func TestLiveDiagnosisBadSignature(t *testing.T) {
	s := startServe(t, "", "")
	other := keygen(t, t.TempDir()+"/other")
	c, _ := newClient(Options{Mount: "/hc", Identity: other})
	_, _, err := fetch(t, c, http.MethodGet, "http://"+s.addr+"/index.html", nil)
	wantDiagnosis(t, err, CodeBadSignature, BadSignatureDetail)
}

// A server that refuses an oversized body at once (413) and closes: the
// client reports the server's answer, not the reset of its upload.
func TestLiveEarlyRefusalOfALargeBody(t *testing.T) {
	s := startServe(t, "", "", "--max-body", "4096")
	c, _ := newClient(Options{Mount: "/hc"})
	for i := 0; i < 3; i++ {
		_, _, err := fetch(t, c, http.MethodPost, "http://"+s.addr+"/upload", bytes.NewReader(make([]byte, 8<<20)))
		wantCode(t, err, CodeBodyTooLarge)
		var he *Error
		if !errors.As(err, &he) || he.Status != http.StatusRequestEntityTooLarge || he.Authenticated {
			t.Fatalf("want the outer 413, got %+v", he)
		}
	}
}
