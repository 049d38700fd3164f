package httpcrypt

// Short tickets (spec §7.3): the engine's policy without IO (ask on the
// first request to a host, present the held ticket on later ones, ask
// again on its R-th use or T after its first, no ask from a request sent
// after an ask and before the new ticket, the suite rule, a refusal that
// drops the ticket, a token bound to the key k' of the short ticket it
// came with), then the Transport against the in-memory server with
// simulated time (the cookie on the wire, a server that forgot its ticket
// key or the kex key, a body that cannot be sent again, suite 2, a token
// demand met by one retry).

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

const shortStart = 1_700_000_000

// shortRig is an engine on a simulated clock with one host whose v1 key
// is key, and the ticket key the host's short tickets come from.
type shortRig struct {
	t     *testing.T
	e     *engine
	clock int64
	key   *serverKey
	tk    *TicketKey
	n     byte // the next ticket's h
}

func newShortRig(t *testing.T, opts Options) *shortRig {
	m := newMemServer(t, shortStart)
	r := &shortRig{t: t, clock: shortStart, tk: m.srv.ticket}
	k := m.srv.cert.Key()
	r.key = &serverKey{v1: &k}
	opts.Now = func() time.Time { return time.Unix(r.clock, 0) }
	r.e = newEngine(opts)
	return r
}

// plan plans a GET to the host at the rig's clock.
func (r *shortRig) plan() *attempt {
	r.t.Helper()
	return r.planTo(r.key)
}

func (r *shortRig) planTo(key *serverKey) *attempt {
	r.t.Helper()
	req, err := http.NewRequest("GET", "http://example.test/x", nil)
	if err != nil {
		r.t.Fatal(err)
	}
	a, err := r.e.plan(context.Background(), req, "example.test", key, true, false)
	if err != nil {
		r.t.Fatal(err)
	}
	// The ask travels in the inner head, and only there.
	head, _, err := DecodeRequest(a.head, DefaultLimits())
	if err != nil {
		r.t.Fatal(err)
	}
	want := ""
	switch {
	case a.ask:
		want = AskShort
	case a.decline:
		want = Decline
	}
	if v, ok := Get(head.Fields, TicketField); ok != (want != "") || v != want {
		r.t.Fatalf("ask %v, decline %v, inner Ticket field %q", a.ask, a.decline, v)
	}
	return a
}

// answer delivers an authenticated answer to a that carries a new short
// ticket, and returns that ticket.
func (r *shortRig) answer(a *attempt) *ShortTicket {
	r.n++
	st := r.tk.IssueShort(KID{1}, [ShortHLen]byte{r.n})
	r.e.answered(a, &ResponseHead{Status: 200, Fields: []Field{{TicketField, st.Field()}}})
	return st
}

// want checks what attempt a presented and whether it asked.
func (r *shortRig) want(what string, a *attempt, presented *ShortTicket, ask bool) {
	r.t.Helper()
	switch {
	case presented == nil && (a.short != nil || a.credential != "key"):
		r.t.Fatalf("%s: presented %s, want a key", what, a.credential)
	case presented != nil && (a.short == nil || *a.short != *presented || a.credential != "ticket (short)" || a.k != presented.Key):
		r.t.Fatalf("%s: presented %s (%v), want short ticket %x under its key", what, a.credential, a.short, presented.H[0])
	case a.ask != ask:
		r.t.Fatalf("%s: ask %v, want %v", what, a.ask, ask)
	}
	if presented != nil {
		wantCookieValue(r.t, what, a.cookie, "ticket (short)")
		if name, value, _ := strings.Cut(a.cookie, "="); name[:idB64Len] != EncodeB64u(presented.TID[:]) ||
			value[:shortB64Len] != EncodeB64u(presented.H[:]) {
			r.t.Fatalf("%s: cookie %q does not carry tid and h", what, a.cookie)
		}
	}
}

func TestShortTicketsAskFirstThenPresentUpToTheRthUse(t *testing.T) {
	r := newShortRig(t, Options{ShortTickets: ShortPolicy{Reuse: 3}})
	a := r.plan()
	r.want("first request", a, nil, true)
	t1 := r.answer(a)
	// Uses 1 and 2 present t1 without asking; use 3 (the R-th) asks.
	r.want("use 1", r.plan(), t1, false)
	r.want("use 2", r.plan(), t1, false)
	asking := r.plan()
	r.want("use 3", asking, t1, true)
	// Sent before the answer to the ask arrives: t1 again, no second ask.
	r.want("concurrent 1", r.plan(), t1, false)
	r.want("concurrent 2", r.plan(), t1, false)
	// The new ticket starts its count afresh.
	t2 := r.answer(asking)
	r.want("new ticket, use 1", r.plan(), t2, false)
	r.want("new ticket, use 2", r.plan(), t2, false)
	r.want("new ticket, use 3", r.plan(), t2, true)
}

