package httpcrypt

// End to end inside Go: the Transport with Options.PQ against the
// test-only server side (serverside_test.go, behind memServer) over
// httptest, with simulated time: hybrid requests in both outer forms, a
// ticket of a hybrid session, the pin refusing a downgrade, require against
// a v1-only server, a server that turns to suite 2 only, a kex rotation
// under a cached ML-KEM key, authenticated mode and a key text that does
// not match.

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

const hybridStart = 1_700_000_000

// withHybrid gives m's server a suite-2 key (its kex key, a fixed ML-KEM
// key); pqOnly refuses v1 fresh-key requests.
func withHybrid(t *testing.T, m *memServer, pqOnly bool) *memServer {
	t.Helper()
	kem, err := NewKemSecret(bytes.Repeat([]byte{7}, KemSeedLen))
	if err != nil {
		t.Fatal(err)
	}
	c := m.srv.cert
	m.srv.kem, m.srv.pqOnly = kem, pqOnly
	m.srv.hcert = SignHybridCert(m.srv.identity, CertVersion1, c.Serial, c.NotBefore, c.NotAfter, m.srv.kex.Public(), kem.Public().Hash())
	return m
}

// hybridOptions answers OPTIONS {mount}/pq: the suite-2 certificate and
// its key text, or 404 without suite 2.
func (m *memServer) hybridOptions() *http.Response {
	m.pqOptions.Add(1)
	if m.srv.hcert == nil || m.hidePQ.Load() {
		return plainResponse(404, "text/plain", "not found")
	}
	kems := m.pqKems
	if kems == nil {
		kems = []*KemPublic{m.srv.kem.Public()}
	}
	return plainResponse(200, contentTypeCerts, FormatHybridCertList([]*HybridCert{m.srv.hcert}, kems), "Cache-Control", "max-age=600")
}

// unknownKey is the unknown-key problem: the v1 certificates in certs
// (none when v1 is refused), the suite-2 ones in hybrid_certs.
func (m *memServer) unknownKey() string {
	certs, hybrid := "", ""
	if !m.srv.pqOnly {
		certs = fmt.Sprintf("%q", m.srv.cert.Text())
	}
	if m.srv.hcert != nil && !m.hidePQ.Load() {
		hybrid = fmt.Sprintf(`,"hybrid_certs":[%q]`, m.srv.hcert.Text())
	}
	return fmt.Sprintf(`{"type":%q,"title":"unknown key","status":400,"certs":[%s]%s}`, ProblemUnknownKey, certs, hybrid)
}

// serveMem puts m behind a real HTTP server on loopback.
func serveMem(t *testing.T, m *memServer) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rsp, err := m.RoundTrip(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer rsp.Body.Close()
		for k, v := range rsp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(rsp.StatusCode)
		_, _ = io.Copy(w, rsp.Body)
	}))
	t.Cleanup(srv.Close)
	return "http://" + srv.Listener.Addr().String()
}

// hybridClient is a Transport on m's simulated clock, recording exchanges.
func hybridClient(m *memServer, opts Options) (*Transport, *recorder) {
	rec := &recorder{}
	opts.Now, opts.Mount, opts.Observe = m.now, "/hc", rec.observe
	return NewTransport(opts), rec
}

// hybridFetch sends one request and returns the server's summary line.
func hybridFetch(t *testing.T, tr *Transport, method, url string, body []byte) (string, error) {
	t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	_, b, err := fetch(t, &http.Client{Transport: tr}, method, url, r)
	return string(b), err
}

func wantExchange(t *testing.T, what string, x Exchange, suite int, credential, outer string, attempts int) {
	t.Helper()
	if x.Suite != suite || x.Credential != credential || x.OuterMethod != outer || x.Attempts != attempts {
		t.Fatalf("%s: %+v, want suite %d, %s credential, outer %s, %d attempt(s)", what, x, suite, credential, outer, attempts)
	}
}

