package httpcrypt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// --- The puzzle --------------------------------------------------------

var admitSecret = bytes.Repeat([]byte{0x26}, 32)

func TestSolvePuzzleFindsTheFirstSolutionAndItVerifies(t *testing.T) {
	addr := Addr16(netip.MustParseAddr("192.0.2.7"))
	for _, d := range []int{0, 1, 8, 12, 14} {
		c := MakeAdmitCookie(admitSecret, 1000, uint8(d), addr)
		n0 := [NonceLen]byte(bytes.Repeat([]byte{byte(d + 1)}, NonceLen))
		sol, err := SolvePuzzle(context.Background(), &c, &n0, d)
		if err != nil {
			t.Fatalf("d=%d: %v", d, err)
		}
		chk, err := VerifyAdmitEcho(FormatAdmitEcho(&c, sol), &n0, addr, [][]byte{admitSecret}, 1000)
		if err != nil || chk.Difficulty != d {
			t.Fatalf("d=%d: own solution refused: %v", d, err)
		}
		if lz := leadingZeroBits(chk.PuzzleHash); lz < d {
			t.Fatalf("d=%d: hash has %d zero bits", d, lz)
		}
		// The counter starts at 0 and stops at the first solution.
		first := binary.BigEndian.Uint64(sol[:])
		for i := uint64(0); i < first; i++ {
			var s [8]byte
			binary.BigEndian.PutUint64(s[:], i)
			if newPuzzleInput(&c, &n0, s[:]).holds(d) {
				t.Fatalf("d=%d: %d also solves, solver returned %d", d, i, first)
			}
		}
		// Bound to n0: another nonce refuses it (d ≥ 8 makes a chance pass unlikely;
		// the vectors pin this case exactly).
		if d >= 8 {
			other := n0
			other[0] ^= 1
			if _, err := VerifyAdmitEcho(FormatAdmitEcho(&c, sol), &other, addr, [][]byte{admitSecret}, 1000); CodeOf(err) != CodeBadAdmission {
				if !newPuzzleInput(&c, &other, sol[:]).holds(d) {
					t.Fatalf("d=%d: refused with %v", d, err)
				}
			}
		}
	}
}

func TestSolvePuzzleRefusesAbove24AndStopsOnCancel(t *testing.T) {
	c := MakeAdmitCookie(admitSecret, 1, 25, [16]byte{})
	var n0 [NonceLen]byte
	if _, err := SolvePuzzle(context.Background(), &c, &n0, 25); CodeOf(err) != CodeBadAdmission {
		t.Fatalf("d=25: %v, want bad_admission", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if _, err := SolvePuzzle(ctx, &c, &n0, 24); CodeOf(err) != CodeTransport || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled search: %v", err)
	}
	if time.Since(start) > time.Second {
		t.Fatalf("cancelled search took %v", time.Since(start))
	}
}

func TestAdmitCookieAddresses(t *testing.T) {
	v4 := Addr16(netip.MustParseAddr("192.0.2.7"))
	mapped := Addr16(netip.MustParseAddr("::ffff:192.0.2.7"))
	if v4 != mapped || !bytes.Equal(v4[:12], []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff}) {
		t.Fatalf("IPv4 is not IPv4-mapped: %x", v4)
	}
	if _, err := ParseAdmitCookie(EncodeB64u(make([]byte, 20))); CodeOf(err) != CodeBadAdmission {
		t.Fatalf("short cookie: %v", err)
	}
	c := MakeAdmitCookie(admitSecret, 7, 3, v4)
	if _, err := ParseAdmitCookie(EncodeB64u(c[:]) + "="); CodeOf(err) != CodeBadAdmission {
		t.Fatalf("padded cookie: %v", err)
	}
}

// --- The Transport against a defended in-memory server ------------------

// gate is a server's admission defence (spec §14.2) in front of memServer:
// key requests need a valid echo (else a challenge), then a budget (else
// busy); ticket requests pass untouched. Every echo is checked with
// VerifyAdmitEcho against the request's own n0.
type gate struct {
	m  *memServer
	mu sync.Mutex
	on bool
	d  uint8
	// script, if set, answers the next requests in order: "admission",
	// "busy", or "pass" (then the ordinary defence).
	script     []string
	retryAfter string // busy document's retry_after member (JSON text), "" for none
	header     string // busy Retry-After header
	badMember  string // challenge's "admit" member override

	outer      int
	challenged int
	busy       int
	echoes     int
	ticketSeen int
	ticketBad  int // ticket requests that carried an echo or were refused
	n0s        map[[NonceLen]byte]bool
}

