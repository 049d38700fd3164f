package httpcrypt

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// memServer is an in-memory HTTPCrypt server behind a RoundTripper: the
// Transport is tested against it without sockets and with simulated time.
type memServer struct {
	srv     *testServer
	clock   *atomic.Int64
	options atomic.Int32
	outer   atomic.Int32
	// problem, if set, is sent as a sealed inner problem document.
	problem string
	// lastOuterLen is the announced outer Content-Length of the last POST.
	lastOuterLen atomic.Int64
	lastBodyLen  atomic.Int64
	// rawInner, if set, is the inner response sealed instead of the
	// generated one.
	rawInner string
	// issueTickets adds a v1 Ticket field to every response but those to
	// a request presenting a short ticket.
	issueTickets bool
	// shortTickets answers a request that asks (`Ticket: short`) with a
	// short ticket instead, as the Rust server does (spec §7.3).
	shortTickets bool
	// tokenSecret, if set, demands a token as `httpcrypt serve
	// --require-token` does (spec §8.4): a side-effecting request without a
	// `Random` verifying under its key is answered 425 token-required, and
	// a request with `Client-Random` gets a `Random`, bound to the key k'
	// of a short ticket the same answer issues, else to the request's key.
	tokenSecret []byte
	// hidePQ answers 404 to OPTIONS {mount}/pq even with a suite-2 key
	// (a server without suite 2, or an attacker hiding it).
	hidePQ atomic.Bool
	// pqOptions counts OPTIONS {mount}/pq; pqKems, if set, are the key
	// texts its answer carries instead of the server's own.
	pqOptions atomic.Int32
	pqKems    []*KemPublic
	// seen records what the server took from the last request: profile,
	// outer target, bound host and inner head (guarded by mu).
	mu   sync.Mutex
	seen []memSeen
}

type memSeen struct {
	profile int
	target  string
	host    string
	n0      [NonceLen]byte
	head    *RequestHead
	stale   bool
	hybrid  bool
	// cookie is the outer Cookie field; short: it carried a short ticket;
	// asked: the inner head asked for one.
	cookie string
	short  bool
	asked  bool
}

// newCompactMemServer is newMemServer with a version-2 certificate: the
// key takes profile-2 requests, whose freshness is the time in n0.
func newCompactMemServer(t *testing.T, start int64) *memServer {
	m := newMemServer(t, start)
	c := m.srv.cert
	m.srv.cert = SignCertVersion(m.srv.identity, CertVersionCompact, c.Serial, c.NotBefore, c.NotAfter, c.KexPublic[:])
	return m
}

func (m *memServer) last() memSeen {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.seen) == 0 {
		return memSeen{}
	}
	return m.seen[len(m.seen)-1]
}

func newMemServer(t *testing.T, start int64) *memServer {
	kex, err := NewKexSecret(bytes.Repeat([]byte{5}, 32))
	if err != nil {
		t.Fatal(err)
	}
	id := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{6}, 32))
	cert := SignCert(id, 1, uint32(start-60), uint32(start+7200), kex.Public())
	m := &memServer{clock: &atomic.Int64{}}
	m.clock.Store(start)
	kid := cert.KID()
	m.srv = &testServer{kex: kex, cert: cert, identity: id, now: start, mount: "/hc", maxBody: 16 << 20,
		ticket: &TicketKey{TID: KID{9}, Key: [32]byte{9}}, ticketExpires: start + 7200, ticketKID: &kid}
	return m
}

func (m *memServer) now() time.Time { return time.Unix(m.clock.Load(), 0) }

func plainResponse(status int, ctype, body string, extra ...string) *http.Response {
	h := http.Header{}
	h.Set("Content-Type", ctype)
	for i := 0; i+1 < len(extra); i += 2 {
		h.Set(extra[i], extra[i+1])
	}
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body))}
}

