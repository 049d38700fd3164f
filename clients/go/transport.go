package httpcrypt

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// KeyPolicy says which client key pair a request uses.
type KeyPolicy int

const (
	// FreshKeyPerRequest: a new X25519 key pair for every request (unlinkable).
	FreshKeyPerRequest KeyPolicy = iota
	// ReuseKeyPerHost: one key pair per host, so the server's session cache applies.
	ReuseKeyPerHost
)

// Options configure a Transport. The zero value is the Rust client's
// default: opportunistic mode, empty mount, GET form for small requests,
// tickets on, a fresh key pair per request.
type Options struct {
	// Mount is the server's HTTPCrypt path prefix (e.g. "/hc").
	Mount string
	// Identity pins the server's Ed25519 identity key (base64url):
	// authenticated mode, certificates must verify under it.
	Identity string
	// Base carries the outer requests; nil uses a new http.Transport
	// (proxy from the environment, no transparent compression, and a
	// server's early answer read after it stopped taking the body).
	Base http.RoundTripper
	// KeyPolicy chooses fresh or per-host client key pairs.
	KeyPolicy KeyPolicy
	// NoGetForm always uses the POST form.
	NoGetForm bool
	// NoTickets never presents tickets the server issued.
	NoTickets bool
	// NoCompact always uses the v1 request layout, even with a key whose
	// certificate has version 2 (spec §4.5 lets a client do so).
	NoCompact bool
	// RecordSize is the plaintext size of request records (default 16 KiB).
	RecordSize int
	// Limits bound the server's (hostile) responses; zero fields take defaults.
	Limits Limits
	// Now is the clock (default time.Now).
	Now func() time.Time
	// ClockOffset is added to the clock for the inner Date (v1) or the
	// time in n0 (profile 2) until a stale answer corrects it (tests use
	// it to simulate a wrong clock).
	ClockOffset time.Duration
	// Observe, if set, is called after every exchange that produced an
	// authenticated response.
	Observe func(Exchange)
}

// Exchange describes what a middlebox saw of one call.
type Exchange struct {
	// Credential is what the outer cookie carried: "key" or "ticket".
	Credential string
	// Attempts counts the outer requests (2 after a retry).
	Attempts int
	// OuterMethod is GET or POST.
	OuterMethod string
	// OuterURL is the outer request URL.
	OuterURL string
	// Profile is the request profile of the last attempt: 1, or 2 (the
	// compact layout of spec §4.5, target segment `2{b64u(n0)}`).
	Profile int
	// Status is the inner status.
	Status int
	// Challenges and Busy count the outer 429 answers of spec §14 the call
	// met (urn:httpcrypt:admission, urn:httpcrypt:busy).
	Challenges, Busy int
	// Echo says whether the last attempt carried an hc1-admit echo, and
	// Difficulty the puzzle difficulty it solved.
	Echo       bool
	Difficulty int
}

// Transport is an http.RoundTripper that sends every request through
// HTTPCrypt. Safe for concurrent use.
type Transport struct {
	opts     Options
	mount    Mount
	identity *Identity
	confErr  error
	base     http.RoundTripper
	limits   Limits

	mu    sync.Mutex
	hosts map[string]*hostState

	// sleep waits on urn:httpcrypt:busy (a hook for in-memory tests).
	sleep func(ctx context.Context, d time.Duration) error
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
}

// NewTransport makes a Transport. An unusable option (bad mount or
// identity) makes every request fail with a config error.
func NewTransport(opts Options) *Transport {
	t := &Transport{opts: opts, hosts: map[string]*hostState{}, base: opts.Base, limits: opts.Limits.orDefault(), sleep: sleepCtx}
	if t.base == nil {
		t.base = &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			DialContext:         dialEarlyAnswer,
			MaxIdleConnsPerHost: 16,
			DisableCompression:  true,
			IdleConnTimeout:     90 * time.Second,
		}
	}
	var err error
	if t.mount, err = NewMount(opts.Mount); err != nil {
		t.confErr = &Error{Code: CodeConfig, Err: errors.New("bad mount " + strconv.Quote(opts.Mount))}
	}
	if opts.Identity != "" {
		if t.identity, err = ParseIdentityB64(opts.Identity); err != nil {
			t.confErr = &Error{Code: CodeConfig, Err: errors.New("bad identity: " + err.Error())}
		}
	}
	if t.opts.RecordSize <= 0 {
		t.opts.RecordSize = DefaultRecordSize
	}
	if t.opts.RecordSize > RecordFloor {
		t.opts.RecordSize = RecordFloor // every receiver accepts 16 KiB records
	}
	return t
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return &Error{Code: CodeTransport, Err: ctx.Err()}
	}
}

