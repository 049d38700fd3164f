package httpcrypt

// Live tests against the real Rust server (`httpcrypt serve` / `gateway`)
// on loopback. The binary is $HTTPCRYPT_BIN, else ../../target/release/
// httpcrypt, else ../../target/debug/httpcrypt; without one these tests
// fail (they do not skip).

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func serverBin(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("HTTPCRYPT_BIN"); b != "" {
		if _, err := os.Stat(b); err != nil {
			t.Fatalf("HTTPCRYPT_BIN=%s: %v", b, err)
		}
		return b
	}
	for _, p := range []string{"../../target/release/httpcrypt", "../../target/debug/httpcrypt"} {
		if _, err := os.Stat(p); err == nil {
			abs, _ := filepath.Abs(p)
			return abs
		}
	}
	t.Fatal("live tests need the httpcrypt server binary: set HTTPCRYPT_BIN or build ../../target/release/httpcrypt (cargo build --release -p httpcrypt-cli)")
	return ""
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func waitAccept(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("nothing accepts on %s after 15 s", addr)
}

// startProc runs a process for the test's lifetime (killed by its own pid).
func startProc(t *testing.T, stdout io.Writer, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdout = stdout
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() && stderr.Len() > 0 {
			t.Logf("%s stderr:\n%s", filepath.Base(name), stderr.String())
		}
	})
	return cmd
}

func keygen(t *testing.T, dir string) string {
	t.Helper()
	out, err := exec.Command(serverBin(t), "keygen", "--dir", dir).Output()
	if err != nil {
		t.Fatalf("keygen: %v", err)
	}
	return strings.TrimSpace(string(out))
}

type liveServer struct {
	addr     string
	identity string
	keys     string
	root     string
}

// startServe runs `httpcrypt serve` with a fresh key directory (or keys, if given).
func startServe(t *testing.T, addr, keys string, extra ...string) *liveServer {
	t.Helper()
	s := &liveServer{addr: addr, keys: keys, root: t.TempDir()}
	if s.addr == "" {
		s.addr = freePort(t)
	}
	if s.keys == "" {
		s.keys = filepath.Join(t.TempDir(), "keys")
	}
	if _, err := os.Stat(s.keys); err != nil {
		s.identity = keygen(t, s.keys)
	}
	if err := os.WriteFile(filepath.Join(s.root, "index.html"), []byte("<h1>hello over httpcrypt</h1>\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"serve", "--keys", s.keys, "--root", s.root, "--listen", s.addr, "--mount", "/hc"}, extra...)
	cmd := startProc(t, io.Discard, serverBin(t), args...)
	procsMu.Lock()
	procs[s.addr] = append(procs[s.addr], cmd)
	procsMu.Unlock()
	waitAccept(t, s.addr)
	return s
}

// startGateway runs upstream.py and `httpcrypt gateway` in front of it.
func startGateway(t *testing.T) *liveServer { return startGateway2(t) }

type recorder struct {
	mu  sync.Mutex
	all []Exchange
}

func (r *recorder) observe(x Exchange) { r.mu.Lock(); r.all = append(r.all, x); r.mu.Unlock() }
func (r *recorder) last() Exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.all) == 0 {
		return Exchange{}
	}
	return r.all[len(r.all)-1]
}

func newClient(opts Options) (*http.Client, *recorder) {
	rec := &recorder{}
	opts.Observe = rec.observe
	return &http.Client{Transport: NewTransport(opts), Timeout: 120 * time.Second}, rec
}

func fetch(t *testing.T, c *http.Client, method, url string, body io.Reader) (*http.Response, []byte, error) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	rsp, err := c.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer rsp.Body.Close()
	b, err := io.ReadAll(rsp.Body)
	return rsp, b, err
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	if err == nil {
		t.Fatalf("expected error %s, got success", code)
	}
	if got := CodeOf(err); got != code {
		t.Fatalf("expected error %s, got %q (%v)", code, got, err)
	}
}

// cookieValueLens are the lengths of the outer cookie value (pad
// included) of each credential: a public key, a v1 ticket (spec §4.1), a
// short ticket (§7.3).
var cookieValueLens = map[string][2]int{"key": {43, 59}, "ticket": {115, 131}, "ticket (short)": {22, 38}}

// wantCookieValue checks that the credential pair of an outer Cookie field
// has the value length of credential.
func wantCookieValue(t *testing.T, what, cookie, credential string) {
	t.Helper()
	first, _, _ := strings.Cut(cookie, ";")
	_, v, _ := strings.Cut(first, "=")
	if r := cookieValueLens[credential]; len(v) < r[0] || len(v) > r[1] {
		t.Fatalf("%s: cookie value of %d characters %q for a %s", what, len(v), v, credential)
	}
}