func newGate(m *memServer, d uint8) *gate {
	return &gate{m: m, on: true, d: d, n0s: map[[NonceLen]byte]bool{}}
}

func (g *gate) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodOptions {
		return g.m.RoundTrip(r)
	}
	g.mu.Lock()
	g.outer++
	now := g.m.clock.Load()
	route, err := RouteRequest(r.Method, r.URL.RequestURI(), "/hc")
	if err != nil {
		g.mu.Unlock()
		return nil, err
	}
	var echo string
	var pairs []string
	for _, p := range strings.Split(r.Header.Get("Cookie"), ";") {
		p = strings.TrimSpace(p)
		if v, ok := strings.CutPrefix(p, AdmitCookieName+"="); ok {
			echo = v
		}
		pairs = append(pairs, p)
	}
	kid, tid := g.m.srv.cert.KID(), g.m.srv.ticket.TID
	cred, err := ScanCookies([]string{r.Header.Get("Cookie")}, func(id KID) string {
		switch id {
		case kid:
			return "key"
		case tid:
			return "ticket"
		}
		return ""
	})
	if err != nil {
		g.mu.Unlock()
		return nil, fmt.Errorf("gate: %v", err)
	}
	if cred.Ticket {
		g.ticketSeen++
		if echo != "" {
			g.ticketBad++
		}
		g.mu.Unlock()
		return g.m.RoundTrip(r)
	}
	action := "pass"
	if len(g.script) > 0 {
		action, g.script = g.script[0], g.script[1:]
	}
	addr := Addr16(netip.MustParseAddr("127.0.0.1"))
	step := uint32(now / 30)
	if action == "pass" && g.on {
		if echo == "" {
			action = "admission"
		} else if _, err := VerifyAdmitEcho(echo, &route.N0, addr, [][]byte{admitSecret}, step); err != nil {
			action = "admission"
		} else {
			g.echoes++
			if g.n0s[route.N0] {
				g.mu.Unlock()
				return nil, errors.New("gate: n0 seen twice")
			}
			g.n0s[route.N0] = true
		}
	}
	switch action {
	case "admission":
		g.challenged++
		c := MakeAdmitCookie(admitSecret, step, g.d, addr)
		member := EncodeB64u(c[:])
		if g.badMember != "" {
			member = g.badMember
		}
		g.mu.Unlock()
		doc := fmt.Sprintf(`{"type":%q,"title":"admission","status":429,"admit":%q,"difficulty":%d}`, ProblemAdmission, member, g.d)
		return plainResponse(429, contentTypeProblem, doc, "Retry-After", "0", "Cache-Control", "no-store"), nil
	case "busy":
		g.busy++
		doc := fmt.Sprintf(`{"type":%q,"title":"busy","status":429}`, ProblemBusy)
		if g.retryAfter != "" {
			doc = fmt.Sprintf(`{"type":%q,"title":"busy","status":429,"retry_after":%s}`, ProblemBusy, g.retryAfter)
		}
		h := g.header
		g.mu.Unlock()
		if h != "" {
			return plainResponse(429, contentTypeProblem, doc, "Retry-After", h), nil
		}
		return plainResponse(429, contentTypeProblem, doc), nil
	}
	g.mu.Unlock()
	return g.m.RoundTrip(r)
}

type admitRig struct {
	m      *memServer
	g      *gate
	tr     *Transport
	c      *http.Client
	rec    *recorder
	sleeps []time.Duration
}

func newAdmitRig(t *testing.T, d uint8, opts Options) *admitRig {
	m := newMemServer(t, 1_700_000_000)
	r := &admitRig{m: m, g: newGate(m, d), rec: &recorder{}}
	opts.Base, opts.Now, opts.Mount, opts.Observe = r.g, m.now, "/hc", r.rec.observe
	r.tr = NewTransport(opts)
	r.tr.sleep = func(ctx context.Context, d time.Duration) error {
		r.sleeps = append(r.sleeps, d)
		return nil
	}
	r.c = &http.Client{Transport: r.tr}
	return r
}