func (t *Transport) now() int64 {
	if t.opts.Now != nil {
		return t.opts.Now().Unix()
	}
	return time.Now().Unix()
}

func (t *Transport) host(authority string, f func(h *hostState)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.hosts[authority]
	if h == nil {
		h = &hostState{offset: int64(t.opts.ClockOffset / time.Second)}
		t.hosts[authority] = h
	}
	f(h)
}

// CloseIdleConnections closes idle connections of the base transport.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// ForgetKeys drops the cached server keys and tickets of authority.
func (t *Transport) ForgetKeys(authority string) {
	t.host(authority, func(h *hostState) { h.keys, h.ticket = nil, nil })
}

// SetKeys installs server keys for authority (e.g. learnt from DNS).
func (t *Transport) SetKeys(authority string, keys []DiscoveredKey) {
	now := t.now()
	t.host(authority, func(h *hostState) { h.keys, h.fetched, h.maxAge = keys, now, 0 })
}

func limitedRead(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, &Error{Code: CodeTransport, Err: err}
	}
	if int64(len(b)) > limit {
		return nil, ErrBodyTooLarge
	}
	return b, nil
}

// RefreshKeys fetches the certificates of authority with OPTIONS
// {mount}/, checks them in authenticated mode and caches them for max-age.
// An answer without certificates is not_httpcrypt (no_endpoint for 404).
func (t *Transport) RefreshKeys(ctx context.Context, authority string) ([]DiscoveredKey, error) {
	return t.refreshKeys(ctx, authority, time.Now())
}

// refreshKeys is RefreshKeys within a call that began at start.
func (t *Transport) refreshKeys(ctx context.Context, authority string, start time.Time) ([]DiscoveredKey, error) {
	var pt phaseTracker
	req, err := http.NewRequestWithContext(pt.traced(ctx), http.MethodOptions, "http://"+authority+t.mount.OptionsPath(), nil)
	if err != nil {
		return nil, &Error{Code: CodeConfig, Err: err}
	}
	req.Header.Set("User-Agent", "")
	rsp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, diagnose(ctx, err, authority, pt.phase(), start)
	}
	defer rsp.Body.Close()
	if rsp.StatusCode != http.StatusOK {
		return nil, t.notHTTPCrypt(authority, rsp.StatusCode)
	}
	maxAge := int64(0)
	for _, d := range strings.Split(rsp.Header.Get("Cache-Control"), ",") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(d), "max-age="); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				maxAge = max(n, 1) // max-age=0: ask again soon, not never
			}
		}
	}
	body, err := limitedRead(rsp.Body, 64*1024)
	if err != nil {
		return nil, diagnose(ctx, err, authority, phaseReading, start)
	}
	certs, err := ParseCertList(body)
	if err != nil {
		if ct, _, _ := strings.Cut(rsp.Header.Get("Content-Type"), ";"); !strings.EqualFold(strings.TrimSpace(ct), contentTypeCerts) {
			return nil, t.notHTTPCrypt(authority, rsp.StatusCode) // e.g. a web server's 200 to OPTIONS
		}
		return nil, err
	}
	keys, err := t.acceptCerts(certs)
	if err != nil {
		return nil, err
	}
	now := t.now()
	t.host(authority, func(h *hostState) { h.keys, h.fetched, h.maxAge = keys, now, maxAge })
	return keys, nil
}

// acceptCerts keeps the certificates the client's mode accepts: all of
// them (opportunistic) or those verifying under the pinned identity.
func (t *Transport) acceptCerts(certs []*KeyCert) ([]DiscoveredKey, error) {
	if _, err := ChooseCert(certs, t.now(), t.identity); err != nil {
		if errors.Is(err, ErrBadSignature) {
			return nil, &Error{Code: CodeBadSignature, Detail: BadSignatureDetail}
		}
		return nil, err
	}
	var keys []DiscoveredKey
	for _, c := range certs {
		if t.identity == nil || c.Verify(t.identity) == nil {
			keys = append(keys, c.Key())
		}
	}
	return keys, nil
}

func (t *Transport) currentKey(ctx context.Context, authority string, start time.Time) (*DiscoveredKey, error) {
	now := t.now()
	var cached *DiscoveredKey
	t.host(authority, func(h *hostState) {
		if h.maxAge == 0 || now < h.fetched+h.maxAge {
			if k, err := ChooseKey(h.keys, now); err == nil {
				c := *k
				cached = &c
			}
		}
	})
	if cached != nil {
		return cached, nil
	}
	keys, err := t.refreshKeys(ctx, authority, start)
	if err != nil {
		return nil, err
	}
	return ChooseKey(keys, now)
}