func TestLiveGetFileAndTickets(t *testing.T) {
	s := startServe(t, "", "")
	url := "http://" + s.addr + "/index.html"
	// By default the first request asks for a short ticket (spec §7.3) and
	// the later ones present it; with short tickets off, the v1 ticket the
	// server sends on each new connection (§7.2).
	for _, v1 := range []bool{false, true} {
		w := &wireLog{base: &http.Transport{}}
		c, rec := newClient(Options{Mount: "/hc", NoShortTickets: v1, Base: w})
		ticket := map[bool]string{false: "ticket (short)", true: "ticket"}[v1]
		for i, want := range []string{"key", ticket, ticket} {
			rsp, body, err := fetch(t, c, "GET", url, nil)
			if err != nil {
				t.Fatalf("request %d: %v", i+1, err)
			}
			if rsp.StatusCode != 200 || string(body) != "<h1>hello over httpcrypt</h1>\n" {
				t.Fatalf("request %d: status %d body %q", i+1, rsp.StatusCode, body)
			}
			x := rec.last()
			if x.Credential != want || x.OuterMethod != "GET" || x.Attempts != 1 {
				t.Fatalf("request %d: %+v, want credential %s over the GET form", i+1, x, want)
			}
			wantCookieValue(t, fmt.Sprintf("request %d", i+1), w.last().cookie, want)
		}
	}
	c, _ := newClient(Options{Mount: "/hc"})
	// An inner 404 is an authenticated answer, not an error.
	rsp, _, err := fetch(t, c, "GET", "http://"+s.addr+"/missing", nil)
	if err != nil || rsp.StatusCode != 404 {
		t.Fatalf("missing file: %v %v", rsp, err)
	}
	// The POST form gives the same answer.
	c2, rec2 := newClient(Options{Mount: "/hc", NoGetForm: true, NoTickets: true, KeyPolicy: ReuseKeyPerHost})
	for i := 0; i < 2; i++ {
		rsp, body, err := fetch(t, c2, "GET", url, nil)
		if err != nil || rsp.StatusCode != 200 || !strings.Contains(string(body), "hello") {
			t.Fatalf("POST form: %v %v", rsp, err)
		}
		if x := rec2.last(); x.OuterMethod != "POST" || x.Credential != "key" {
			t.Fatalf("POST form without tickets: %+v", x)
		}
	}
}

func TestLiveNoTicketsServer(t *testing.T) {
	s := startServe(t, "", "", "--no-tickets")
	c, rec := newClient(Options{Mount: "/hc"})
	for i := 0; i < 2; i++ {
		if _, _, err := fetch(t, c, "GET", "http://"+s.addr+"/index.html", nil); err != nil {
			t.Fatal(err)
		}
		if rec.last().Credential != "key" {
			t.Fatalf("request %d used %s on a server that issues no tickets", i+1, rec.last().Credential)
		}
	}
}

func TestLivePinnedIdentity(t *testing.T) {
	s := startServe(t, "", "")
	c, _ := newClient(Options{Mount: "/hc", Identity: s.identity})
	rsp, body, err := fetch(t, c, "GET", "http://"+s.addr+"/index.html", nil)
	if err != nil || rsp.StatusCode != 200 || !strings.Contains(string(body), "hello") {
		t.Fatalf("pinned identity: %v %v", rsp, err)
	}
	other := keygen(t, filepath.Join(t.TempDir(), "other"))
	c2, _ := newClient(Options{Mount: "/hc", Identity: other})
	_, _, err = fetch(t, c2, "GET", "http://"+s.addr+"/index.html", nil)
	wantCode(t, err, CodeBadSignature)
}

// patternReader yields n bytes with byte i = i % 251, in odd-sized reads,
// with no known length (the outer body goes chunked).
type patternReader struct{ n, off int }

func (p *patternReader) Read(b []byte) (int, error) {
	if p.off >= p.n {
		return 0, io.EOF
	}
	k := min(len(b), p.n-p.off, 7001)
	for i := 0; i < k; i++ {
		b[i] = byte((p.off + i) % 251)
	}
	p.off += k
	return k, nil
}