func TestHybridEndToEnd(t *testing.T) {
	m := withHybrid(t, newMemServer(t, hybridStart), false)
	base := serveMem(t, m)
	tr, rec := hybridClient(m, Options{PQ: PQPrefer, NoTickets: true})

	// A small GET travels in the GET form: the query is b64u(ct_M || stream).
	got, err := hybridFetch(t, tr, "GET", base+"/path?q=1", nil)
	if err != nil || !strings.HasPrefix(got, "GET /path?q=1 0 ") {
		t.Fatalf("hybrid GET: %q %v", got, err)
	}
	wantExchange(t, "hybrid GET", rec.last(), 2, "key", "GET", 1)
	query := rec.last().OuterURL[strings.Index(rec.last().OuterURL, "?")+1:]
	if n := base64.RawURLEncoding.DecodedLen(len(query)); n < KemCiphertextLen+RecordOverhead || !m.last().hybrid {
		t.Fatalf("the GET query holds %d bytes; hybrid on the server: %v", n, m.last().hybrid)
	}

	// A 10 kB POST: the outer body is ct_M, then the sealed stream, its
	// length announced in advance.
	data := bytes.Repeat([]byte("pq"), 5000)
	got, err = hybridFetch(t, tr, "POST", base+"/upload", data)
	if want := fmt.Sprintf("POST /upload %d %x", len(data), sha256.Sum256(data)); err != nil || got != want {
		t.Fatalf("hybrid POST: %q %v", got, err)
	}
	wantExchange(t, "hybrid POST", rec.last(), 2, "key", "POST", 1)
	if m.lastOuterLen.Load() != m.lastBodyLen.Load() || m.lastBodyLen.Load() < int64(KemCiphertextLen+len(data)) {
		t.Fatalf("outer length announced %d, sent %d", m.lastOuterLen.Load(), m.lastBodyLen.Load())
	}
	if n, all := m.pqOptions.Load(), m.options.Load(); n != 1 || all != 1 {
		t.Fatalf("OPTIONS sent %d times (%d to /pq), want once to /pq", all, n)
	}

	// With tickets: the ticket of a hybrid session carries the hybrid key
	// forward, sends no ciphertext, and the server opens it as suite 2.
	m.issueTickets = true
	tr2, rec2 := hybridClient(m, Options{PQ: PQRequire})
	for i, want := range []string{"key", "ticket", "ticket"} {
		if got, err := hybridFetch(t, tr2, "GET", base+"/t", nil); err != nil || !strings.HasPrefix(got, "GET /t 0") {
			t.Fatalf("request %d: %q %v", i+1, got, err)
		}
		wantExchange(t, fmt.Sprintf("request %d", i+1), rec2.last(), 2, want, "GET", 1)
		if !m.last().hybrid {
			t.Fatalf("request %d: the server did not take it as suite 2", i+1)
		}
	}
	if u := rec2.last().OuterURL; len(u) > base64.RawURLEncoding.EncodedLen(KemCiphertextLen) {
		t.Fatalf("a ticket request carried a ciphertext: %d characters", len(u))
	}
}

func TestHybridPinRefusesDowngrade(t *testing.T) {
	m := withHybrid(t, newMemServer(t, hybridStart), false)
	m.issueTickets = true
	base := serveMem(t, m)
	tr, rec := hybridClient(m, Options{PQ: PQPrefer})
	if _, err := hybridFetch(t, tr, "GET", base+"/a", nil); err != nil {
		t.Fatal(err)
	}
	wantExchange(t, "first contact", rec.last(), 2, "key", "GET", 1)

	// Suite 2 disappears (an attacker answering 404 to OPTIONS {mount}/pq,
	// or a server rolled back): once the cached keys run out, the pinned
	// client refuses instead of falling back, and sends nothing.
	m.hidePQ.Store(true)
	m.clock.Add(601)
	tr.ForgetKeys(strings.TrimPrefix(base, "http://"))
	outer := m.outer.Load()
	_, err := hybridFetch(t, tr, "GET", base+"/b", nil)
	wantCode(t, err, CodeHybridDowngrade)
	if !strings.Contains(err.Error(), "pinned until") || !strings.Contains(err.Error(), "answered 404") {
		t.Fatalf("diagnosis: %v", err)
	}
	if m.outer.Load() != outer || m.options.Load() != m.pqOptions.Load() {
		t.Fatalf("a pinned client sent a classical request or asked for v1 keys")
	}
	// An unknown-key answer naming only v1 certificates does not unpin it.
	m.hidePQ.Store(false)
	if _, err := hybridFetch(t, tr, "GET", base+"/c", nil); err != nil {
		t.Fatalf("suite 2 back: %v", err)
	}
	m.srv.hcert = nil
	_, err = hybridFetch(t, tr, "GET", base+"/d", nil)
	wantCode(t, err, CodeHybridDowngrade)

	// A client that never saw suite 2 there uses v1, as against any v1 server.
	fresh, rec2 := hybridClient(m, Options{PQ: PQPrefer})
	if _, err := hybridFetch(t, fresh, "GET", base+"/e", nil); err != nil {
		t.Fatal(err)
	}
	wantExchange(t, "unpinned client", rec2.last(), 1, "key", "GET", 1)
}