type outcome int

const (
	done outcome = iota
	retryUnknownKey
	retryStale
	retryToken
	retryAdmission // outer 429 urn:httpcrypt:admission: the cookie is stored
	retryBusy      // outer 429 urn:httpcrypt:busy: wait, then again
)

// call is the state of one RoundTrip across its attempts.
type call struct {
	start      time.Time // when RoundTrip began (a timeout's budget counts from it)
	attempt    int
	ownDate    bool
	challenges int
	busy       int
	busyWait   time.Duration
}

func isIdempotent(m string) bool {
	switch m {
	case "GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE":
		return true
	}
	return false
}

func isUnsafe(m string) bool {
	switch m {
	case "GET", "HEAD", "OPTIONS", "TRACE":
		return false
	}
	return true
}

// closedBeforeAnswer: a pooled connection the peer closed before any
// answer (often a proxy that closes after each response).
func closedBeforeAnswer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.EPIPE) || strings.Contains(err.Error(), "server closed idle connection")
}

// RoundTrip sends req (an http:// URL: its path and query are the inner
// target) through HTTPCrypt. It retries once on unknown-key (with the
// problem's certificates), once on stale (correcting the clock from the
// inner Date), once on token-required, and once when a pooled connection
// closed before answering an idempotent request; never on replay. Retries
// need a body that can be read again (nil, http.NoBody or GetBody).
//
// Under a server's admission defence (spec §14.5) an outer 429
// urn:httpcrypt:admission stores the cookie for the host and sends the
// request again with a solved puzzle; urn:httpcrypt:busy waits
// min(retry_after, 5 s) and sends again. Both share one bound of three
// retries per call, after which the error is admission_required or busy.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.confErr != nil {
		closeBody(req)
		return nil, t.confErr
	}
	if req.URL == nil || req.URL.Scheme != "http" || req.URL.Host == "" {
		closeBody(req)
		return nil, &Error{Code: CodeConfig, Err: errors.New("HTTPCrypt needs an http:// URL with a host")}
	}
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	retried := map[outcome]bool{}
	retriedConn := false
	cs := &call{start: time.Now()}
	body := req.Body
	for attempt := 1; ; attempt++ {
		cs.attempt = attempt
		if attempt > 1 {
			if req.GetBody != nil {
				b, err := req.GetBody()
				if err != nil {
					return nil, &Error{Code: CodeConfig, Err: err}
				}
				body = b
			} else {
				body = nil
			}
		}
		rsp, out, err := t.once(req, body, cs)
		if err != nil {
			var he *Error
			if replayable && !retriedConn && isIdempotent(method) && errors.As(err, &he) &&
				he.Code == CodeTransport && he.Err != nil && closedBeforeAnswer(he.Err) {
				retriedConn = true
				continue
			}
			return nil, err
		}
		if out == done {
			return rsp, nil
		}
		if out == retryAdmission || out == retryBusy {
			final := &Error{Code: CodeAdmissionRequired, Type: ProblemAdmission, Status: http.StatusTooManyRequests}
			if out == retryBusy {
				final = &Error{Code: CodeBusy, Type: ProblemBusy, Status: http.StatusTooManyRequests}
			}
			if !replayable || cs.challenges+cs.busy > MaxAdmissionRetries {
				return nil, final
			}
			if out == retryBusy {
				if err := t.sleep(req.Context(), cs.busyWait); err != nil {
					return nil, err
				}
			}
			continue
		}
		if retried[out] || !replayable {
			return nil, map[outcome]error{
				retryUnknownKey: &Error{Code: CodeUnknownKey, Type: ProblemUnknownKey, Status: 400},
				retryStale:      &Error{Code: CodeStale, Type: ProblemStale, Status: 425, Authenticated: true},
				retryToken:      &Error{Code: CodeTokenRequired, Type: ProblemTokenRequired, Status: 425, Authenticated: true},
			}[out]
		}
		retried[out] = true
		if out == retryStale {
			cs.ownDate = true
		}
	}
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// once is one attempt: the engine plans it (engine.go), once sends it,
// reads what the engine decides on, and hands back the verified response.
func (t *Transport) once(req *http.Request, body io.ReadCloser, cs *call) (*http.Response, outcome, error) {
	ctx := req.Context()
	authority := req.URL.Host
	closeIn := func() {
		if body != nil {
			body.Close()
		}
	}
	server, err := t.currentKey(ctx, authority, cs.start)
	if err != nil {
		closeIn()
		return nil, done, err
	}
	noBody := body == nil || body == http.NoBody
	a, err := t.plan(ctx, req, authority, server, noBody, cs.ownDate)
	if err != nil {
		closeIn()
		return nil, done, err
	}
	sealer, err := a.sealer()
	if err != nil {
		closeIn()
		return nil, done, err
	}

	// The outer request; its Host is the authority, exactly the value
	// record 0 binds in profile 2.
	var outer *http.Request
	if t.getForm(a) {
		plain := a.head
		if !noBody {
			b, err := limitedRead(body, a.exact)
			body.Close()
			if err != nil {
				return nil, done, err
			}
			if int64(len(b)) != a.exact {
				return nil, done, &Error{Code: CodeConfig, Err: errors.New("request body shorter than its ContentLength")}
			}
			plain = append(plain, b...)
		}
		stream, err := SealAll(sealer, nil, plain, max(len(plain), 1))
		if err != nil {
			return nil, done, err
		}
		outer, err = http.NewRequestWithContext(ctx, http.MethodGet, "http://"+authority+t.getTarget(a, stream), nil)
		if err != nil {
			return nil, done, &Error{Code: CodeConfig, Err: err}
		}
	} else {
		sr := &sealReader{sealer: sealer, pending: a.head, body: body, recordSize: t.opts.RecordSize}
		outer, err = http.NewRequestWithContext(ctx, http.MethodPost, "http://"+authority+t.noncePath(a), sr)
		if err != nil {
			closeIn()
			return nil, done, &Error{Code: CodeConfig, Err: err}
		}
		outer.ContentLength = -1
		if a.exact >= 0 {
			outer.ContentLength = sealedLen(int64(len(a.head))+a.exact, int64(t.opts.RecordSize))
		}
		outer.Header.Set("Content-Type", contentTypeOctet)
	}
	outer.Host = authority
	outer.Header.Set("Cookie", a.cookie)
	outer.Header.Set("User-Agent", "") // net/http's default would name the client in clear (erratum E1)
	var pt phaseTracker
	outer = outer.WithContext(pt.traced(ctx))

	rsp, err := t.base.RoundTrip(outer)
	if err != nil {
		// A sealing error from the body reader stays as it is.
		return nil, done, diagnose(ctx, err, authority, pt.phase(), cs.start)
	}
	if rsp.StatusCode != http.StatusOK {
		b, _ := limitedRead(rsp.Body, 64*1024)
		rsp.Body.Close()
		out, err := t.refusal(a, rsp.StatusCode, rsp.Header.Get("Retry-After"), b, cs)
		return nil, out, err
	}

	readErr := func(err error) error { return diagnose(ctx, err, authority, phaseReading, cs.start) }
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	opened, ihead, err := openResponse(rsp.Body, t.opener(a), t.limits, method, readErr)
	if err != nil {
		rsp.Body.Close()
		return nil, done, err
	}
	t.answered(a, ihead)
	var rbody io.ReadCloser = opened
	if mayBeProblem(ihead) {
		b, err := limitedRead(opened, 64*1024)
		opened.Close()
		if err != nil {
			return nil, done, err
		}
		if out, ok, err := t.judgeProblem(a, ihead, b); ok {
			return nil, out, err
		}
		rbody = io.NopCloser(bytes.NewReader(b))
	}
	out := &http.Response{
		Status:        strconv.Itoa(ihead.Status) + " " + ihead.Reason,
		StatusCode:    ihead.Status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{},
		Body:          rbody,
		ContentLength: -1,
		Request:       req,
	}
	for _, f := range ihead.Fields {
		out.Header.Add(f.Name, f.Value)
	}
	if v, ok := Get(ihead.Fields, "content-length"); ok {
		if n, ok := parseContentLength(v); ok {
			out.ContentLength = int64(n)
		}
	}
	if t.opts.Observe != nil {
		t.opts.Observe(a.exchange(outer, ihead.Status, cs))
	}
	return out, done, nil
}