func TestLiveGatewayStreaming(t *testing.T) {
	s := startGateway(t)
	c, rec := newClient(Options{Mount: "/hc"})
	const size = 8 << 20
	want := sha256.New()
	_, _ = io.Copy(want, &patternReader{n: size})
	wantLine := fmt.Sprintf("%d %s", size, hex.EncodeToString(want.Sum(nil)))

	// Upload of unknown length: sealed while read, chunked outside.
	rsp, body, err := fetch(t, c, "POST", "http://"+s.addr+"/sink", io.NopCloser(&patternReader{n: size}))
	if err != nil || rsp.StatusCode != 200 {
		t.Fatalf("streaming upload: %v %v", rsp, err)
	}
	if strings.TrimSpace(string(body)) != wantLine {
		t.Fatalf("upstream saw %q, want %q", body, wantLine)
	}
	if x := rec.last(); x.OuterMethod != "POST" {
		t.Fatalf("upload went as %s", x.OuterMethod)
	}
	// Upload of known length (outer Content-Length computed in advance).
	data, _ := io.ReadAll(&patternReader{n: size})
	rsp, body, err = fetch(t, c, "POST", "http://"+s.addr+"/sink", bytes.NewReader(data))
	if err != nil || rsp.StatusCode != 200 || strings.TrimSpace(string(body)) != wantLine {
		t.Fatalf("sized upload: %v %v %q", rsp, err, body)
	}

	// Download: read through the verified stream, checked byte by byte.
	req, _ := http.NewRequest("GET", "http://"+s.addr+"/gen?n="+strconv.Itoa(size), nil)
	rsp, err = c.Do(req)
	if err != nil || rsp.StatusCode != 200 {
		t.Fatalf("download: %v %v", rsp, err)
	}
	defer rsp.Body.Close()
	got, buf := 0, make([]byte, 64*1024)
	for {
		n, err := rsp.Body.Read(buf)
		for i := 0; i < n; i++ {
			if buf[i] != byte((got+i)%251) {
				t.Fatalf("download byte %d wrong", got+i)
			}
		}
		got += n
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("download after %d bytes: %v", got, err)
		}
	}
	if got != size {
		t.Fatalf("downloaded %d bytes, want %d", got, size)
	}

	// The echo endpoint sees the inner method, target and fields.
	req, _ = http.NewRequest("PUT", "http://"+s.addr+"/echo/x?y=1", strings.NewReader("abc"))
	req.Header.Set("X-Test", "go")
	rsp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rsp.Body)
	rsp.Body.Close()
	for _, want := range []string{"PUT", "/echo/x?y=1", "go"} {
		if !strings.Contains(string(b), want) {
			t.Fatalf("echo %q lacks %q", b, want)
		}
	}
}

func TestLiveUnknownKeyRetry(t *testing.T) {
	addr := freePort(t)
	dir := t.TempDir()
	first := filepath.Join(dir, "k1")
	s1 := startServe(t, addr, first)
	c, rec := newClient(Options{Mount: "/hc", NoShortTickets: true})
	url := "http://" + addr + "/index.html"
	if _, _, err := fetch(t, c, "GET", url, nil); err != nil {
		t.Fatal(err)
	}
	// Restart on the same address with new keys: the cached key and the
	// ticket are unknown there; the client retries with the problem's certs.
	stopAll(t, s1)
	startServe(t, addr, filepath.Join(dir, "k2"))
	c.Transport.(*Transport).CloseIdleConnections()
	rsp, body, err := fetch(t, c, "GET", url, nil)
	if err != nil || rsp.StatusCode != 200 || !strings.Contains(string(body), "hello") {
		t.Fatalf("after restart: %v %v", rsp, err)
	}
	if x := rec.last(); x.Attempts != 2 || x.Credential != "key" {
		t.Fatalf("expected one unknown-key retry with a key, got %+v", x)
	}
}

// TestLiveShortTicketRefused: a server restarted on new keys no longer holds
// the ticket key of the client's short ticket and answers it 400 malformed
// (no_cookie: a short ticket's cookie is not the contract's HTTPCrypt
// shape, spec §7.3). The client drops the ticket and goes again with a key:
// the cached one, refused with the new certificates (unknown-key), then
// the new one. That answer brings a new short ticket, presented next.
func TestLiveShortTicketRefused(t *testing.T) {
	addr := freePort(t)
	dir := t.TempDir()
	s := startServe(t, addr, filepath.Join(dir, "k1"))
	w := &wireLog{base: &http.Transport{}}
	c, rec := newClient(Options{Mount: "/hc", Base: w})
	url := "http://" + addr + "/index.html"
	for i, want := range []string{"key", "ticket (short)"} {
		if _, _, err := fetch(t, c, "GET", url, nil); err != nil || rec.last().Credential != want {
			t.Fatalf("request %d: %v %+v", i+1, err, rec.last())
		}
	}
	stopAll(t, s)
	startServe(t, addr, filepath.Join(dir, "k2"))
	c.Transport.(*Transport).CloseIdleConnections()
	w.mu.Lock()
	before := len(w.seen)
	w.mu.Unlock()
	rsp, body, err := fetch(t, c, "GET", url, nil)
	if err != nil || rsp.StatusCode != 200 || !strings.Contains(string(body), "hello") {
		t.Fatalf("after restart: %v %v", rsp, err)
	}
	if x := rec.last(); x.Attempts != 3 || x.Credential != "key" {
		t.Fatalf("after restart: %+v, want 3 attempts ending with a key", x)
	}
	w.mu.Lock()
	sent := w.seen[before:]
	w.mu.Unlock()
	if len(sent) != 3 {
		t.Fatalf("after restart the client sent %+v", sent)
	}
	for i, cred := range []string{"ticket (short)", "key", "key"} {
		wantCookieValue(t, fmt.Sprintf("attempt %d", i+1), sent[i].cookie, cred)
	}
	rsp, body, err = fetch(t, c, "GET", url, nil)
	if err != nil || rsp.StatusCode != 200 || !strings.Contains(string(body), "hello") {
		t.Fatalf("after the recovery: %v %v", rsp, err)
	}
	if x := rec.last(); x.Attempts != 1 || x.Credential != "ticket (short)" {
		t.Fatalf("after the recovery: %+v, want the new short ticket", x)
	}
}