func (r *admitRig) get(t *testing.T) (Exchange, error) {
	t.Helper()
	got, err := memFetch(t, r.c, "GET", nil, -1)
	if err != nil {
		return Exchange{}, err
	}
	if !strings.HasPrefix(got, "GET /path?q=1 0 ") {
		t.Fatalf("unexpected body %q", got)
	}
	return r.rec.last(), nil
}

func TestAdmissionChallengeIsSolvedAndTheCookieEchoed(t *testing.T) {
	r := newAdmitRig(t, 10, Options{NoTickets: true})
	x, err := r.get(t)
	if err != nil {
		t.Fatal(err)
	}
	if x.Attempts != 2 || x.Challenges != 1 || !x.Echo || x.Difficulty != 10 || x.Status != 200 {
		t.Fatalf("first call: %+v, want a challenge, then an echo of difficulty 10", x)
	}
	// Later fresh-key calls within 25 s echo at once: no round trip per call,
	// a new solution for each n0 (the gate refuses reuse of a nonce).
	for i := 0; i < 3; i++ {
		r.m.clock.Add(8)
		x, err := r.get(t)
		if err != nil {
			t.Fatal(err)
		}
		if x.Attempts != 1 || x.Challenges != 0 || !x.Echo {
			t.Fatalf("call at +%d s: %+v, want one attempt with the stored cookie", 8*(i+1), x)
		}
	}
	if r.g.challenged != 1 || r.g.echoes != 4 {
		t.Fatalf("gate saw %d challenges, %d echoes; want 1, 4", r.g.challenged, r.g.echoes)
	}
	// 25 s after the challenge the cookie is dropped: the next call goes
	// without it and is challenged again.
	r.m.clock.Add(2) // +26 s
	x, err = r.get(t)
	if err != nil {
		t.Fatal(err)
	}
	if x.Attempts != 2 || x.Challenges != 1 {
		t.Fatalf("call after 25 s: %+v, want a new challenge", x)
	}
	// The defence switched off: an idle server never challenges; the stored
	// cookie is still echoed (and ignored) within its 25 s.
	r.g.on = false
	x, err = r.get(t)
	if err != nil || x.Attempts != 1 || !x.Echo {
		t.Fatalf("idle server: %+v %v", x, err)
	}
	if len(r.sleeps) != 0 {
		t.Fatalf("slept %v without a busy answer", r.sleeps)
	}
}

func TestAdmissionNeverOnTicketRequests(t *testing.T) {
	r := newAdmitRig(t, 8, Options{})
	r.m.issueTickets = true
	x, err := r.get(t) // challenged, then admitted with a key: a ticket comes back
	if err != nil || x.Credential != "key" || x.Challenges != 1 {
		t.Fatalf("first call: %+v %v", x, err)
	}
	for i := 0; i < 3; i++ {
		x, err := r.get(t)
		if err != nil || x.Credential != "ticket" || x.Attempts != 1 || x.Echo || x.Challenges != 0 {
			t.Fatalf("ticket call %d: %+v %v", i, x, err)
		}
	}
	if r.g.ticketSeen != 3 || r.g.ticketBad != 0 {
		t.Fatalf("gate saw %d ticket requests, %d with an echo", r.g.ticketSeen, r.g.ticketBad)
	}
}