func TestShortTicketsAskAgainAfterMaxAge(t *testing.T) {
	r := newShortRig(t, Options{ShortTickets: ShortPolicy{Reuse: 100, MaxAge: 60 * time.Second}})
	t1 := r.answer(r.plan())
	r.clock += 1000 // the count starts at the first use, not on arrival
	first := r.clock
	r.want("first use", r.plan(), t1, false)
	r.clock = first + 59
	r.want("59 s after the first use", r.plan(), t1, false)
	r.clock = first + 60
	asking := r.plan()
	r.want("60 s after the first use", asking, t1, true)
	// The ask restarts the clock: a request sent before the new ticket
	// arrives does not ask again.
	r.clock++
	r.want("after the ask", r.plan(), t1, false)
	t2 := r.answer(asking)
	r.clock += 59
	r.want("new ticket", r.plan(), t2, false)
}

func TestShortTicketsDefaultPolicy(t *testing.T) {
	r := newShortRig(t, Options{})
	t1 := r.answer(r.plan())
	for i := 1; i < DefaultShortTicketReuse; i++ {
		r.want(fmt.Sprintf("use %d", i), r.plan(), t1, false)
	}
	r.want("use 16", r.plan(), t1, true)
	r.answer(r.plan())
	r.clock += int64(DefaultShortTicketMaxAge/time.Second) - 1
	r.plan()
	r.clock += int64(DefaultShortTicketMaxAge / time.Second)
	if a := r.plan(); !a.ask {
		t.Fatalf("no ask %v after the first use", DefaultShortTicketMaxAge)
	}
}

func TestShortTicketsReuseOneAsksEveryTime(t *testing.T) {
	r := newShortRig(t, Options{ShortTickets: ShortPolicy{Reuse: 1}})
	a := r.plan()
	r.want("first", a, nil, true)
	for i := 0; i < 3; i++ {
		st := r.answer(a)
		a = r.plan()
		r.want(fmt.Sprintf("request %d", i+2), a, st, true)
	}
}

func TestShortTicketsOff(t *testing.T) {
	// NoShortTickets: never asks; the v1 ticket is presented as before.
	r := newShortRig(t, Options{NoShortTickets: true})
	a := r.plan()
	r.want("first", a, nil, false)
	v1 := r.tk.Seal(TicketContents{Key: a.k, KID: KID{1}, Expiry: shortStart + 3600}, [NonceLen]byte{1})
	r.e.answered(a, &ResponseHead{Status: 200, Fields: []Field{{TicketField, v1.Field()}}})
	for i := 0; i < 3; i++ {
		b := r.plan()
		if b.credential != "ticket" || b.short != nil || b.ask || b.k != a.k {
			t.Fatalf("request %d: %+v, want the v1 ticket under the first key, no ask", i+2, b)
		}
		wantCookieValue(t, "v1 ticket", b.cookie, "ticket")
	}
	// NoTickets: neither asks nor presents.
	r = newShortRig(t, Options{NoTickets: true})
	a = r.plan()
	r.answer(a)
	r.want("no tickets", r.plan(), nil, false)
}

func TestShortTicketPreferredToAV1Ticket(t *testing.T) {
	r := newShortRig(t, Options{ShortTickets: ShortPolicy{Reuse: 2}})
	a := r.plan()
	v1 := r.tk.Seal(TicketContents{Key: a.k, KID: KID{1}, Expiry: shortStart + 3600}, [NonceLen]byte{1})
	// A server of the contract alone ignores the ask and sends v1 tickets:
	// they are presented, and every request asks.
	r.e.answered(a, &ResponseHead{Status: 200, Fields: []Field{{TicketField, v1.Field()}}})
	b := r.plan()
	if b.credential != "ticket" || !b.ask {
		t.Fatalf("with a v1 ticket only: %s, ask %v", b.credential, b.ask)
	}
	st := r.answer(b)
	r.want("short and v1 held", r.plan(), st, false)
}

