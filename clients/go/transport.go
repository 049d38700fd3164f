package httpcrypt

// The driver: Transport fetches keys, sends what the engine (engine.go)
// planned over the base http.RoundTripper, and reads of each answer what
// the engine needs to decide on it, as the Python client's httpx and
// requests drivers do around its Engine.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Transport is an http.RoundTripper that sends every request through
// HTTPCrypt. Safe for concurrent use.
type Transport struct {
	*engine
	confErr error
	base    http.RoundTripper

	// sleep waits on urn:httpcrypt:busy (a hook for in-memory tests).
	sleep func(ctx context.Context, d time.Duration) error
}

// NewTransport makes a Transport. An unusable option (bad mount or
// identity) makes every request fail with a config error.
func NewTransport(opts Options) *Transport {
	t := &Transport{engine: newEngine(opts), base: opts.Base, sleep: sleepCtx}
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

// CloseIdleConnections closes idle connections of the base transport.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// ForgetKeys drops the cached server keys (of both suites) and tickets
// (both forms) of authority. A pin to suite 2 stays.
func (t *Transport) ForgetKeys(authority string) {
	t.host(authority, func(h *hostState) { h.keys, h.hybrid, h.ticket, h.short = nil, nil, nil, nil })
}

// SetKeys installs server keys for authority (e.g. learnt from DNS).
func (t *Transport) SetKeys(authority string, keys []DiscoveredKey) {
	now := t.now()
	t.host(authority, func(h *hostState) { h.keys, h.fetched, h.maxAge = keys, now, 0 })
}

// SetHybridKeys installs suite-2 keys for authority (e.g. a certificate
// from _httpcrypt-pq TXT or AAAA records and the key text it names), kept
// without expiry. As keys from OPTIONS {mount}/pq, those the mode accepts
// (in authenticated mode: verifying under the pinned identity) are kept
// and pin the origin to suite 2 until their not_after. A key text that is
// not the one its certificate names is kem_mismatch; with no key valid
// now, a certificate that fails verification is bad_signature. A
// Transport with PQ off does not use them.
func (t *Transport) SetHybridKeys(authority string, keys []HybridKey) error {
	var certs []*HybridCert
	var kems []*KemPublic
	for _, k := range keys {
		if err := k.Kem.Check(k.Cert); err != nil {
			return err
		}
		certs, kems = append(certs, k.Cert), append(kems, k.Kem)
	}
	now := t.now()
	kept, err := t.acceptHybrid(authority, certs, kems, now)
	if err != nil {
		return err
	}
	t.host(authority, func(h *hostState) { h.hybrid, h.hybridFetched, h.hybridMaxAge = kept, now, 0 })
	return nil
}

// RefreshKeys fetches the certificates of authority with OPTIONS
// {mount}/, checks them in authenticated mode and caches them for max-age.
// An answer without certificates is not_httpcrypt (no_endpoint for 404).
func (t *Transport) RefreshKeys(ctx context.Context, authority string) ([]DiscoveredKey, error) {
	return t.refreshKeys(ctx, authority, time.Now())
}

// refreshKeys is RefreshKeys within a call that began at start.
func (t *Transport) refreshKeys(ctx context.Context, authority string, start time.Time) ([]DiscoveredKey, error) {
	status, header, body, err := t.options(ctx, authority, t.mount.OptionsPath(), start)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, t.notHTTPCrypt(authority, status)
	}
	return t.storeCerts(authority, status, header, body)
}

// options sends OPTIONS path to authority and reads a 200 answer's body
// (at most 64 KiB); other answers come back without their body.
func (t *Transport) options(ctx context.Context, authority, path string, start time.Time) (int, http.Header, []byte, error) {
	var pt phaseTracker
	req, err := http.NewRequestWithContext(pt.traced(ctx), http.MethodOptions, "http://"+authority+path, nil)
	if err != nil {
		return 0, nil, nil, &Error{Code: CodeConfig, Err: err}
	}
	req.Header.Set("User-Agent", "")
	rsp, err := t.base.RoundTrip(req)
	if err != nil {
		return 0, nil, nil, diagnose(ctx, err, authority, pt.phase(), start)
	}
	defer rsp.Body.Close()
	if rsp.StatusCode != http.StatusOK {
		return rsp.StatusCode, rsp.Header, nil, nil
	}
	body, err := limitedRead(rsp.Body, 64*1024)
	if err != nil {
		return 0, nil, nil, diagnose(ctx, err, authority, phaseReading, start)
	}
	return rsp.StatusCode, rsp.Header, body, nil
}