func TestAdmissionOnAChallengedTicketGoesAgainWithAKey(t *testing.T) {
	r := newAdmitRig(t, 4, Options{})
	r.m.issueTickets = true
	r.g.on = false
	if x, err := r.get(t); err != nil || x.Credential != "key" {
		t.Fatalf("first call: %+v %v", x, err)
	}
	// A server that, against §14.1, challenges a ticket request: the
	// client stores the cookie, drops the ticket and goes again with a key.
	r.g.on = true
	var cookies []string
	r.tr.base = rtFunc(func(req *http.Request) (*http.Response, error) {
		cookies = append(cookies, req.Header.Get("Cookie"))
		if len(cookies) == 1 {
			c := MakeAdmitCookie(admitSecret, uint32(r.m.clock.Load()/30), 4, Addr16(netip.MustParseAddr("127.0.0.1")))
			doc := fmt.Sprintf(`{"type":%q,"status":429,"admit":%q,"difficulty":4}`, ProblemAdmission, EncodeB64u(c[:]))
			return plainResponse(429, contentTypeProblem, doc), nil
		}
		return r.g.RoundTrip(req)
	})
	x, err := r.get(t)
	if err != nil {
		t.Fatal(err)
	}
	if len(cookies) != 2 || strings.Contains(cookies[0], AdmitCookieName) || !strings.Contains(cookies[1], AdmitCookieName) ||
		x.Credential != "key" || x.Challenges != 1 || r.g.echoes != 1 || r.g.ticketSeen != 0 {
		t.Fatalf("cookies %q, exchange %+v: want a ticket without echo, then a key with one", cookies, x)
	}
}

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestAdmissionBoundOfThreeRetries(t *testing.T) {
	cases := []struct {
		script   []string
		code     string
		attempts int
		sleeps   int
	}{
		{[]string{"admission", "admission", "admission", "admission"}, CodeAdmissionRequired, 4, 0},
		{[]string{"busy", "busy", "busy", "busy"}, CodeBusy, 4, 3},
		{[]string{"admission", "busy", "admission", "busy"}, CodeBusy, 4, 1},
		{[]string{"busy", "admission", "busy", "admission"}, CodeAdmissionRequired, 4, 2},
		{[]string{"admission", "busy", "busy"}, "", 4, 2}, // three retries, the fourth attempt passes
	}
	for i, tc := range cases {
		r := newAdmitRig(t, 6, Options{NoTickets: true})
		r.g.on = false // only the script refuses
		r.g.retryAfter = "9"
		r.g.script = tc.script
		x, err := r.get(t)
		if tc.code == "" {
			if err != nil || x.Attempts != tc.attempts || x.Challenges != 1 || x.Busy != 2 || !x.Echo {
				t.Fatalf("case %d: %+v %v", i, x, err)
			}
		} else {
			wantCode(t, err, tc.code)
			var he *Error
			if !errors.As(err, &he) || he.Status != 429 || he.Authenticated {
				t.Fatalf("case %d: %#v", i, err)
			}
		}
		if r.g.outer != tc.attempts || len(r.sleeps) != tc.sleeps {
			t.Fatalf("case %d: %d outer requests, %d sleeps; want %d, %d", i, r.g.outer, len(r.sleeps), tc.attempts, tc.sleeps)
		}
		for _, s := range r.sleeps {
			if s != 5*time.Second {
				t.Fatalf("case %d: slept %v for retry_after 9, want the 5 s cap", i, s)
			}
		}
	}
}

func TestAdmissionBusyWait(t *testing.T) {
	for _, tc := range []struct {
		member, header string
		want           time.Duration
	}{
		{"2", "", 2 * time.Second},
		{"1", "4", time.Second}, // the member wins
		{"", "3", 3 * time.Second},
		{"", "", time.Second},
		{"600", "", 5 * time.Second},
	} {
		r := newAdmitRig(t, 0, Options{NoTickets: true})
		r.g.on = false
		r.g.retryAfter, r.g.header = tc.member, tc.header
		r.g.script = []string{"busy"}
		x, err := r.get(t)
		if err != nil || x.Busy != 1 || x.Attempts != 2 {
			t.Fatalf("%+v: %+v %v", tc, x, err)
		}
		if len(r.sleeps) != 1 || r.sleeps[0] != tc.want {
			t.Fatalf("%+v: slept %v", tc, r.sleeps)
		}
	}
	// The real wait honours the request's context.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := sleepCtx(ctx, 5*time.Second); CodeOf(err) != CodeTransport || time.Since(start) > 2*time.Second {
		t.Fatalf("sleepCtx: %v after %v", err, time.Since(start))
	}
}

