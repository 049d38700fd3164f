package httpcrypt

// The client's decisions, without IO: which credential, profile and nonce
// an attempt uses, its inner request head and outer form (spec §4, §4.5,
// §8.4, §14.5), and what an answer means for the call (spec §11.5: retry,
// error or response). Transport.once is the thin driver around it: it
// fetches keys, sends what the engine planned, and reads the bytes the
// engine decides on, as the Python client's Engine and its drivers do.

import (
	"context"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// attempt is one outer exchange as the engine planned it.
type attempt struct {
	authority  string
	profile    int
	compact    bool
	k          SessionKey
	n0         [NonceLen]byte
	cookie     string
	credential string // "key" or "ticket": what the outer cookie carries
	echo       bool   // an hc1-admit echo rides along
	admitD     int    // the difficulty the echo solved
	head       []byte // the formatted inner request head
	exact      int64  // the inner body length, -1 when unknown
}

// plan chooses the credential (a ticket, or a key pair per the policy),
// the profile and n0 of an attempt on key server, solves an admission
// puzzle when the host asked for one (CPU work, bounded by ctx), and
// formats the inner head of req. noBody: the body is nil or http.NoBody.
func (t *Transport) plan(ctx context.Context, req *http.Request, authority string, server *DiscoveredKey, noBody bool, ownDate bool) (*attempt, error) {
	now := t.now()
	var ticket *Ticket
	var ticketKey SessionKey
	var own *KexSecret
	var offset int64
	var token string
	var tokenKey SessionKey
	var admit *AdmitCookie
	var admitD int
	t.host(authority, func(h *hostState) {
		if h.admit != nil && now < h.admitAt+AdmitEchoSeconds {
			admit, admitD = h.admit, h.admitD
		}
		if !t.opts.NoTickets && h.ticket != nil {
			ticket, ticketKey = h.ticket, h.ticketKey
		}
		if t.opts.KeyPolicy == ReuseKeyPerHost {
			if h.own == nil {
				h.own = GenerateKexSecret()
			}
			own = h.own
		}
		offset, token, tokenKey = h.offset, h.token, h.tokenKey
	})
	a := &attempt{authority: authority, credential: "key"}
	// Profile 2 exactly when the chosen key's certificate has version 2
	// (spec §4.5), unless turned off or the authority is not sent verbatim
	// as the outer Host (which record 0 binds).
	a.profile = server.Profile()
	if t.opts.NoCompact || !boundHostOK(authority) {
		a.profile = Profile1
	}
	a.compact = a.profile == ProfileCompact
	pad := RandomPad
	if a.compact {
		pad = RandomCompactPad
	}
	var err error
	if ticket != nil {
		a.k, a.credential = ticketKey, "ticket"
		a.cookie, err = FormatCookie(ticket.TID(), ticket.Sealed(), pad(), pad())
	} else {
		if own == nil {
			own = GenerateKexSecret()
		}
		if a.k, err = own.SessionKey(server.KexPublic[:]); err != nil {
			return nil, err
		}
		a.cookie, err = FormatCookie(server.KID(), own.Public(), pad(), pad())
	}
	if err != nil {
		return nil, err
	}
	if a.compact {
		a.n0 = NewCompactNonce(now + offset) // the time travels in n0, not in Date
	} else {
		a.n0 = [NonceLen]byte(randomBytes(NonceLen))
	}
	if ticket == nil && admit != nil {
		// Spec §14.5: a key request to a host that challenged us in the
		// last 25 s carries the cookie with a solution for this n0.
		sol, err := SolvePuzzle(ctx, admit, &a.n0, admitD)
		if err != nil {
			return nil, err
		}
		a.cookie += "; " + AdmitCookieName + "=" + FormatAdmitEcho(admit, sol)
		a.echo, a.admitD = true, admitD
	}
	a.exact = -1
	switch {
	case noBody:
		a.exact = 0
	case req.ContentLength > 0:
		a.exact = req.ContentLength
	}
	a.head = t.innerHead(req, a, now+offset, ownDate, token, tokenKey)
	return a, nil
}

// innerHead formats the inner request: Host, the caller's fields (every
// one the service needs travels here, erratum E1), a Date at the corrected
// time, Content-Length, and the tokens of spec §8.4. Profile 2 sends no
// Date (the time is in n0) and no Host (the outer one is bound), except a
// Host the caller set apart from the URL's.
func (t *Transport) innerHead(req *http.Request, a *attempt, date int64, ownDate bool, token string, tokenKey SessionKey) []byte {
	head := RequestHead{Method: req.Method, Target: req.URL.RequestURI()}
	if head.Method == "" {
		head.Method = http.MethodGet
	}
	hostValue := req.Host
	if hostValue == "" {
		hostValue = a.authority
	}
	if !a.compact || hostValue != a.authority {
		head.Fields = append(head.Fields, Field{"Host", hostValue})
	}
	if a.compact {
		ownDate = false // a caller's Date is passed on, not judged
	}
	names := make([]string, 0, len(req.Header))
	for n := range req.Header {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if isForbidden(n) || strings.EqualFold(n, "content-length") || strings.EqualFold(n, "host") ||
			(ownDate && strings.EqualFold(n, "date")) {
			continue
		}
		for _, v := range req.Header[n] {
			head.Fields = append(head.Fields, Field{n, v})
		}
	}
	if !a.compact && (ownDate || req.Header.Get("Date") == "") {
		head.Fields = append(head.Fields, Field{"Date", FormatDate(date)})
	}
	if a.exact > 0 || a.exact == 0 && (req.Method == "POST" || req.Method == "PUT") {
		head.Fields = append(head.Fields, Field{"Content-Length", strconv.FormatInt(a.exact, 10)})
	}
	if isUnsafe(head.Method) {
		// A token bound to this very session key proves an earlier round
		// trip; a fresh Client-Random asks for the next one (spec §8.4).
		if token != "" && tokenKey == a.k {
			head.Fields = append(head.Fields, Field{RandomField, token})
		}
		_, cr := NewClientRandom()
		head.Fields = append(head.Fields, Field{ClientRandomField, cr})
	}
	return head.Format(nil)
}

// getForm says whether the attempt goes as a GET: allowed, the body's
// length known, and the request line below its bound (spec §4.1).
func (t *Transport) getForm(a *attempt) bool {
	return !t.opts.NoGetForm && a.exact >= 0 && FitsGetFormProfile(t.mount, len(a.head)+int(a.exact)+64, a.profile)
}

// sealer is the request sealer of the attempt's profile.
func (a *attempt) sealer() (*Sealer, error) {
	if a.compact {
		return NewCompactRequestSealer(a.k, a.n0, a.authority)
	}
	return NewRequestSealer(a.k, a.n0), nil
}

// getTarget is the GET-form target carrying the sealed stream.
func (t *Transport) getTarget(a *attempt, stream []byte) string {
	if a.compact {
		return t.mount.CompactGetTarget(&a.n0, stream)
	}
	return t.mount.GetTarget(&a.n0, stream)
}

// noncePath is the POST-form target.
func (t *Transport) noncePath(a *attempt) string {
	if a.compact {
		return t.mount.CompactNoncePath(&a.n0)
	}
	return t.mount.NoncePath(&a.n0)
}

// opener opens the answer of the attempt.
func (t *Transport) opener(a *attempt) *Opener {
	if a.compact {
		return NewCompactResponseOpener(a.k, a.n0, t.limits.MaxRecord)
	}
	return NewResponseOpener(a.k, a.n0, t.limits.MaxRecord)
}

// answered keeps the ticket and the token an authenticated inner head
// carries, bound to the attempt's session key.
func (t *Transport) answered(a *attempt, h *ResponseHead) {
	if v, ok := Get(h.Fields, TicketField); ok {
		if tic, err := ParseTicketField(v); err == nil {
			t.host(a.authority, func(hs *hostState) { hs.ticket, hs.ticketKey = tic, a.k })
		}
	}
	if v, ok := Get(h.Fields, RandomField); ok {
		t.host(a.authority, func(hs *hostState) { hs.token, hs.tokenKey = v, a.k })
	}
}

// mayBeProblem says whether an inner answer may be a protocol problem,
// whose (small, authenticated) body must be read to decide.
func mayBeProblem(h *ResponseHead) bool {
	ctype, _ := Get(h.Fields, "content-type")
	return h.Status == 425 || strings.EqualFold(strings.TrimSpace(ctype), contentTypeProblem)
}

// judgeProblem decides on a sealed problem document: stale (the clock
// offset is corrected from the inner Date) and token-required are
// retried once; other urn:httpcrypt: problems are errors; ok false: the
// application's own document, a response like any other.
func (t *Transport) judgeProblem(a *attempt, h *ResponseHead, body []byte) (out outcome, ok bool, err error) {
	p, perr := ParseProblem(body)
	if perr != nil || !strings.HasPrefix(p.Type, "urn:httpcrypt:") {
		return done, false, nil
	}
	switch p.Type {
	case ProblemStale:
		if d, ok := Get(h.Fields, "date"); ok {
			if server, err := ParseDate(d); err == nil {
				local := t.now()
				t.host(a.authority, func(hs *hostState) { hs.offset = server - local })
			}
		}
		return retryStale, true, nil
	case ProblemTokenRequired:
		return retryToken, true, nil
	}
	code := codeForProblem(p.Type)
	if p.Type == ProblemTooLarge {
		code = CodeRecordTooLarge // sealed: a record above the server's maximum (spec §4.4)
	}
	return done, true, &Error{Code: code, Type: p.Type, Status: h.Status, Authenticated: true}
}

// refusal decides on a non-200 outer answer (unauthenticated, so only a
// hint): an admission challenge stores its cookie for the host, busy
// sets the wait, unknown-key takes the problem's certificates (verified
// in authenticated mode); all three are retried. Anything else is an
// error. retryAfter is the outer Retry-After field.
func (t *Transport) refusal(a *attempt, status int, retryAfter string, body []byte, cs *call) (outcome, error) {
	p, _ := ParseProblem(body)
	if p == nil {
		return done, &Error{Code: CodeRefused, Status: status}
	}
	if status == http.StatusTooManyRequests && p.Type == ProblemAdmission {
		cs.challenges++
		c, err := ParseAdmitCookie(p.Admit)
		if err != nil {
			return done, &Error{Code: CodeBadAdmission, Type: p.Type, Status: status}
		}
		// The server checks the cookie's own difficulty byte (its MAC
		// covers it); the member should equal it. Solve for the larger.
		d := max(p.Difficulty, c.Difficulty())
		if d > MaxClientDifficulty {
			return done, &Error{Code: CodeBadAdmission, Type: p.Type, Status: status}
		}
		now := t.now()
		t.host(a.authority, func(h *hostState) {
			h.admit, h.admitD, h.admitAt = &c, d, now
			if a.credential == "ticket" {
				// A §14 server never challenges a ticket; one that does
				// wants a key agreement: go again with a key.
				h.ticket = nil
			}
		})
		return retryAdmission, nil
	}
	if status == http.StatusTooManyRequests && p.Type == ProblemBusy {
		cs.busy++
		secs := p.RetryAfter
		if secs < 0 {
			if n, err := strconv.Atoi(strings.TrimSpace(retryAfter)); err == nil && n >= 0 {
				secs = n
			} else {
				secs = 1
			}
		}
		cs.busyWait = time.Duration(min(secs, MaxBusyWaitSeconds)) * time.Second
		return retryBusy, nil
	}
	if p.Type == ProblemUnknownKey {
		var certs []*KeyCert
		for _, l := range p.Certs {
			if c, err := ParseCertText(l); err == nil {
				certs = append(certs, c)
			}
		}
		keys, err := t.acceptCerts(certs)
		now := t.now()
		t.host(a.authority, func(h *hostState) {
			h.ticket = nil
			if err == nil {
				h.keys, h.fetched = keys, now
			} else {
				h.keys = nil // the retry goes through OPTIONS again
			}
		})
		return retryUnknownKey, nil
	}
	code := CodeRefused
	if p.Type == ProblemTooLarge {
		code = CodeBodyTooLarge
	}
	return done, &Error{Code: code, Type: p.Type, Status: status}
}

// exchange is what a middlebox saw of the attempt (Options.Observe).
func (a *attempt) exchange(outer *http.Request, status int, cs *call) Exchange {
	x := Exchange{Credential: a.credential, Attempts: cs.attempt, OuterMethod: outer.Method,
		OuterURL: outer.URL.String(), Profile: a.profile, Status: status, Challenges: cs.challenges, Busy: cs.busy, Echo: a.echo}
	if a.echo {
		x.Difficulty = a.admitD
	}
	return x
}