// currentKey is the key a request to authority uses: a cached one, else
// one that discovery finds now, as the engine directs it (spec/hybrid.md
// H4: OPTIONS {mount}/pq first when suite 2 is wanted, then OPTIONS
// {mount}/ where v1 may serve).
func (t *Transport) currentKey(ctx context.Context, authority string, start time.Time) (*serverKey, error) {
	now := t.now()
	k, next := t.nextKey(authority, now)
	if next == haveKey {
		return k, nil
	}
	if next == fetchHybrid {
		status, header, body, err := t.options(ctx, authority, t.mount.HybridOptionsPath(), start)
		if err != nil {
			return nil, err
		}
		if k, err := t.hybridAnswer(authority, status, header, body); k != nil || err != nil {
			return k, err
		}
		if v1 := t.cachedKey(authority, now); v1 != nil {
			return &serverKey{v1: v1}, nil
		}
	}
	keys, err := t.refreshKeys(ctx, authority, start)
	if err != nil {
		return nil, err
	}
	v1, err := ChooseKey(keys, now)
	if err != nil {
		return nil, err
	}
	return &serverKey{v1: v1}, nil
}

func isIdempotent(m string) bool {
	switch m {
	case "GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE":
		return true
	}
	return false
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
// inner Date), once on token-required, once with a key when a short
// ticket was refused (spec §7.3), and once when a pooled connection
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
	retriedConn := false
	cs := newCall(time.Now(), replayable)
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
		if err := cs.follow(out); err != nil {
			return nil, err
		}
		if out == retryBusy {
			if err := t.sleep(req.Context(), cs.busyWait); err != nil {
				return nil, err
			}
		}
	}
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// once is one attempt: the engine plans it, once sends it, reads what the
// engine decides on, and hands back the verified response.
func (t *Transport) once(req *http.Request, body io.ReadCloser, cs *call) (*http.Response, outcome, error) {
	ctx := req.Context()
	authority := req.URL.Host
	server, err := t.currentKey(ctx, authority, cs.start)
	if err != nil {
		closeReader(body)
		return nil, done, err
	}
	noBody := body == nil || body == http.NoBody
	a, err := t.plan(ctx, req, authority, server, noBody, cs.ownDate)
	if err != nil {
		closeReader(body)
		return nil, done, err
	}
	outer, err := t.outerRequest(ctx, a, body, noBody)
	if err != nil {
		return nil, done, err
	}
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
	return t.receive(req, a, outer, rsp, cs)
}

func closeReader(body io.ReadCloser) {
	if body != nil {
		body.Close()
	}
}

// outerRequest is the outer request of attempt a: a GET carrying the
// sealed stream in its target, or a POST sealing body as it is read. Its
// Host is the authority, exactly the value record 0 binds in profile 2.
// It closes body when it fails.
func (t *Transport) outerRequest(ctx context.Context, a *attempt, body io.ReadCloser, noBody bool) (*http.Request, error) {
	sealer, err := a.sealer()
	if err != nil {
		closeReader(body)
		return nil, err
	}
	var outer *http.Request
	if t.getForm(a) {
		plain := a.head
		if !noBody {
			b, err := limitedRead(body, a.exact)
			body.Close()
			if err != nil {
				return nil, err
			}
			if int64(len(b)) != a.exact {
				return nil, &Error{Code: CodeConfig, Err: errors.New("request body shorter than its ContentLength")}
			}
			plain = append(plain, b...)
		}
		stream, err := SealAll(sealer, nil, plain, max(len(plain), 1))
		if err != nil {
			return nil, err
		}
		outer, err = http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.authority+t.getTarget(a, stream), nil)
		if err != nil {
			return nil, &Error{Code: CodeConfig, Err: err}
		}
	} else {
		// A hybrid request's body starts with the ML-KEM ciphertext.
		sr := &sealReader{sealer: sealer, pending: a.head, body: body, recordSize: t.opts.RecordSize,
			out: append([]byte(nil), a.ctM...)}
		outer, err = http.NewRequestWithContext(ctx, http.MethodPost, "http://"+a.authority+t.noncePath(a), sr)
		if err != nil {
			closeReader(body)
			return nil, &Error{Code: CodeConfig, Err: err}
		}
		outer.ContentLength = -1
		if a.exact >= 0 {
			outer.ContentLength = int64(len(a.ctM)) + sealedLen(int64(len(a.head))+a.exact, int64(t.opts.RecordSize))
		}
		outer.Header.Set("Content-Type", contentTypeOctet)
	}
	outer.Host = a.authority
	outer.Header.Set("Cookie", a.cookie)
	outer.Header.Set("User-Agent", "") // net/http's default would name the client in clear (erratum E1)
	return outer, nil
}

// receive opens the 200 answer to attempt a up to its inner head, lets
// the engine decide on it (reading a possible problem document whole),
// and hands out the inner response, whose body releases verified bytes.
func (t *Transport) receive(req *http.Request, a *attempt, outer *http.Request, rsp *http.Response, cs *call) (*http.Response, outcome, error) {
	readErr := func(err error) error { return diagnose(req.Context(), err, a.authority, phaseReading, cs.start) }
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
