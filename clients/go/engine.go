package httpcrypt

// The client's decisions, without IO: per-host state (keys and when they
// were fetched, the reused key pair, the last ticket of each form and the
// token, the clock offset, the admission cookie, the suite-2 keys and pin),
// which key, credential, profile and nonce an attempt uses, its inner
// request head and outer form (spec §4, §4.5, §7.3, §8.4, §14.5,
// spec/hybrid.md H3), and what an answer means for the call (spec §11.5:
// retry, error or response). Its key decisions, both suites, are in
// engine_keys.go; its ticket decisions (which ticket, when to ask for a
// short one) in engine_tickets.go. Transport
// (transport.go) is the thin driver around it: it fetches keys, sends what
// the engine planned, and reads the bytes the engine decides on, as the
// Python client's Engine and its drivers do.

import (
	"context"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// engine is the client's state per host and its decisions; it does no
// IO. Transport embeds it.
type engine struct {
	opts     Options
	mount    Mount
	identity *Identity
	limits   Limits

	mu    sync.Mutex
	hosts map[string]*hostState
	// kems caches encapsulation keys by their hash (spec/hybrid.md H4): a
	// rotated kex key whose certificate names a known hash needs no fetch.
	kems map[KemHash]*KemPublic
}

type hostState struct {
	keys      []DiscoveredKey
	fetched   int64
	maxAge    int64 // 0: no expiry
	own       *KexSecret
	ticket    *Ticket
	ticketKey SessionKey
	token     string
	tokenKey  SessionKey
	offset    int64
	// admit is the admission cookie the host handed out (spec §14.5),
	// echoed on key requests until admitAt + 25 s; admitD its difficulty.
	admit   *AdmitCookie
	admitD  int
	admitAt int64
	// ticketHybrid: the ticket was issued in a suite-2 session.
	ticketHybrid bool
	// short is the last short ticket (spec §7.3), kept apart from the v1 one.
	short *heldShort
	hybridState
}

// newEngine takes the options with defaults filled in; the mount and the
// identity are parsed by NewTransport, which reports them as config errors.
func newEngine(opts Options) *engine {
	e := &engine{opts: opts, hosts: map[string]*hostState{}, kems: map[KemHash]*KemPublic{}, limits: opts.Limits.orDefault()}
	if e.opts.RecordSize <= 0 {
		e.opts.RecordSize = DefaultRecordSize
	}
	if e.opts.RecordSize > RecordFloor {
		e.opts.RecordSize = RecordFloor // every receiver accepts 16 KiB records
	}
	return e
}

func (e *engine) now() int64 {
	if e.opts.Now != nil {
		return e.opts.Now().Unix()
	}
	return time.Now().Unix()
}

func (e *engine) host(authority string, f func(h *hostState)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	h := e.hosts[authority]
	if h == nil {
		h = &hostState{offset: int64(e.opts.ClockOffset / time.Second)}
		e.hosts[authority] = h
	}
	f(h)
}

// ---- attempts ----

// attempt is one outer exchange as the engine planned it.
type attempt struct {
	authority  string
	profile    int
	compact    bool
	k          SessionKey
	n0         [NonceLen]byte
	cookie     string
	credential string // "key", "ticket" or "ticket (short)": what the outer cookie carries
	echo       bool   // an hc1-admit echo rides along
	admitD     int    // the difficulty the echo solved
	head       []byte // the formatted inner request head
	exact      int64  // the inner body length, -1 when unknown
	// short is the short ticket presented (spec §7.3), nil for another
	// credential; ask: the inner head asks for a new one.
	short *ShortTicket
	ask   bool
	// decline: a one-shot client's safe request declines any ticket.
	decline bool
	// hybrid: a suite-2 session (a fresh hybrid key, or a ticket issued in
	// one); ctM the ML-KEM ciphertext sent before the stream (fresh key).
	hybrid bool
	ctM    []byte
}

// plan chooses the credential (a short or v1 ticket, a hybrid agreement, or
// a key pair per the policy), whether to ask for a short ticket, the
// profile and n0 of an attempt on key server, solves an admission puzzle
// when the host asked for one (CPU work, bounded by ctx), and formats the
// inner head of req. noBody: the body is nil or http.NoBody.
func (e *engine) plan(ctx context.Context, req *http.Request, authority string, server *serverKey, noBody bool, ownDate bool) (*attempt, error) {
	now := e.now()
	var tc ticketChoice
	var own *KexSecret
	var offset int64
	var token string
	var tokenKey SessionKey
	var admit *AdmitCookie
	var admitD int
	e.host(authority, func(h *hostState) {
		if h.admit != nil && now < h.admitAt+AdmitEchoSeconds {
			admit, admitD = h.admit, h.admitD
		}
		tc = e.chooseTicket(h, server, now)
		if e.opts.KeyPolicy == ReuseKeyPerHost && server.hybrid == nil {
			if h.own == nil {
				h.own = GenerateKexSecret()
			}
			own = h.own
		}
		offset, token, tokenKey = h.offset, h.token, h.tokenKey
	})
	a := &attempt{authority: authority, credential: "key", ask: tc.ask, decline: tc.decline}
	// Profile 2 exactly when the chosen key's certificate has version 2
	// (spec §4.5), unless turned off or the authority is not sent verbatim
	// as the outer Host (which record 0 binds). Suite 2 uses the v1 layout
	// (spec/hybrid.md H3).
	a.profile = Profile1
	if server.v1 != nil {
		a.profile = server.v1.Profile()
	}
	if e.opts.NoCompact || !boundHostOK(authority) {
		a.profile = Profile1
	}
	a.compact = a.profile == ProfileCompact
	pad := RandomPad
	if a.compact {
		pad = RandomCompactPad
	}
	var err error
	switch {
	case tc.short != nil:
		// spec §7.3: tid and h in the cookie, the request sealed under k'.
		a.k, a.credential, a.hybrid, a.short = tc.short.Key, "ticket (short)", tc.hybrid, tc.short
		a.cookie, err = FormatCookie(tc.short.TID, tc.short.H[:], pad(), pad())
	case tc.v1 != nil:
		a.k, a.credential, a.hybrid = tc.v1Key, "ticket", tc.hybrid
		a.cookie, err = FormatCookie(tc.v1.TID(), tc.v1.Sealed(), pad(), pad())
	case server.hybrid != nil:
		// X-Wing's ct_X is ephemeral: a fresh X25519 key whatever the policy.
		var ag *HybridAgreement
		if ag, err = NewHybridAgreement(server.hybrid.Cert, server.hybrid.Kem, GenerateKexSecret()); err != nil {
			return nil, err
		}
		a.k, a.ctM, a.hybrid = ag.Key, ag.CtM, true
		a.cookie, err = FormatCookie(server.hybrid.Cert.KID(), ag.CtX[:], pad(), pad())
	default:
		if own == nil {
			own = GenerateKexSecret()
		}
		if a.k, err = own.SessionKey(server.v1.KexPublic[:]); err != nil {
			return nil, err
		}
		a.cookie, err = FormatCookie(server.v1.KID(), own.Public(), pad(), pad())
	}
	if err != nil {
		return nil, err
	}
	if a.compact {
		a.n0 = NewCompactNonce(now + offset) // the time travels in n0, not in Date
	} else {
		a.n0 = [NonceLen]byte(randomBytes(NonceLen))
	}
	if tc.short == nil && tc.v1 == nil && admit != nil {
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
	a.head = e.innerHead(req, a, now+offset, ownDate, token, tokenKey)
	return a, nil
}

// innerHead formats the inner request: Host, the caller's fields (every
// one the service needs travels here, erratum E1), a Date at the corrected
// time, Content-Length, the ask for a short ticket (spec §7.3), and the
// tokens of spec §8.4. Profile 2 sends no Date (the time is in n0) and no
// Host (the outer one is bound), except a Host the caller set apart from
// the URL's.
func (e *engine) innerHead(req *http.Request, a *attempt, date int64, ownDate bool, token string, tokenKey SessionKey) []byte {
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
	if a.ask {
		head.Fields = append(head.Fields, Field{TicketField, AskShort})
	} else if a.decline && !isUnsafe(head.Method) {
		// An unsafe request's token-required retry presents the ticket
		// that came with the refusal (spec §8.4), so it does not decline.
		head.Fields = append(head.Fields, Field{TicketField, Decline})
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
// length known, and the request line below its bound (spec §4.1), the
// ML-KEM ciphertext of a hybrid request counted (spec/hybrid.md H3).
func (e *engine) getForm(a *attempt) bool {
	return !e.opts.NoGetForm && a.exact >= 0 && FitsGetFormProfile(e.mount, len(a.ctM)+len(a.head)+int(a.exact)+64, a.profile)
}

// sealer is the request sealer of the attempt's profile.
func (a *attempt) sealer() (*Sealer, error) {
	if a.compact {
		return NewCompactRequestSealer(a.k, a.n0, a.authority)
	}
	return NewRequestSealer(a.k, a.n0), nil
}

// getTarget is the GET-form target carrying the sealed stream (after the
// ML-KEM ciphertext of a hybrid request).
func (e *engine) getTarget(a *attempt, stream []byte) string {
	if a.compact {
		return e.mount.CompactGetTarget(&a.n0, stream)
	}
	if len(a.ctM) > 0 {
		stream = append(append([]byte(nil), a.ctM...), stream...)
	}
	return e.mount.GetTarget(&a.n0, stream)
}

// noncePath is the POST-form target.
func (e *engine) noncePath(a *attempt) string {
	if a.compact {
		return e.mount.CompactNoncePath(&a.n0)
	}
	return e.mount.NoncePath(&a.n0)
}

// opener opens the answer of the attempt.
func (e *engine) opener(a *attempt) *Opener {
	if a.compact {
		return NewCompactResponseOpener(a.k, a.n0, e.limits.MaxRecord)
	}
	return NewResponseOpener(a.k, a.n0, e.limits.MaxRecord)
}

// ---- answers ----

type outcome int

const (
	done outcome = iota
	retryUnknownKey
	retryStale
	retryToken
	retryAdmission // outer 429 urn:httpcrypt:admission: the cookie is stored
	retryBusy      // outer 429 urn:httpcrypt:busy: wait, then again
	retryHybrid    // outer 400 urn:httpcrypt:hybrid-required to a v1 attempt: look for suite 2
	retryShort     // outer 400 urn:httpcrypt:malformed to a short ticket: dropped, again with a key
)

// answered keeps the ticket (either form) and the token an authenticated
// inner head carries, bound to the attempt's session key (and its suite:
// a ticket of a hybrid session carries the hybrid key forward). A token
// that comes with a short ticket is bound to that ticket's key k' instead
// (spec §7.3, §8.4): the next request presents the ticket and runs under
// k', so a token-required answer's single retry carries it.
func (e *engine) answered(a *attempt, h *ResponseHead) {
	ticket, hasTicket := Get(h.Fields, TicketField)
	token, hasToken := Get(h.Fields, RandomField)
	if !hasTicket && !hasToken {
		return
	}
	e.host(a.authority, func(hs *hostState) {
		tokenKey := a.k
		if hasTicket {
			if st := hs.tookTicket(ticket, a); st != nil {
				tokenKey = st.Key
			}
		}
		if hasToken {
			hs.token, hs.tokenKey = token, tokenKey
		}
	})
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
func (e *engine) judgeProblem(a *attempt, h *ResponseHead, body []byte) (out outcome, ok bool, err error) {
	p, perr := ParseProblem(body)
	if perr != nil || !strings.HasPrefix(p.Type, "urn:httpcrypt:") {
		return done, false, nil
	}
	switch p.Type {
	case ProblemStale:
		if d, ok := Get(h.Fields, "date"); ok {
			if server, err := ParseDate(d); err == nil {
				local := e.now()
				e.host(a.authority, func(hs *hostState) { hs.offset = server - local })
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
// in authenticated mode), a 400 malformed to a short ticket drops it; all
// four are retried. Anything else is an error. retryAfter is the outer
// Retry-After field.
func (e *engine) refusal(a *attempt, status int, retryAfter string, body []byte, cs *call) (outcome, error) {
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
		now := e.now()
		e.host(a.authority, func(h *hostState) {
			h.admit, h.admitD, h.admitAt = &c, d, now
			if a.credential == "ticket" {
				// A §14 server never challenges a ticket; one that does
				// wants a key agreement: go again with a key.
				h.ticket = nil
			}
			if a.short != nil {
				h.dropShort(a.short)
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
	if p.Type == ProblemHybridRequired && e.hybridRequired(a) {
		return retryHybrid, nil
	}
	if a.short != nil && status == http.StatusBadRequest && p.Type == ProblemMalformed {
		// spec §7.3: a short ticket under a ticket key the server no longer
		// holds is no_cookie (the contract's cookie shape, §11.3, does not
		// cover short tickets): drop it and go again with a key, as after
		// unknown-key.
		e.host(a.authority, func(h *hostState) { h.dropShort(a.short) })
		return retryShort, nil
	}
	if p.Type == ProblemUnknownKey {
		var certs []*KeyCert
		for _, l := range p.Certs {
			if c, err := ParseCertText(l); err == nil {
				certs = append(certs, c)
			}
		}
		e.hybridUnknownKey(a, p)
		keys, err := e.acceptCerts(certs)
		now := e.now()
		e.host(a.authority, func(h *hostState) {
			h.ticket, h.short = nil, nil
			if err == nil {
				h.keys, h.fetched = keys, now
			} else {
				h.keys = nil // the retry goes through OPTIONS again
			}
		})
		return retryUnknownKey, nil
	}
	code := CodeRefused
	switch p.Type {
	case ProblemTooLarge:
		code = CodeBodyTooLarge
	case ProblemHybridRequired:
		code = CodeHybridRequired
	}
	return done, &Error{Code: code, Type: p.Type, Status: status}
}

// exchange is what a middlebox saw of the attempt (Options.Observe).
func (a *attempt) exchange(outer *http.Request, status int, cs *call) Exchange {
	x := Exchange{Credential: a.credential, Attempts: cs.attempt, OuterMethod: outer.Method,
		OuterURL: outer.URL.String(), Suite: 1, Profile: a.profile, Status: status, Challenges: cs.challenges, Busy: cs.busy, Echo: a.echo}
	if a.echo {
		x.Difficulty = a.admitD
	}
	if a.hybrid {
		x.Suite = SuiteHybrid
	}
	return x
}

// ---- the call ----

// call is the state of one RoundTrip across its attempts.
type call struct {
	start      time.Time // when RoundTrip began (a timeout's budget counts from it)
	replayable bool      // the body can be sent again (nil, http.NoBody or GetBody)
	attempt    int
	ownDate    bool
	challenges int
	busy       int
	busyWait   time.Duration
	retried    map[outcome]bool
}

func newCall(start time.Time, replayable bool) *call {
	return &call{start: start, replayable: replayable, retried: map[outcome]bool{}}
}

// follow decides whether the call goes on after an attempt that asked
// for a retry (spec §11.5, §14.5): nil to send again (after busyWait for
// retryBusy), else the call's error. unknown-key, stale, token-required
// and a refused short ticket are retried once each; admission challenges
// and busy answers together MaxAdmissionRetries times; nothing without a
// replayable body.
func (cs *call) follow(out outcome) error {
	if out == retryAdmission || out == retryBusy {
		final := &Error{Code: CodeAdmissionRequired, Type: ProblemAdmission, Status: http.StatusTooManyRequests}
		if out == retryBusy {
			final = &Error{Code: CodeBusy, Type: ProblemBusy, Status: http.StatusTooManyRequests}
		}
		if !cs.replayable || cs.challenges+cs.busy > MaxAdmissionRetries {
			return final
		}
		return nil
	}
	if cs.retried[out] || !cs.replayable {
		return map[outcome]error{
			retryUnknownKey: &Error{Code: CodeUnknownKey, Type: ProblemUnknownKey, Status: 400},
			retryStale:      &Error{Code: CodeStale, Type: ProblemStale, Status: 425, Authenticated: true},
			retryToken:      &Error{Code: CodeTokenRequired, Type: ProblemTokenRequired, Status: 425, Authenticated: true},
			retryHybrid:     &Error{Code: CodeHybridRequired, Type: ProblemHybridRequired, Status: 400},
			retryShort:      &Error{Code: CodeNoCookie, Type: ProblemMalformed, Status: 400},
		}[out]
	}
	cs.retried[out] = true
	if out == retryStale {
		cs.ownDate = true
	}
	return nil
}

func isUnsafe(m string) bool {
	switch m {
	case "GET", "HEAD", "OPTIONS", "TRACE":
		return false
	}
	return true
}