func (m *memServer) RoundTrip(r *http.Request) (*http.Response, error) {
	m.srv.now = m.clock.Load()
	if r.Method == http.MethodOptions {
		m.options.Add(1)
		if r.URL.Path == m.srv.mount.HybridOptionsPath() {
			return m.hybridOptions(), nil
		}
		return plainResponse(200, contentTypeCerts, FormatCertList([]*KeyCert{m.srv.cert}), "Cache-Control", "max-age=600"), nil
	}
	m.outer.Add(1)
	var body []byte
	if r.Body != nil {
		var err error
		if body, err = io.ReadAll(r.Body); err != nil {
			return nil, err
		}
	}
	m.lastOuterLen.Store(r.ContentLength)
	m.lastBodyLen.Store(int64(len(body)))
	raw := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\nCookie: %s\r\n", r.Method, r.URL.RequestURI(), r.Host, r.Header.Get("Cookie"))
	if r.Method == http.MethodPost {
		raw += "Content-Length: " + strconv.Itoa(len(body)) + "\r\n"
	}
	acc, err := m.srv.accept(append([]byte(raw+"\r\n"), body...))
	if err != nil {
		if CodeOf(err) == CodeUnknownKey {
			return plainResponse(400, contentTypeProblem, m.unknownKey()), nil
		}
		if CodeOf(err) == CodeHybridRequired {
			return plainResponse(400, contentTypeProblem, fmt.Sprintf(`{"type":%q,"status":400}`, ProblemHybridRequired)), nil
		}
		return plainResponse(400, contentTypeProblem, fmt.Sprintf(`{"type":%q,"status":400}`, ProblemMalformed)), nil
	}
	// Profile 2: freshness from the time in n0 (spec §4.5); a stale
	// answer carries the server's Date, other answers none.
	stale := false
	if acc.profile == ProfileCompact {
		_, err := CheckNonceTime(&acc.n0, m.srv.now, DefaultWindow)
		stale = err != nil
	}
	ask, _ := Get(acc.head.Fields, TicketField)
	asked := ask == AskShort
	m.mu.Lock()
	m.seen = append(m.seen, memSeen{profile: acc.profile, target: r.URL.RequestURI(), host: acc.host, n0: acc.n0, head: acc.head, stale: stale, hybrid: acc.hybrid,
		cookie: r.Header.Get("Cookie"), short: acc.short, asked: asked})
	m.mu.Unlock()
	sum := sha256.Sum256(acc.body)
	payload := fmt.Sprintf("%s %s %d %x", acc.head.Method, acc.head.Target, len(acc.body), sum)
	status, ctype := 200, "text/plain"
	if m.problem != "" {
		status, ctype, payload = 500, contentTypeProblem, fmt.Sprintf(`{"type":%q,"status":500}`, m.problem)
	}
	if stale {
		status, ctype, payload = 425, contentTypeProblem, fmt.Sprintf(`{"type":%q,"status":425}`, ProblemStale)
	}
	ticket := ""
	tokenKey := acc.key
	switch {
	case asked && m.shortTickets:
		st := m.srv.issueShort(acc)
		ticket = TicketField + ": " + st.Field() + "\r\n"
		tokenKey = st.Key
	case m.issueTickets && !acc.short:
		tic := m.srv.ticket.Seal(TicketContents{Key: acc.key, KID: acc.kid, Expiry: uint32(m.srv.ticketExpires)}, [NonceLen]byte(randomBytes(NonceLen)))
		ticket = TicketField + ": " + tic.Field() + "\r\n"
	}
	if m.tokenSecret != nil {
		if !stale && isUnsafe(acc.head.Method) && !m.tokenValid(acc) {
			status, ctype, payload = 425, contentTypeProblem, fmt.Sprintf(`{"type":%q,"status":425}`, ProblemTokenRequired)
		}
		if v, ok := Get(acc.head.Fields, ClientRandomField); ok {
			if cr, err := decodeFixed(v, 24); err == nil {
				ticket += RandomField + ": " + FormatRandom(m.tokenSecret, tokenKey, [24]byte(cr)) + "\r\n"
			}
		}
	}
	date := "Date: " + FormatDate(m.srv.now) + "\r\n"
	nonce := randomBytes(NonceLen)
	if acc.profile == ProfileCompact {
		nonce = randomBytes(ResponseRandomLen)
		if !stale {
			date = ""
		}
	}
	inner := fmt.Sprintf("HTTP/1.1 %d X\r\n%s%sContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s",
		status, date, ticket, ctype, len(payload), payload)
	if m.rawInner != "" {
		inner = m.rawInner
	}
	out, err := acc.sealResponse(nonce, []byte(inner), 100)
	if err != nil {
		return nil, err
	}
	rsp := plainResponse(200, contentTypeOctet, string(out))
	return rsp, nil
}