func TestShortTicketSuiteRule(t *testing.T) {
	m := withHybrid(t, newMemServer(t, shortStart), false)
	hk := &serverKey{hybrid: &HybridKey{Cert: m.srv.hcert, Kem: m.srv.kem.Public()}}
	// A short ticket of a v1 session is not presented to a suite-2 key (it
	// would make the request classical); the ask follows the policy alone.
	r := newShortRig(t, Options{PQ: PQPrefer})
	r.answer(r.plan())
	a := r.planTo(hk)
	if a.short != nil || a.credential != "key" || !a.hybrid || len(a.ctM) != KemCiphertextLen || a.ask {
		t.Fatalf("classical short ticket to a suite-2 key: %+v", a)
	}
	// One of a hybrid session is presented as a hybrid ticket request: the
	// session stays suite 2, no ciphertext travels.
	st := r.answer(a)
	for _, key := range []*serverKey{hk, r.key} {
		b := r.planTo(key)
		r.want("hybrid short ticket", b, st, false)
		if !b.hybrid || b.ctM != nil {
			t.Fatalf("hybrid short ticket: hybrid %v, %d ciphertext bytes", b.hybrid, len(b.ctM))
		}
	}
}

func TestShortTicketRefusalDropsItAndRetriesWithAKey(t *testing.T) {
	r := newShortRig(t, Options{})
	t1 := r.answer(r.plan())
	a := r.plan()
	r.want("presenting", a, t1, false)
	// A 400 malformed (no_cookie: the ticket key is gone) drops the ticket.
	cs := newCall(time.Now(), true)
	malformed := []byte(fmt.Sprintf(`{"type":%q,"status":400}`, ProblemMalformed))
	out, err := r.e.refusal(a, 400, "", malformed, cs)
	if err != nil || out != retryShort {
		t.Fatalf("refused short ticket: %v %v", out, err)
	}
	if err := cs.follow(out); err != nil {
		t.Fatalf("no retry after a refused short ticket: %v", err)
	}
	r.want("the retry", r.plan(), nil, true)
	// Once per call: a second refusal ends it with no_cookie.
	if err := cs.follow(retryShort); CodeOf(err) != CodeNoCookie {
		t.Fatalf("second refusal: %v", err)
	}
	// The same answer to a key request is an error, not a retry.
	if _, err := r.e.refusal(r.plan(), 400, "", malformed, newCall(time.Now(), true)); CodeOf(err) != CodeRefused {
		t.Fatalf("malformed to a key request: %v", err)
	}
	// A refusal of a ticket that has been replaced meanwhile keeps the new one.
	t2 := r.answer(r.plan())
	old := &attempt{authority: "example.test", credential: "ticket (short)", short: t1}
	if out, _ := r.e.refusal(old, 400, "", malformed, newCall(time.Now(), true)); out != retryShort {
		t.Fatalf("refused old ticket: %v", out)
	}
	r.want("after refusing the old ticket", r.plan(), t2, false)
	// unknown-key to a short ticket (its kex key is gone) drops it too.
	b := r.plan()
	unknown := []byte(fmt.Sprintf(`{"type":%q,"status":400,"certs":[]}`, ProblemUnknownKey))
	if out, _ := r.e.refusal(b, 400, "", unknown, newCall(time.Now(), true)); out != retryUnknownKey {
		t.Fatalf("unknown-key to a short ticket: %v", out)
	}
	r.e.host("example.test", func(h *hostState) {
		if h.short != nil {
			t.Fatal("the short ticket survived unknown-key")
		}
	})
}

// planPost plans a POST to the host (a side effect: the token fields of
// spec §8.4 go along) and returns its inner head.
func (r *shortRig) planPost() (*attempt, *RequestHead) {
	r.t.Helper()
	req, err := http.NewRequest("POST", "http://example.test/x", nil)
	if err != nil {
		r.t.Fatal(err)
	}
	a, err := r.e.plan(context.Background(), req, "example.test", r.key, true, false)
	if err != nil {
		r.t.Fatal(err)
	}
	head, _, err := DecodeRequest(a.head, DefaultLimits())
	if err != nil {
		r.t.Fatal(err)
	}
	if _, ok := Get(head.Fields, ClientRandomField); !ok {
		r.t.Fatalf("a POST without %s", ClientRandomField)
	}
	return a, head
}

// wantToken checks the `Random` an inner head presents ("" for none).
func wantToken(t *testing.T, what string, head *RequestHead, token string) {
	t.Helper()
	if v, ok := Get(head.Fields, RandomField); v != token || ok != (token != "") {
		t.Fatalf("%s: Random %q (present %v), want %q", what, v, ok, token)
	}
}