// stopAll kills the server listening on s.addr and waits until the
// address is free again.
func stopAll(t *testing.T, s *liveServer) {
	t.Helper()
	procsMu.Lock()
	defer procsMu.Unlock()
	for _, p := range procs[s.addr] {
		_ = p.Process.Kill()
	}
	delete(procs, s.addr)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		l, err := net.Listen("tcp", s.addr)
		if err == nil {
			l.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s still in use", s.addr)
}

var (
	procsMu sync.Mutex
	procs   = map[string][]*exec.Cmd{}
)

func TestLiveStaleRetry(t *testing.T) {
	s := startServe(t, "", "")
	c, rec := newClient(Options{Mount: "/hc", ClockOffset: -5 * time.Minute})
	rsp, _, err := fetch(t, c, "GET", "http://"+s.addr+"/index.html", nil)
	if err != nil || rsp.StatusCode != 200 {
		t.Fatalf("stale retry: %v %v", rsp, err)
	}
	if x := rec.last(); x.Attempts != 2 {
		t.Fatalf("expected a stale retry, got %+v", x)
	}
	// The corrected offset sticks: the next request needs no retry.
	if _, _, err := fetch(t, c, "GET", "http://"+s.addr+"/index.html", nil); err != nil {
		t.Fatal(err)
	}
	if x := rec.last(); x.Attempts != 1 {
		t.Fatalf("offset not kept: %+v", x)
	}
}

// doubleSender sends every outer GET twice and returns the second answer,
// as a replaying attacker (or a broken proxy) would.
type doubleSender struct {
	base  http.RoundTripper
	calls atomic.Int32
}

func (d *doubleSender) RoundTrip(r *http.Request) (*http.Response, error) {
	d.calls.Add(1)
	if r.Method == "GET" {
		rsp, err := d.base.RoundTrip(r.Clone(r.Context()))
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, rsp.Body)
		rsp.Body.Close()
	}
	return d.base.RoundTrip(r)
}

func TestLiveReplayIsNotRetried(t *testing.T) {
	s := startServe(t, "", "")
	d := &doubleSender{base: &http.Transport{}}
	c, _ := newClient(Options{Mount: "/hc", Base: d, NoTickets: true})
	// Discovery (OPTIONS) first, through the same base.
	_, _, err := fetch(t, c, "GET", "http://"+s.addr+"/index.html", nil)
	wantCode(t, err, CodeReplay)
	var he *Error
	if !errors.As(err, &he) || he.Type != ProblemReplay || !he.Authenticated {
		t.Fatalf("replay error should name its sealed problem type: %#v", err)
	}
	if n := d.calls.Load(); n != 2 { // OPTIONS + one GET (sent twice inside)
		t.Fatalf("outer round trips %d: a replay must not be retried", n)
	}
}

func TestLiveTokenRequired(t *testing.T) {
	s := startGateway2(t, "--require-token")
	// The first side effect is answered 425 token-required with a token
	// and a ticket; the single retry (spec §8.4) presents both and gets
	// through. With short tickets the token is bound to the short ticket's
	// key k' (spec §7.3), under which the retry runs. Later side effects
	// present the ticket with the kept token and go through at once; with
	// R = 2 the short ticket is renewed along the way, its token rebound to
	// the new ticket's key.
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"short tickets", Options{}},
		{"short tickets renewed", Options{ShortTickets: ShortPolicy{Reuse: 2}}},
		{"v1 tickets", Options{NoShortTickets: true}},
	} {
		w := &wireLog{base: &http.Transport{}}
		tc.opts.Mount, tc.opts.Base = "/hc", w
		c, rec := newClient(tc.opts)
		credential := map[bool]string{false: "ticket (short)", true: "ticket"}[tc.opts.NoShortTickets]
		for i := 0; i < 5; i++ {
			w.mu.Lock()
			before := len(w.seen)
			w.mu.Unlock()
			rsp, body, err := fetch(t, c, "POST", "http://"+s.addr+"/sink", strings.NewReader("payload"))
			if err != nil || rsp.StatusCode != 200 || !strings.HasPrefix(string(body), "7 ") {
				t.Fatalf("%s, call %d: %v %v %q", tc.name, i+1, rsp, err, body)
			}
			attempts := 1
			if i == 0 {
				attempts = 2
			}
			x := rec.last()
			if x.Attempts != attempts || x.Credential != credential {
				t.Fatalf("%s, call %d: %+v, want %d attempts, the last under a %s", tc.name, i+1, x, attempts, credential)
			}
			w.mu.Lock()
			sent := w.seen[before:]
			w.mu.Unlock()
			var posts []wireReq
			for _, r := range sent {
				if r.method != http.MethodOptions {
					posts = append(posts, r)
				}
			}
			if len(posts) != attempts {
				t.Fatalf("%s, call %d: %d requests on the wire, want %d", tc.name, i+1, len(posts), attempts)
			}
			if i == 0 {
				wantCookieValue(t, tc.name+", call 1, attempt 1", posts[0].cookie, "key")
			}
			wantCookieValue(t, fmt.Sprintf("%s, call %d", tc.name, i+1), posts[len(posts)-1].cookie, credential)
		}
	}
}