// tokenValid says whether acc presents a `Random` that verifies under its
// session key.
func (m *memServer) tokenValid(acc *accepted) bool {
	v, ok := Get(acc.head.Fields, RandomField)
	if !ok {
		return false
	}
	_, err := VerifyRandom(m.tokenSecret, acc.key, v)
	return err == nil
}

func memClient(m *memServer, opts Options) *http.Client {
	opts.Base, opts.Now, opts.Mount = m, m.now, "/hc"
	return &http.Client{Transport: NewTransport(opts)}
}

func memFetch(t *testing.T, c *http.Client, method string, body io.Reader, length int64) (string, error) {
	t.Helper()
	req, err := http.NewRequest(method, "http://example.test/path?q=1", body)
	if err != nil {
		t.Fatal(err)
	}
	if length >= 0 {
		req.ContentLength = length
	}
	rsp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer rsp.Body.Close()
	b, err := io.ReadAll(rsp.Body)
	return string(b), err
}

func TestTransportCachesCertificatesForMaxAge(t *testing.T) {
	m := newMemServer(t, 1_700_000_000)
	c := memClient(m, Options{NoTickets: true})
	for i := 0; i < 3; i++ {
		if got, err := memFetch(t, c, "GET", nil, -1); err != nil || !strings.HasPrefix(got, "GET /path?q=1 0 ") {
			t.Fatalf("request %d: %q %v", i, got, err)
		}
	}
	if n := m.options.Load(); n != 1 {
		t.Fatalf("OPTIONS sent %d times within max-age", n)
	}
	m.clock.Add(601)
	if _, err := memFetch(t, c, "GET", nil, -1); err != nil {
		t.Fatal(err)
	}
	if n := m.options.Load(); n != 2 {
		t.Fatalf("OPTIONS sent %d times after max-age ran out, want 2", n)
	}
}

// chunky yields n zero-free bytes in uneven reads, length unknown.
type chunky struct{ n, off int }

func (c *chunky) Read(p []byte) (int, error) {
	if c.off >= c.n {
		return 0, io.EOF
	}
	k := min(len(p), c.n-c.off, 1+c.off%5000)
	for i := range p[:k] {
		p[i] = byte(c.off + i)
	}
	c.off += k
	return k, nil
}

func TestTransportStreamsRequestBodies(t *testing.T) {
	m := newMemServer(t, 1_700_000_000)
	c := memClient(m, Options{RecordSize: 1000})
	for _, n := range []int{0, 1, 999, 1000, 1001, 5000, 100_000} {
		data, _ := io.ReadAll(&chunky{n: n})
		want := fmt.Sprintf("POST /path?q=1 %d %x", n, sha256.Sum256(data))
		// Unknown length: chunked outside, records as the body arrives.
		got, err := memFetch(t, c, "POST", io.NopCloser(&chunky{n: n}), 0)
		if err != nil || got != want {
			t.Fatalf("%d bytes, unknown length: %q %v", n, got, err)
		}
		// Known length: the outer Content-Length is computed in advance.
		got, err = memFetch(t, noGetClient(m), "POST", bytes.NewReader(data), int64(n))
		if err != nil || got != want {
			t.Fatalf("%d bytes, known length: %q %v", n, got, err)
		}
		if m.lastOuterLen.Load() != m.lastBodyLen.Load() {
			t.Fatalf("%d bytes: announced %d, sent %d", n, m.lastOuterLen.Load(), m.lastBodyLen.Load())
		}
	}
}