func TestATokenWithAShortTicketIsBoundToTheTicketsKey(t *testing.T) {
	// ReuseKeyPerHost: every request with a key runs under the same k, so
	// a token bound to k would be presented again by such a request.
	r := newShortRig(t, Options{KeyPolicy: ReuseKeyPerHost})
	secret := []byte("token secret of the rig's server")
	a, head := r.planPost()
	r.want("first", a, nil, true)
	wantToken(t, "first", head, "")
	crField, _ := Get(head.Fields, ClientRandomField)
	cr := [24]byte(decodeOrFail(t, crField))
	// The answer (a 425 token-required, say) issues a short ticket and a
	// token computed under the ticket's key k' (spec §7.3, §8.4).
	st := r.tk.IssueShort(KID{1}, [ShortHLen]byte{7})
	token := FormatRandom(secret, st.Key, cr)
	r.e.answered(a, &ResponseHead{Status: 425, Fields: []Field{{TicketField, st.Field()}, {RandomField, token}}})
	r.e.host("example.test", func(h *hostState) {
		if h.tokenKey != st.Key || h.tokenKey == a.k {
			t.Fatal("the token is not bound to the short ticket's key")
		}
	})
	// The single retry presents the short ticket under k' with the token,
	// which verifies under k'.
	b, head := r.planPost()
	r.want("retry", b, st, false)
	wantToken(t, "retry under k'", head, token)
	if _, err := VerifyRandom(secret, b.k, token); err != nil {
		t.Fatalf("the token presented does not verify under the attempt's key: %v", err)
	}
	// Not under k: with the short ticket gone, a request with the reused
	// key runs under k again and presents no token.
	r.e.host("example.test", func(h *hostState) { h.short = nil })
	c, head := r.planPost()
	if c.credential != "key" || c.k != a.k {
		t.Fatalf("the request with a key: %s, same k %v", c.credential, c.k == a.k)
	}
	wantToken(t, "under k", head, "")
	// Otherwise unchanged: a token without a ticket is bound to the key of
	// the request it answers,
	token2 := FormatRandom(secret, c.k, cr)
	r.e.answered(c, &ResponseHead{Status: 200, Fields: []Field{{RandomField, token2}}})
	d, head := r.planPost()
	if d.credential != "key" || d.k != c.k {
		t.Fatalf("again with a key: %s", d.credential)
	}
	wantToken(t, "token without a ticket", head, token2)
	// and so is one that comes with a v1 ticket (whose key is that one).
	v1 := r.tk.Seal(TicketContents{Key: d.k, KID: KID{1}, Expiry: shortStart + 3600}, [NonceLen]byte{1})
	token3 := FormatRandom(secret, d.k, cr)
	r.e.answered(d, &ResponseHead{Status: 200, Fields: []Field{{TicketField, v1.Field()}, {RandomField, token3}}})
	e, head := r.planPost()
	if e.credential != "ticket" || e.k != d.k {
		t.Fatalf("with the v1 ticket: %s", e.credential)
	}
	wantToken(t, "token with a v1 ticket", head, token3)
	// A short ticket that arrives in an answer to a short-ticket request
	// rebinds the token to the new ticket's key.
	f, _ := r.planPost()
	st2 := r.answer(f) // the next plan presents st2
	token4 := FormatRandom(secret, st2.Key, cr)
	r.e.answered(f, &ResponseHead{Status: 200, Fields: []Field{{TicketField, st2.Field()}, {RandomField, token4}}})
	g, head := r.planPost()
	if g.short == nil || g.short.Key != st2.Key {
		t.Fatalf("the renewed short ticket is not presented: %s", g.credential)
	}
	wantToken(t, "after a renewal", head, token4)
}

func decodeOrFail(t *testing.T, s string) []byte {
	t.Helper()
	b, err := DecodeB64u(s)
	if err != nil || len(b) != 24 {
		t.Fatalf("Client-Random %q: %v", s, err)
	}
	return b
}