func TestHybridAgainstV1Server(t *testing.T) {
	m := newMemServer(t, hybridStart)
	base := serveMem(t, m)

	// require: no suite 2 is hybrid_downgrade, before any request is sent.
	tr, _ := hybridClient(m, Options{PQ: PQRequire})
	_, err := hybridFetch(t, tr, "GET", base+"/a", nil)
	wantCode(t, err, CodeHybridDowngrade)
	if !strings.Contains(err.Error(), "requires") || m.outer.Load() != 0 || m.options.Load() != 1 {
		t.Fatalf("require: %v; %d requests, %d OPTIONS", err, m.outer.Load(), m.options.Load())
	}

	// prefer: v1, with one OPTIONS {mount}/pq per v1 discovery.
	tr2, rec := hybridClient(m, Options{PQ: PQPrefer, NoTickets: true})
	for i := 0; i < 2; i++ {
		if _, err := hybridFetch(t, tr2, "GET", base+"/b", nil); err != nil {
			t.Fatal(err)
		}
		wantExchange(t, "prefer against v1", rec.last(), 1, "key", "GET", 1)
	}
	if n, pq := m.options.Load(), m.pqOptions.Load(); n != 3 || pq != 2 {
		t.Fatalf("OPTIONS %d times, %d to /pq; want one more of each", n, pq)
	}
	m.clock.Add(601)
	if _, err := hybridFetch(t, tr2, "GET", base+"/c", nil); err != nil {
		t.Fatal(err)
	}
	if n, pq := m.options.Load(), m.pqOptions.Load(); n != 5 || pq != 3 {
		t.Fatalf("after max-age: OPTIONS %d times, %d to /pq", n, pq)
	}
}

func TestHybridServerTurnsHybridOnly(t *testing.T) {
	m := newMemServer(t, hybridStart)
	base := serveMem(t, m)
	tr, rec := hybridClient(m, Options{PQ: PQPrefer, NoTickets: true})
	if _, err := hybridFetch(t, tr, "GET", base+"/a", nil); err != nil {
		t.Fatal(err)
	}
	wantExchange(t, "v1 server", rec.last(), 1, "key", "GET", 1)
	// The server now takes suite 2 only: its hybrid-required answer sends
	// the prefer client to OPTIONS {mount}/pq, and the retry is hybrid.
	withHybrid(t, m, true)
	if _, err := hybridFetch(t, tr, "GET", base+"/b", nil); err != nil {
		t.Fatal(err)
	}
	wantExchange(t, "after the switch", rec.last(), 2, "key", "GET", 2)
	// A v1 client is refused with the server's problem.
	off, _ := hybridClient(m, Options{})
	_, err := hybridFetch(t, off, "GET", base+"/c", nil)
	wantCode(t, err, CodeHybridRequired)
}

func TestHybridRotationUnderACachedKemKey(t *testing.T) {
	m := withHybrid(t, newMemServer(t, hybridStart), false)
	base := serveMem(t, m)
	tr, rec := hybridClient(m, Options{PQ: PQRequire, NoTickets: true})
	if _, err := hybridFetch(t, tr, "GET", base+"/a", nil); err != nil {
		t.Fatal(err)
	}
	// A new kex key with the same ML-KEM key: the unknown-key problem's
	// hybrid_certs name a cached kem_hash, so the retry needs no OPTIONS.
	kex := GenerateKexSecret()
	old := m.srv.hcert
	m.srv.kex = kex
	m.srv.cert = SignCert(m.srv.identity, 2, old.NotBefore, old.NotAfter, kex.Public())
	m.srv.hcert = SignHybridCert(m.srv.identity, CertVersion1, 2, old.NotBefore, old.NotAfter, kex.Public(), old.KemHash)
	if _, err := hybridFetch(t, tr, "GET", base+"/b", nil); err != nil {
		t.Fatal(err)
	}
	wantExchange(t, "after rotation", rec.last(), 2, "key", "GET", 2)
	if m.pqOptions.Load() != 1 {
		t.Fatalf("OPTIONS {mount}/pq sent %d times", m.pqOptions.Load())
	}
	// A new ML-KEM key as well: its hash is unknown, so the retry fetches
	// the key text from OPTIONS {mount}/pq once.
	kem, err := NewKemSecret(bytes.Repeat([]byte{9}, KemSeedLen))
	if err != nil {
		t.Fatal(err)
	}
	kex = GenerateKexSecret()
	m.srv.kex, m.srv.kem = kex, kem
	m.srv.cert = SignCert(m.srv.identity, 3, old.NotBefore, old.NotAfter, kex.Public())
	m.srv.hcert = SignHybridCert(m.srv.identity, CertVersion1, 3, old.NotBefore, old.NotAfter, kex.Public(), kem.Public().Hash())
	if _, err := hybridFetch(t, tr, "GET", base+"/c", nil); err != nil {
		t.Fatal(err)
	}
	wantExchange(t, "after a new ML-KEM key", rec.last(), 2, "key", "GET", 2)
	if m.pqOptions.Load() != 2 {
		t.Fatalf("OPTIONS {mount}/pq sent %d times, want 2", m.pqOptions.Load())
	}
}