// startGateway2 is startGateway with extra server flags.
func startGateway2(t *testing.T, extra ...string) *liveServer {
	t.Helper()
	pr, pw := io.Pipe()
	startProc(t, pw, "python3", "../../crates/httpcrypt-cli/tests/upstream.py", "0")
	sc := bufio.NewScanner(pr)
	portc := make(chan string, 1)
	go func() {
		for sc.Scan() {
			if p, ok := strings.CutPrefix(sc.Text(), "PORT "); ok {
				portc <- p
			}
		}
	}()
	var port string
	select {
	case port = <-portc:
	case <-time.After(15 * time.Second):
		t.Fatal("upstream.py did not print its port")
	}
	s := &liveServer{addr: freePort(t), keys: filepath.Join(t.TempDir(), "keys")}
	s.identity = keygen(t, s.keys)
	args := append([]string{"gateway", "--keys", s.keys, "--upstream", "http://127.0.0.1:" + port,
		"--listen", s.addr, "--mount", "/hc"}, extra...)
	startProc(t, io.Discard, serverBin(t), args...)
	waitAccept(t, s.addr)
	return s
}

// tcpProxy forwards loopback connections to target. flip: in each
// octet-stream response, invert one byte 40 bytes into the body.
// closeSecond: close a connection when its client starts a second request.
type tcpProxy struct {
	l           net.Listener
	target      string
	targets     []string // if set: connections go round-robin to these
	conns       atomic.Int32
	flip        bool
	closeSecond bool
	closed      atomic.Int32
}

func startProxy(t *testing.T, target string, flip, closeSecond bool, roundRobin ...string) *tcpProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{l: l, target: target, flip: flip, closeSecond: closeSecond, targets: roundRobin}
	go p.serve()
	t.Cleanup(func() { l.Close() })
	return p
}

func (p *tcpProxy) addr() string { return p.l.Addr().String() }

func (p *tcpProxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		go p.handle(c)
	}
}

func (p *tcpProxy) handle(c net.Conn) {
	defer c.Close()
	target := p.target
	if n := int(p.conns.Add(1)) - 1; len(p.targets) > 0 {
		target = p.targets[n%len(p.targets)]
	}
	s, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		return
	}
	defer s.Close()
	deadline := time.Now().Add(60 * time.Second)
	c.SetDeadline(deadline)
	s.SetDeadline(deadline)
	var answered atomic.Bool
	go func() {
		// server -> client
		var head []byte
		headDone, isStream, body := false, false, 0
		buf := make([]byte, 32*1024)
		for {
			n, err := s.Read(buf)
			chunk := buf[:n]
			if n > 0 && p.flip {
				for i := range chunk {
					if !headDone {
						head = append(head, chunk[i])
						if bytes.HasSuffix(head, []byte("\r\n\r\n")) {
							headDone = true
							isStream = bytes.Contains(head, []byte("application/octet-stream"))
						}
						continue
					}
					if isStream && body == 40 {
						chunk[i] ^= 0x01
					}
					body++
				}
			}
			if n > 0 {
				if _, werr := c.Write(chunk); werr != nil {
					return
				}
				answered.Store(true)
			}
			if err != nil {
				c.Close()
				return
			}
		}
	}()
	buf := make([]byte, 32*1024)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if p.closeSecond && answered.Load() {
				p.closed.Add(1)
				return // the second request on this connection: drop it
			}
			if _, werr := s.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func TestLiveTamperedResponse(t *testing.T) {
	s := startServe(t, "", "")
	p := startProxy(t, s.addr, true, false)
	c, _ := newClient(Options{Mount: "/hc", Base: &http.Transport{DisableKeepAlives: true}})
	rsp, body, err := fetch(t, c, "GET", "http://"+p.addr()+"/index.html", nil)
	wantCode(t, err, CodeIntegrity)
	if rsp != nil || len(body) != 0 {
		t.Fatalf("unauthenticated bytes reached the caller: %q", body)
	}
}