func TestTokenRequiredIsRetriedOnceWithOrWithoutAShortTicket(t *testing.T) {
	// The token of a token-required answer that issues a short ticket is
	// bound to that ticket's key, so the contract's single retry suffices
	// there as well: no retry of its own (spec §8.4).
	r := newShortRig(t, Options{})
	a := r.plan()
	st := r.tk.IssueShort(KID{1}, [ShortHLen]byte{9})
	problem := []byte(fmt.Sprintf(`{"type":%q,"status":425}`, ProblemTokenRequired))
	for _, fields := range [][]Field{nil, {{TicketField, st.Field()}}} {
		h := &ResponseHead{Status: 425, Fields: append(fields, Field{"Content-Type", contentTypeProblem})}
		out, ok, err := r.e.judgeProblem(a, h, problem)
		if !ok || err != nil || out != retryToken {
			t.Fatalf("token-required with %v: %v %v %v", fields, out, ok, err)
		}
		cs := newCall(time.Now(), true)
		if err := cs.follow(out); err != nil {
			t.Fatalf("with %v: no retry: %v", fields, err)
		}
		if err := cs.follow(out); CodeOf(err) != CodeTokenRequired {
			t.Fatalf("with %v, again: %v", fields, err)
		}
	}
}

// ---- the Transport against the in-memory server ----

func shortMemServer(t *testing.T) (*memServer, *http.Client, *recorder) {
	m := newMemServer(t, shortStart)
	m.shortTickets = true
	rec := &recorder{}
	c := memClient(m, Options{ShortTickets: ShortPolicy{Reuse: 3}, Observe: rec.observe})
	return m, c, rec
}

func memGet(t *testing.T, c *http.Client) string {
	t.Helper()
	got, err := memFetch(t, c, "GET", nil, -1)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got, "GET /path?q=1 0 ") {
		t.Fatalf("body %q", got)
	}
	return got
}

func TestTransportShortTickets(t *testing.T) {
	m, c, rec := shortMemServer(t)
	// What each request presents and whether it asks, R = 3.
	want := []struct {
		credential string
		asked      bool
	}{{"key", true}, {"ticket (short)", false}, {"ticket (short)", false}, {"ticket (short)", true},
		{"ticket (short)", false}, {"ticket (short)", false}, {"ticket (short)", true}}
	var hs []string
	for i, w := range want {
		memGet(t, c)
		x, seen := rec.last(), m.last()
		if x.Credential != w.credential || x.Attempts != 1 || seen.asked != w.asked || seen.short != (w.credential != "key") {
			t.Fatalf("request %d: %+v, server saw short %v asked %v; want %s, asked %v", i+1, x, seen.short, seen.asked, w.credential, w.asked)
		}
		wantCookieValue(t, fmt.Sprintf("request %d", i+1), seen.cookie, w.credential)
		_, v, _ := strings.Cut(seen.cookie, "=")
		hs = append(hs, v[:min(len(v), shortB64Len)])
	}
	// The ticket of request 1 serves requests 2–4, the one of request 4
	// (which asked) serves 5–7.
	if hs[1] != hs[2] || hs[2] != hs[3] || hs[3] == hs[4] || hs[4] != hs[5] || hs[5] != hs[6] {
		t.Fatalf("h on the wire: %v", hs)
	}
}

func TestTransportShortTicketOfAForgottenTicketKey(t *testing.T) {
	m, c, rec := shortMemServer(t)
	memGet(t, c)
	memGet(t, c)
	// The server forgets its ticket key (a new one): the held ticket is
	// no_cookie, answered 400 malformed; the client drops it and goes
	// again with its cached key, asking for a new short ticket.
	m.srv.ticket = &TicketKey{TID: KID{10}, Key: [32]byte{10}}
	before := m.outer.Load()
	memGet(t, c)
	if x := rec.last(); x.Attempts != 2 || x.Credential != "key" || m.outer.Load()-before != 2 || !m.last().asked {
		t.Fatalf("after the ticket key changed: %+v, %d outer requests, asked %v", x, m.outer.Load()-before, m.last().asked)
	}
	memGet(t, c)
	if x := rec.last(); x.Attempts != 1 || x.Credential != "ticket (short)" {
		t.Fatalf("the new short ticket: %+v", x)
	}
	// The kex key the ticket key came with is gone (the ticket key still
	// held): unknown-key, whose certificates the retry uses.
	other := KID{11}
	m.srv.ticketKID = &other
	memGet(t, c)
	if x := rec.last(); x.Attempts != 2 || x.Credential != "key" {
		t.Fatalf("after the kex key went: %+v", x)
	}
}