func TestAdmissionGivesUpAbove24AndOnABadCookie(t *testing.T) {
	r := newAdmitRig(t, 25, Options{NoTickets: true})
	_, err := r.get(t)
	wantCode(t, err, CodeBadAdmission)
	if r.g.outer != 1 {
		t.Fatalf("%d outer requests for difficulty 25, want 1", r.g.outer)
	}
	r = newAdmitRig(t, 4, Options{NoTickets: true})
	r.g.badMember = "not-a-cookie"
	_, err = r.get(t)
	wantCode(t, err, CodeBadAdmission)
	// A challenge's member lower than the cookie's own difficulty byte: the
	// client solves for the cookie's (the one the server checks).
	r = newAdmitRig(t, 9, Options{NoTickets: true})
	r.tr.base = rtFunc(func(req *http.Request) (*http.Response, error) {
		rsp, err := r.g.RoundTrip(req)
		if err == nil && rsp.StatusCode == 429 {
			b, _ := io.ReadAll(rsp.Body)
			b = bytes.Replace(b, []byte(`"difficulty":9`), []byte(`"difficulty":1`), 1)
			rsp.Body = io.NopCloser(bytes.NewReader(b))
		}
		return rsp, err
	})
	x, err := r.get(t)
	if err != nil || x.Difficulty != 9 || x.Attempts != 2 {
		t.Fatalf("lowered member: %+v %v", x, err)
	}
}

// onceReader is a body that cannot be read twice (no GetBody).
type onceReader struct{ r io.Reader }

func (o *onceReader) Read(p []byte) (int, error) { return o.r.Read(p) }

func TestAdmissionStreamedBodyIsNotResent(t *testing.T) {
	r := newAdmitRig(t, 6, Options{NoTickets: true, NoGetForm: true})
	req, _ := http.NewRequest("POST", "http://example.test/path?q=1", &onceReader{strings.NewReader("payload")})
	_, err := r.c.Do(req)
	wantCode(t, err, CodeAdmissionRequired)
	if r.g.outer != 1 {
		t.Fatalf("%d outer requests for a streamed body, want 1", r.g.outer)
	}
	// The cookie was kept: the next streamed call echoes at once and passes.
	req, _ = http.NewRequest("POST", "http://example.test/path?q=1", &onceReader{strings.NewReader("payload")})
	rsp, err := r.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rsp.Body)
	rsp.Body.Close()
	if x := r.rec.last(); !strings.HasPrefix(string(b), "POST /path?q=1 7 ") || x.Attempts != 1 || !x.Echo {
		t.Fatalf("second streamed call: %q %+v", b, x)
	}
	// busy on a streamed body is the error too, without a wait.
	r.g.on, r.g.script = false, []string{"busy"}
	req, _ = http.NewRequest("POST", "http://example.test/path?q=1", &onceReader{strings.NewReader("payload")})
	_, err = r.c.Do(req)
	wantCode(t, err, CodeBusy)
	if len(r.sleeps) != 0 {
		t.Fatalf("slept %v before giving up on a streamed body", r.sleeps)
	}
}

func TestLeadingZeroBits(t *testing.T) {
	for _, tc := range []struct {
		prefix []byte
		want   int
	}{
		{[]byte{0x80}, 0}, {[]byte{0x7f}, 1}, {[]byte{0x01}, 7}, {[]byte{0x00, 0xff}, 8},
		{[]byte{0x00, 0x0e}, 12}, {[]byte{0x00, 0x00, 0x00, 0x10}, 27},
	} {
		var h [32]byte
		copy(h[:], tc.prefix)
		if len(tc.prefix) < 32 && tc.prefix[len(tc.prefix)-1] == 0 {
			h[len(tc.prefix)] = 0xff
		}
		if got := leadingZeroBits(h); got != tc.want {
			t.Fatalf("%x: %d zero bits, want %d", tc.prefix, got, tc.want)
		}
	}
	if leadingZeroBits([32]byte{}) != 256 {
		t.Fatal("all-zero hash")
	}
}

// BenchmarkSolvePuzzle16 is the client's cost at the server's default
// ceiling (d = 16), averaged over nonces.
func BenchmarkSolvePuzzle16(b *testing.B) {
	c := MakeAdmitCookie(admitSecret, 1, 16, [16]byte{})
	for i := 0; i < b.N; i++ {
		n0 := [NonceLen]byte(randomBytes(NonceLen))
		if _, err := SolvePuzzle(context.Background(), &c, &n0, 16); err != nil {
			b.Fatal(err)
		}
	}
}