func TestLiveTamperedDownloadStopsAtTheBadRecord(t *testing.T) {
	s := startGateway(t)
	// A flip deep in a large download: verified records come through, the
	// bad one is an error, never data.
	c, _ := newClient(Options{Mount: "/hc", Base: corrupting{base: &http.Transport{}, at: 300_000}})
	req, _ := http.NewRequest("GET", "http://"+s.addr+"/gen?n=1000000", nil)
	rsp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer rsp.Body.Close()
	b, err := io.ReadAll(rsp.Body)
	wantCode(t, err, CodeIntegrity)
	if len(b) >= 300_000 {
		t.Fatalf("got %d bytes, more than was verified", len(b))
	}
	for i := range b {
		if b[i] != byte(i%251) {
			t.Fatalf("released byte %d is wrong", i)
		}
	}
}

// corrupting flips one byte at offset `at` of every 200 octet-stream body.
type corrupting struct {
	base http.RoundTripper
	at   int
}

func (c corrupting) RoundTrip(r *http.Request) (*http.Response, error) {
	rsp, err := c.base.RoundTrip(r)
	if err != nil || rsp.Header.Get("Content-Type") != "application/octet-stream" {
		return rsp, err
	}
	rsp.Body = &flipBody{ReadCloser: rsp.Body, at: c.at}
	return rsp, nil
}

type flipBody struct {
	io.ReadCloser
	at, off int
}

func (f *flipBody) Read(p []byte) (int, error) {
	n, err := f.ReadCloser.Read(p)
	if f.at >= f.off && f.at < f.off+n {
		p[f.at-f.off] ^= 0x80
	}
	f.off += n
	return n, err
}

func TestLiveResendOnClosedPooledConnection(t *testing.T) {
	s := startServe(t, "", "")
	p := startProxy(t, s.addr, false, true)
	c, rec := newClient(Options{Mount: "/hc", NoGetForm: true})
	url := "http://" + p.addr() + "/index.html"
	for i := 0; i < 3; i++ {
		rsp, body, err := fetch(t, c, "GET", url, nil)
		if err != nil || rsp.StatusCode != 200 || !strings.Contains(string(body), "hello") {
			t.Fatalf("request %d: %v %v", i+1, rsp, err)
		}
	}
	if p.closed.Load() == 0 {
		t.Fatal("the proxy never closed a pooled connection; the test did not exercise the resend")
	}
	if x := rec.last(); x.Attempts != 1 && x.Attempts != 2 {
		t.Fatalf("unexpected attempts %+v", x)
	}
}

func TestLiveHcfetch(t *testing.T) {
	s := startServe(t, "", "")
	bin := filepath.Join(t.TempDir(), "hcfetch")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/hcfetch").CombinedOutput(); err != nil {
		t.Fatalf("building hcfetch: %v\n%s", err, out)
	}
	run := func(args ...string) (string, string, int) {
		cmd := exec.CommandContext(ctx, bin, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return stdout.String(), stderr.String(), code
	}
	url := "http://" + s.addr + "/index.html"
	// Short tickets by default (spec §7.3); --v1-tickets never asks, so the
	// server's v1 tickets are presented.
	for _, tc := range []struct {
		flags  []string
		ticket string
	}{{nil, "ticket (short)"}, {[]string{"--v1-tickets"}, "ticket"}} {
		args := append(append([]string{"--mount", "/hc", "--identity", s.identity, "--repeat", "3"}, tc.flags...), url)
		out, errOut, code := run(args...)
		if code != 0 || out != "<h1>hello over httpcrypt</h1>\n" {
			t.Fatalf("hcfetch %v: code %d stdout %q stderr %q", tc.flags, code, out, errOut)
		}
		want := fmt.Sprintf("request 1: status 200, credential key\nrequest 2: status 200, credential %s\nrequest 3: status 200, credential %s\n", tc.ticket, tc.ticket)
		if errOut != want {
			t.Fatalf("hcfetch %v stderr %q, want %q", tc.flags, errOut, want)
		}
	}
	if _, errOut, code := run("--mount", "/hc", "--v1-tickets=yes", url); code != 2 || !strings.Contains(errOut, "--v1-tickets takes no value") {
		t.Fatalf("--v1-tickets=yes: code %d stderr %q", code, errOut)
	}
	_, errOut, code := run("--mount", "/hc", "-X", "DELETE", "-H", "X-A: b", url)
	if code != 0 || !strings.Contains(errOut, "request 1: status 405, credential key") {
		t.Fatalf("inner 405 is still an authenticated answer: %d %q", code, errOut)
	}
	other := keygen(t, filepath.Join(t.TempDir(), "other"))
	_, errOut, code = run("--mount", "/hc", "--identity", other, url)
	if code != 1 || !strings.Contains(errOut, "error: bad_signature") {
		t.Fatalf("wrong pin: code %d stderr %q", code, errOut)
	}
	_, errOut, code = run("--mount", "/wrong", url)
	if code != 1 || !strings.Contains(errOut, "error: ") {
		t.Fatalf("wrong mount: code %d stderr %q", code, errOut)
	}
}