func TestHybridAuthenticatedAndKemMismatch(t *testing.T) {
	m := withHybrid(t, newMemServer(t, hybridStart), false)
	base := serveMem(t, m)
	id := EncodeB64u(m.srv.identity.Public().(ed25519.PublicKey))
	tr, rec := hybridClient(m, Options{PQ: PQRequire, Identity: id})
	if _, err := hybridFetch(t, tr, "GET", base+"/a", nil); err != nil {
		t.Fatal(err)
	}
	wantExchange(t, "authenticated", rec.last(), 2, "key", "GET", 1)

	// A wrong identity: the suite-2 certificate fails, and nothing falls
	// back to v1.
	other := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, 32)).Public().(ed25519.PublicKey)
	wrong, _ := hybridClient(m, Options{PQ: PQPrefer, Identity: EncodeB64u(other)})
	outer := m.outer.Load()
	_, err := hybridFetch(t, wrong, "GET", base+"/b", nil)
	wantCode(t, err, CodeBadSignature)
	if m.outer.Load() != outer {
		t.Fatal("a request went out under an unverified key")
	}

	otherKem, err := NewKemSecret(bytes.Repeat([]byte{8}, KemSeedLen))
	if err != nil {
		t.Fatal(err)
	}
	m.pqKems = []*KemPublic{otherKem.Public()}
	mm, _ := hybridClient(m, Options{PQ: PQPrefer})
	_, err = hybridFetch(t, mm, "GET", base+"/c", nil)
	wantCode(t, err, CodeKemMismatch)
}

func TestHybridDoesNotSpendClassicalTickets(t *testing.T) {
	m := newMemServer(t, hybridStart)
	m.issueTickets = true
	base := serveMem(t, m)
	tr, rec := hybridClient(m, Options{PQ: PQPrefer})
	for _, want := range []string{"key", "ticket"} {
		if _, err := hybridFetch(t, tr, "GET", base+"/a", nil); err != nil {
			t.Fatal(err)
		}
		wantExchange(t, "v1 server", rec.last(), 1, want, "GET", 1)
	}
	// The server gains suite 2; at the next discovery the client moves to
	// it, and its ticket of a v1 session is not a hybrid credential.
	withHybrid(t, m, false)
	m.clock.Add(601)
	for _, want := range []string{"key", "ticket"} {
		if _, err := hybridFetch(t, tr, "GET", base+"/b", nil); err != nil {
			t.Fatal(err)
		}
		wantExchange(t, "suite 2 found", rec.last(), 2, want, "GET", 1)
	}
}

func TestHybridKeysFromDNS(t *testing.T) {
	m := withHybrid(t, newMemServer(t, hybridStart), false)
	base := serveMem(t, m)
	authority := strings.TrimPrefix(base, "http://")
	// The certificate from its eleven AAAA records, the key text from TXT
	// in character-strings of at most 255 bytes.
	cert, err := ParseHybridAAAA(FormatHybridAAAA(m.srv.hcert))
	if err != nil {
		t.Fatal(err)
	}
	text := []byte(m.srv.kem.Public().Text())
	var strs [][]byte
	for len(text) > 0 {
		n := min(255, len(text))
		strs, text = append(strs, text[:n]), text[n:]
	}
	kem, err := ParseKemTXT(strs)
	if err != nil || len(strs) != 7 {
		t.Fatalf("key text over %d strings: %v", len(strs), err)
	}
	tr, rec := hybridClient(m, Options{PQ: PQRequire, Identity: EncodeB64u(m.srv.identity.Public().(ed25519.PublicKey))})
	if err := tr.SetHybridKeys(authority, []HybridKey{{Cert: cert, Kem: kem}}); err != nil {
		t.Fatal(err)
	}
	if _, err := hybridFetch(t, tr, "GET", base+"/a", nil); err != nil {
		t.Fatal(err)
	}
	wantExchange(t, "keys from DNS", rec.last(), 2, "key", "GET", 1)
	if m.options.Load() != 0 {
		t.Fatalf("OPTIONS sent %d times", m.options.Load())
	}
	// A certificate under another identity, or with another key text, is refused.
	other := SignHybridCert(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, 32)), 1, cert.Serial, cert.NotBefore, cert.NotAfter, cert.KexPublic[:], cert.KemHash)
	wantCode(t, tr.SetHybridKeys(authority, []HybridKey{{Cert: other, Kem: kem}}), CodeBadSignature)
	otherKem, _ := NewKemSecret(bytes.Repeat([]byte{8}, KemSeedLen))
	wantCode(t, tr.SetHybridKeys("other.test", []HybridKey{{Cert: cert, Kem: otherKem.Public()}}), CodeKemMismatch)
}