func TestTransportRefusedShortTicketWithAStreamedBody(t *testing.T) {
	m, c, _ := shortMemServer(t)
	memGet(t, c)
	m.srv.ticket = &TicketKey{TID: KID{10}, Key: [32]byte{10}}
	// A body that cannot be read again cannot be retried: no_cookie, and
	// the ticket is gone for the next call.
	_, err := memFetch(t, c, "POST", &onceReader{r: strings.NewReader("payload")}, 7)
	wantCode(t, err, CodeNoCookie)
	before := m.outer.Load()
	got, err := memFetch(t, c, "POST", &onceReader{r: strings.NewReader("payload")}, 7)
	if err != nil || !strings.HasPrefix(got, "POST /path?q=1 7 ") || m.outer.Load()-before != 1 || m.last().short {
		t.Fatalf("the next call: %q %v", got, err)
	}
}

func TestTransportHybridShortTickets(t *testing.T) {
	m := withHybrid(t, newMemServer(t, shortStart), false)
	m.shortTickets = true
	base := serveMem(t, m)
	tr, rec := hybridClient(m, Options{PQ: PQRequire})
	for i, want := range []string{"key", "ticket (short)", "ticket (short)"} {
		got, err := hybridFetch(t, tr, "POST", base+"/t", bytes.Repeat([]byte("x"), 3000))
		if err != nil || !strings.HasPrefix(got, "POST /t 3000 ") {
			t.Fatalf("request %d: %q %v", i+1, got, err)
		}
		wantExchange(t, fmt.Sprintf("request %d", i+1), rec.last(), 2, want, "POST", 1)
		if seen := m.last(); !seen.hybrid || seen.short != (i > 0) {
			t.Fatalf("request %d: the server took hybrid %v, short %v", i+1, seen.hybrid, seen.short)
		}
		wantCookieValue(t, fmt.Sprintf("request %d", i+1), m.last().cookie, want)
	}
	// No ciphertext with the ticket: the body is the sealed stream alone.
	if n := m.lastBodyLen.Load(); n >= KemCiphertextLen+3000 {
		t.Fatalf("a short-ticket request carried %d bytes", n)
	}
}

func TestTransportTokenDemandIsMetByOneRetry(t *testing.T) {
	// A server that demands tokens (spec §8.4) and issues short tickets
	// (R = 3, so they are renewed along the way) or, with short tickets
	// off, v1 tickets: the first side effect takes two attempts, the retry
	// under the ticket that came with the 425; every later one presents
	// the kept token under its ticket and goes through at once, renewals
	// included (their token is bound to the new ticket's key).
	for _, v1 := range []bool{false, true} {
		m := newMemServer(t, shortStart)
		m.shortTickets, m.issueTickets = !v1, v1
		m.tokenSecret = []byte("token secret of the memory server")
		rec := &recorder{}
		c := memClient(m, Options{ShortTickets: ShortPolicy{Reuse: 3}, NoShortTickets: v1, Observe: rec.observe})
		credential := map[bool]string{false: "ticket (short)", true: "ticket"}[v1]
		for i := 0; i < 8; i++ {
			before := m.outer.Load()
			got, err := memFetch(t, c, "POST", strings.NewReader("payload"), 7)
			if err != nil || !strings.HasPrefix(got, "POST /path?q=1 7 ") {
				t.Fatalf("v1 %v, call %d: %q %v", v1, i+1, got, err)
			}
			attempts := map[bool]int{true: 2, false: 1}[i == 0]
			x, seen := rec.last(), m.last()
			if x.Attempts != attempts || int(m.outer.Load()-before) != attempts || x.Credential != credential || seen.short == v1 {
				t.Fatalf("v1 %v, call %d: %+v, %d outer requests, server took short %v; want %d attempts under a %s",
					v1, i+1, x, m.outer.Load()-before, seen.short, attempts, credential)
			}
			if _, ok := Get(seen.head.Fields, RandomField); !ok {
				t.Fatalf("v1 %v, call %d: no token", v1, i+1)
			}
		}
	}
}

func TestAOneShotClientDeclinesAndPresentsNoTicket(t *testing.T) {
	r := newShortRig(t, Options{OneShot: true})
	a := r.plan()
	if a.ask || !a.decline {
		t.Fatalf("ask %v, decline %v", a.ask, a.decline)
	}
	// Even a ticket that arrived anyway is not presented.
	r.answer(a)
	r.want("second request", r.plan(), nil, false)
	// An unsafe request does not decline (its token retry needs a ticket).
	req, err := http.NewRequest("POST", "http://example.test/x", nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.e.plan(context.Background(), req, "example.test", r.key, true, false)
	if err != nil {
		t.Fatal(err)
	}
	head, _, err := DecodeRequest(p.head, DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := Get(head.Fields, TicketField); ok {
		t.Fatalf("a POST of a one-shot client carries Ticket: %q", v)
	}
}