// sealedLen is the stream length of n plaintext bytes in records of rs:
// as SealAll cuts it, the FINAL record holding the last 1..rs bytes.
func sealedLen(n, rs int64) int64 {
	if n == 0 {
		return RecordOverhead
	}
	return n + (n+rs-1)/rs*RecordOverhead
}

// sealReader produces the request stream as the body is read: it fills a
// record with exactly recordSize plaintext bytes (so the outer length is
// predictable), seals it, and seals the FINAL record at the body's end.
type sealReader struct {
	sealer     *Sealer
	pending    []byte // plaintext not yet sealed
	body       io.ReadCloser
	recordSize int
	out        []byte // sealed bytes not yet returned
	eof        bool
	finished   bool
	err        error
}

func (s *sealReader) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		if s.finished {
			return 0, io.EOF
		}
		for !s.eof && len(s.pending) < s.recordSize+1 {
			if s.body == nil || s.body == http.NoBody {
				s.eof = true
				break
			}
			if cap(s.pending)-len(s.pending) < 4096 {
				np := make([]byte, len(s.pending), 2*s.recordSize+4096)
				copy(np, s.pending)
				s.pending = np
			}
			n, err := s.body.Read(s.pending[len(s.pending):cap(s.pending)])
			s.pending = s.pending[:len(s.pending)+n]
			if err == io.EOF {
				s.eof = true
			} else if err != nil {
				s.err = err
				return 0, err
			}
		}
		var err error
		s.out = s.out[:0]
		if len(s.pending) > s.recordSize || !s.eof && len(s.pending) == s.recordSize {
			s.out, err = s.sealer.Seal(s.out, s.pending[:s.recordSize])
			s.pending = s.pending[:copy(s.pending, s.pending[s.recordSize:])]
		} else if s.eof {
			s.out, err = s.sealer.Finish(s.out, s.pending)
			s.pending, s.finished = nil, true
		}
		if err != nil {
			s.err = err
			return 0, err
		}
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
}