func noGetClient(m *memServer) *http.Client {
	return memClient(m, Options{RecordSize: 1000, NoGetForm: true})
}

func TestTransportInnerProblemIsATypedError(t *testing.T) {
	m := newMemServer(t, 1_700_000_000)
	m.problem = ProblemIntegrity
	_, err := memFetch(t, memClient(m, Options{}), "GET", nil, -1)
	var he *Error
	if !errors.As(err, &he) || he.Code != CodeIntegrity || he.Type != ProblemIntegrity || !he.Authenticated || he.Status != 500 {
		t.Fatalf("want a sealed integrity problem, got %#v", err)
	}
}

func TestTransportOuterRefusalIsUnauthenticated(t *testing.T) {
	m := newMemServer(t, 1_700_000_000)
	c := memClient(m, Options{Mount: "/hc"})
	// A request under a wrong mount is malformed for the server.
	c.Transport.(*Transport).mount = "/other"
	_, err := memFetch(t, c, "GET", nil, -1)
	var he *Error
	if !errors.As(err, &he) || he.Code != CodeRefused || he.Type != ProblemMalformed || he.Authenticated {
		t.Fatalf("want an unauthenticated refusal, got %#v", err)
	}
}

func TestTransportUnknownKeyUsesTheProblemsCertificates(t *testing.T) {
	m := newMemServer(t, 1_700_000_000)
	tr := NewTransport(Options{Base: m, Now: m.now, Mount: "/hc"})
	// A stale key cached from elsewhere: the server answers unknown-key
	// with its certificates, and the retry uses them without OPTIONS.
	old := GenerateKexSecret()
	tr.SetKeys("example.test", []DiscoveredKey{{Serial: 1, NotBefore: 0, NotAfter: 1 << 31, KexPublic: [32]byte(old.Public())}})
	var x Exchange
	tr.opts.Observe = func(e Exchange) { x = e }
	got, err := memFetch(t, &http.Client{Transport: tr}, "GET", nil, -1)
	if err != nil || !strings.HasPrefix(got, "GET") || x.Attempts != 2 || m.options.Load() != 0 {
		t.Fatalf("unknown-key retry: %q %v %+v options %d", got, err, x, m.options.Load())
	}
}

func TestTransportRefusesHTTPS(t *testing.T) {
	tr := NewTransport(Options{})
	req, _ := http.NewRequest("GET", "https://example.test/", nil)
	if _, err := tr.RoundTrip(req); CodeOf(err) != CodeConfig {
		t.Fatalf("https must be refused: %v", err)
	}
	bad := NewTransport(Options{Identity: "not base64!"})
	req, _ = http.NewRequest("GET", "http://example.test/", nil)
	if _, err := bad.RoundTrip(req); CodeOf(err) != CodeConfig {
		t.Fatalf("a bad identity must be a config error: %v", err)
	}
}

func TestSealedLenMatchesSealAll(t *testing.T) {
	for _, rs := range []int{1, 7, 1000, 16384} {
		for _, n := range []int{0, 1, rs - 1, rs, rs + 1, 3 * rs, 3*rs + 5} {
			if n < 0 {
				continue
			}
			out, err := SealAll(NewRequestSealer(SessionKey{}, [NonceLen]byte{}), nil, make([]byte, n), rs)
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(out)) != sealedLen(int64(n), int64(rs)) {
				t.Fatalf("rs %d n %d: sealed %d, predicted %d", rs, n, len(out), sealedLen(int64(n), int64(rs)))
			}
		}
	}
}