func TestLiveFleetInstancesShareKeysAndTickets(t *testing.T) {
	dir := t.TempDir()
	keysA := filepath.Join(dir, "a")
	identity := keygen(t, keysA)
	if out, err := exec.Command(serverBin(t), "fleet", "init", "--keys", keysA, "--period", "600").CombinedOutput(); err != nil {
		t.Fatalf("fleet init: %v\n%s", err, out)
	}
	keysB := filepath.Join(dir, "b")
	if out, err := exec.Command("cp", "-r", keysA, keysB).CombinedOutput(); err != nil {
		t.Fatalf("copying the fleet state: %v\n%s", err, out)
	}
	a := startServe(t, "", keysA)
	b := startServe(t, "", keysB)
	// One address, connections alternating between the two instances.
	// Short tickets are accepted by every instance that shares the ticket
	// keys (spec §7.3: the server keeps no state per ticket), as v1 ones are.
	p := startProxy(t, "", false, false, a.addr, b.addr)
	for _, v1 := range []bool{false, true} {
		c, rec := newClient(Options{Mount: "/hc", Identity: identity, NoShortTickets: v1, Base: &http.Transport{DisableKeepAlives: true}})
		ticket := map[bool]string{false: "ticket (short)", true: "ticket"}[v1]
		before := p.conns.Load()
		for i, want := range []string{"key", ticket, ticket, ticket} {
			rsp, body, err := fetch(t, c, "GET", "http://"+p.addr()+"/index.html", nil)
			if err != nil || rsp.StatusCode != 200 || !strings.Contains(string(body), "hello") {
				t.Fatalf("request %d: %v %v", i+1, rsp, err)
			}
			if x := rec.last(); x.Credential != want || x.Attempts != 1 {
				t.Fatalf("request %d: %+v, want %s on the first attempt", i+1, x, want)
			}
		}
		if n := p.conns.Load() - before; n < 5 {
			t.Fatalf("only %d connections: the instances did not alternate", n)
		}
	}
}

// wireLog records the outer requests a client sends (method, target, Host)
// and can rewrite the outer Host, as a middlebox would.
type wireLog struct {
	base     http.RoundTripper
	mu       sync.Mutex
	seen     []wireReq
	rewriteH string
}

type wireReq struct{ method, target, host, cookie string }

func (w *wireLog) RoundTrip(r *http.Request) (*http.Response, error) {
	w.mu.Lock()
	w.seen = append(w.seen, wireReq{r.Method, r.URL.RequestURI(), r.Host, r.Header.Get("Cookie")})
	rewrite := w.rewriteH
	w.mu.Unlock()
	if rewrite != "" && r.Method != http.MethodOptions {
		r = r.Clone(r.Context())
		r.Host = rewrite
	}
	return w.base.RoundTrip(r)
}

func (w *wireLog) last() wireReq {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen[len(w.seen)-1]
}

// compactSegment checks that target uses the profile-2 nonce segment
// `2{b64u(n0)}` under /hc and returns n0.
func compactSegment(t *testing.T, target string) [NonceLen]byte {
	t.Helper()
	path, _, _ := strings.Cut(target, "?")
	seg, ok := strings.CutPrefix(path, "/hc/")
	if !ok || len(seg) != 33 || seg[0] != '2' {
		t.Fatalf("outer target %q is not a profile-2 request", target)
	}
	n0, profile, err := ParseNonceSegment(seg)
	if err != nil || profile != ProfileCompact {
		t.Fatalf("segment %q: profile %d %v", seg, profile, err)
	}
	return n0
}