func (s *sealReader) Close() error {
	if s.body != nil {
		return s.body.Close()
	}
	return nil
}

// openedBody is a response body that releases only verified plaintext.
type openedBody struct {
	src     io.ReadCloser
	opener  *Opener
	dec     innerDecoder
	buf     []byte
	pending []byte
	ended   bool
	err     error
	eof     bool
	// readErr names a failed read of the outer body (a timeout, a reset).
	readErr func(error) error
}

// openResponse reads until the inner head is complete and returns it with
// a reader for the rest of the body (none for the answer to a HEAD
// request or a 304, whatever their Content-Length says: erratum E2).
func openResponse(src io.ReadCloser, o *Opener, limits Limits, requestMethod string, readErr func(error) error) (*openedBody, *ResponseHead, error) {
	b := &openedBody{src: src, opener: o, dec: innerDecoder{limits: limits}, buf: make([]byte, 32*1024), readErr: readErr}
	for {
		data, err := b.next()
		if err != nil {
			return nil, nil, err
		}
		if data == nil && b.eof {
			return nil, nil, ErrMalformedInner // the stream ended inside the head
		}
		headBytes, rest, err := b.dec.receive(data)
		if err != nil {
			return nil, nil, err
		}
		if headBytes != nil {
			h, err := ParseResponseHead(headBytes, limits)
			if err != nil {
				return nil, nil, err
			}
			b.dec.setContentLength(h.Fields, isBodiless(requestMethod, h.Status))
			if err := b.dec.countBody(0); err != nil {
				return nil, nil, err
			}
			b.pending = append([]byte(nil), rest...)
			return b, h, nil
		}
	}
}

// next returns the next verified plaintext (a copy), or nil at the end.
func (b *openedBody) next() ([]byte, error) {
	for {
		if b.eof {
			return nil, nil
		}
		ev, ok, err := b.opener.NextEvent()
		if err != nil {
			return nil, err
		}
		if ok {
			if ev.End {
				b.ended = true
				continue
			}
			return append([]byte(nil), ev.Data...), nil
		}
		n, rerr := b.src.Read(b.buf)
		if n > 0 {
			if err := b.opener.Receive(b.buf[:n]); err != nil {
				return nil, err
			}
			continue
		}
		if rerr == io.EOF {
			if err := b.opener.Finish(); err != nil {
				return nil, err
			}
			b.eof = true
			return nil, nil
		}
		if rerr != nil {
			return nil, b.readErr(rerr)
		}
	}
}

func (b *openedBody) Read(p []byte) (int, error) {
	for len(b.pending) == 0 {
		if b.err != nil {
			return 0, b.err
		}
		data, err := b.next()
		if err != nil {
			b.err = err
			return 0, err
		}
		if data == nil {
			if err := b.dec.finish(); err != nil {
				b.err = err
				return 0, err
			}
			b.err = io.EOF
			return 0, io.EOF
		}
		if _, _, err := b.dec.receive(data); err != nil {
			b.err = err
			return 0, err
		}
		b.pending = data
	}
	n := copy(p, b.pending)
	b.pending = b.pending[n:]
	return n, nil
}

func (b *openedBody) Close() error { return b.src.Close() }