// TestLiveCompact runs profile 2 (spec §4.5) against `httpcrypt serve
// --compact`, which issues version-2 certificates.
func TestLiveCompact(t *testing.T) {
	s := startServe(t, "", "", "--compact")
	url := "http://" + s.addr + "/index.html"
	const want = "<h1>hello over httpcrypt</h1>\n"
	w := &wireLog{base: &http.Transport{}}
	c, rec := newClient(Options{Mount: "/hc", Identity: s.identity, Base: w})

	// The server announces profile 2 in its certificates.
	keys, err := c.Transport.(*Transport).RefreshKeys(context.Background(), s.addr)
	if err != nil || len(keys) == 0 {
		t.Fatalf("OPTIONS: %v %v", keys, err)
	}
	for _, k := range keys {
		if k.Version != CertVersionCompact {
			t.Fatalf("serve --compact published a version-%d certificate", k.Version)
		}
	}

	// Fresh key, then tickets (short ones by default, spec §7.3, or v1
	// ones): every request in profile 2.
	for _, v1 := range []bool{false, true} {
		ticket := map[bool]string{false: "ticket (short)", true: "ticket"}[v1]
		if v1 {
			w = &wireLog{base: &http.Transport{}}
			c, rec = newClient(Options{Mount: "/hc", Identity: s.identity, Base: w, NoShortTickets: true})
		}
		for i, cred := range []string{"key", ticket, ticket} {
			before := time.Now().Unix()
			rsp, body, err := fetch(t, c, "GET", url, nil)
			if err != nil || rsp.StatusCode != 200 || string(body) != want {
				t.Fatalf("request %d: %v %v %q", i+1, rsp, err, body)
			}
			x, wire := rec.last(), w.last()
			if x.Profile != ProfileCompact || x.Credential != cred || x.Attempts != 1 || x.OuterMethod != "GET" {
				t.Fatalf("request %d: %+v, want profile 2 with a %s", i+1, x, cred)
			}
			wantCookieValue(t, fmt.Sprintf("request %d", i+1), wire.cookie, cred)
			n0 := compactSegment(t, wire.target)
			if tm := NonceTime(&n0); tm < before-1 || tm > time.Now().Unix()+1 {
				t.Fatalf("request %d: time in n0 %d, clock %d", i+1, tm, before)
			}
			if wire.host != s.addr {
				t.Fatalf("request %d: outer Host %q", i+1, wire.host)
			}
			// The inner response of a one-record answer has neither Date nor
			// Content-Length (spec §4.5).
			if rsp.Header.Get("Date") != "" || rsp.Header.Get("Content-Length") != "" {
				t.Fatalf("request %d: inner response fields %v", i+1, rsp.Header)
			}
		}
	}
	// An inner 404 is an answer too.
	if rsp, _, err := fetch(t, c, "GET", "http://"+s.addr+"/missing", nil); err != nil || rsp.StatusCode != 404 || rec.last().Profile != ProfileCompact {
		t.Fatalf("missing file: %v %v", rsp, err)
	}

	// POST form with a fresh key per request, no tickets.
	w2 := &wireLog{base: &http.Transport{}}
	c2, rec2 := newClient(Options{Mount: "/hc", NoGetForm: true, NoTickets: true, Base: w2})
	for i := 0; i < 2; i++ {
		rsp, body, err := fetch(t, c2, "GET", url, nil)
		if err != nil || rsp.StatusCode != 200 || string(body) != want {
			t.Fatalf("POST form %d: %v %v", i+1, rsp, err)
		}
		if x := rec2.last(); x.OuterMethod != "POST" || x.Credential != "key" || x.Profile != ProfileCompact {
			t.Fatalf("POST form %d: %+v", i+1, x)
		}
		compactSegment(t, w2.last().target)
	}

	// A clock five minutes off: stale, answered with the server's Date;
	// the retry carries the corrected time in a new n0.
	w3 := &wireLog{base: &http.Transport{}}
	c3, rec3 := newClient(Options{Mount: "/hc", ClockOffset: -5 * time.Minute, Base: w3})
	if rsp, body, err := fetch(t, c3, "GET", url, nil); err != nil || rsp.StatusCode != 200 || string(body) != want {
		t.Fatalf("stale retry: %v %v", rsp, err)
	}
	if x := rec3.last(); x.Attempts != 2 || x.Profile != ProfileCompact {
		t.Fatalf("expected one stale retry: %+v", x)
	}
	w3.mu.Lock()
	first, second := w3.seen[len(w3.seen)-2], w3.seen[len(w3.seen)-1]
	w3.mu.Unlock()
	n1, n2 := compactSegment(t, first.target), compactSegment(t, second.target)
	if d := time.Now().Unix() - NonceTime(&n1); d < 290 || d > 310 {
		t.Fatalf("first attempt's time is %d s behind, want about 300", d)
	}
	if d := time.Now().Unix() - NonceTime(&n2); d < -5 || d > 5 {
		t.Fatalf("retry's time is %d s off", d)
	}

	// A middlebox that rewrites Host breaks record 0: sealed integrity.
	_, port, _ := net.SplitHostPort(s.addr)
	w4 := &wireLog{base: &http.Transport{}, rewriteH: "localhost:" + port}
	c4, _ := newClient(Options{Mount: "/hc", Base: w4})
	_, _, err = fetch(t, c4, "GET", url, nil)
	wantCode(t, err, CodeIntegrity)
	var he *Error
	if !errors.As(err, &he) || !he.Authenticated {
		t.Fatalf("the rewritten Host should be reported inside: %#v", err)
	}
	// The same client on v1 (Host not bound) gets through the rewrite.
	c5, rec5 := newClient(Options{Mount: "/hc", Base: w4, NoCompact: true})
	if rsp, body, err := fetch(t, c5, "GET", url, nil); err != nil || rsp.StatusCode != 200 || string(body) != want || rec5.last().Profile != Profile1 {
		t.Fatalf("v1 on a --compact server: %v %v", rsp, err)
	}
}
