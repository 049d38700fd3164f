package httpcrypt

// The admission defence (spec §14) live, against `httpcrypt serve` with a
// low --defence-threshold. Needs a server binary with the defence
// ($HTTPCRYPT_BIN as for the other live tests); an older one fails here.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func needDefence(t *testing.T) {
	t.Helper()
	out, err := exec.Command(serverBin(t), "serve", "--help").CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--defence-threshold")) {
		t.Fatalf("%s has no admission defence (spec §14): set HTTPCRYPT_BIN to a binary that has it (%v)", serverBin(t), err)
	}
}

// wireEntry is one outer request as a middlebox sees it.
type wireEntry struct {
	ticket bool   // the credential pair carries a ticket (115+ characters, or a short one's 22–38)
	echo   bool   // an hc1-admit pair of 39 characters
	status int    // outer status
	typ    string // problem type of a non-200 answer
	// A challenge's difficulty member, and the difficulty byte of its cookie.
	member, cookieD int
}

// tap records every sealed outer request the Transport sends.
type tap struct {
	base http.RoundTripper
	mu   sync.Mutex
	log  []wireEntry
}

func newTap() *tap { return &tap{base: &http.Transport{DisableCompression: true}} }

func (w *tap) RoundTrip(r *http.Request) (*http.Response, error) {
	rsp, err := w.base.RoundTrip(r)
	if err != nil || r.Method == http.MethodOptions {
		return rsp, err
	}
	cookie := r.Header.Get("Cookie")
	e := wireEntry{status: rsp.StatusCode}
	first, rest, _ := strings.Cut(cookie, ";")
	if _, v, ok := strings.Cut(first, "="); ok {
		e.ticket = len(v) >= ticketB64Len || len(v) <= shortB64Len+MaxPad
	}
	if v, ok := strings.CutPrefix(strings.TrimSpace(rest), AdmitCookieName+"="); ok && len(v) == admitEchoB64Len {
		e.echo = true
	}
	if rsp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(rsp.Body, 64*1024))
		rsp.Body.Close()
		if p, err := ParseProblem(b); err == nil {
			e.typ = p.Type
			e.member, e.cookieD = p.Difficulty, -1
			if c, err := ParseAdmitCookie(p.Admit); err == nil {
				e.cookieD = c.Difficulty()
			}
		}
		rsp.Body = io.NopCloser(bytes.NewReader(b))
	}
	w.mu.Lock()
	w.log = append(w.log, e)
	w.mu.Unlock()
	return rsp, nil
}

func (w *tap) entries() []wireEntry {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]wireEntry(nil), w.log...)
}

// pressure keeps the server's demand above a low threshold with
// fresh-key requests that never answer their challenge (so they charge no
// prefix budget), every 25 ms until stop (and at most 90 s).
func pressure(t *testing.T, addr string) (stop func() int) {
	t.Helper()
	tr := NewTransport(Options{Mount: "/hc", NoTickets: true})
	key, err := tr.currentKey(context.Background(), addr, time.Now())
	if err != nil {
		t.Fatalf("pressure: %v", err)
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	done := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	challenged := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		deadline := time.Now().Add(90 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case <-done:
				return
			case <-time.After(25 * time.Millisecond):
			}
			own := GenerateKexSecret()
			cookie, _ := FormatCookie(key.v1.KID(), own.Public(), "", "")
			n0 := [NonceLen]byte(randomBytes(NonceLen))
			// A well-formed head; the stream is never opened.
			req, _ := http.NewRequest("GET", "http://"+addr+Mount("/hc").GetTarget(&n0, randomBytes(80)), nil)
			req.Header.Set("Cookie", cookie)
			rsp, err := hc.Do(req)
			if err != nil {
				continue
			}
			io.Copy(io.Discard, rsp.Body)
			rsp.Body.Close()
			if rsp.StatusCode == 429 {
				mu.Lock()
				challenged++
				mu.Unlock()
			}
		}
	}()
	var once sync.Once
	stop = func() int {
		once.Do(func() { close(done); wg.Wait() })
		mu.Lock()
		defer mu.Unlock()
		return challenged
	}
	t.Cleanup(func() { stop() })
	return stop
}

// freshCall is a call from a new client (no stored cookie): it reports
// whether the server challenged it, and fails the test unless it got 200.
func freshCall(t *testing.T, url string) Exchange {
	t.Helper()
	c, rec := newClient(Options{Mount: "/hc", NoTickets: true})
	rsp, body, err := fetch(t, c, "GET", url, nil)
	if err != nil || rsp.StatusCode != 200 || string(body) != "<h1>hello over httpcrypt</h1>\n" {
		t.Fatalf("fresh client under the defence: %v %v %q", rsp, err, body)
	}
	return rec.last()
}

func TestLiveAdmissionDefence(t *testing.T) {
	needDefence(t)
	s := startServe(t, "", "", "--defence", "auto", "--defence-threshold", "4", "--max-difficulty", "12")
	url := "http://" + s.addr + "/index.html"

	// Idle: no challenge, and a ticket for later: a short one (spec §7.3)
	// and, for a client with short tickets off, a v1 one.
	type holding struct {
		tap    *tap
		client *http.Client
		rec    *recorder
		ticket string
	}
	var holders []holding
	for _, v1 := range []bool{false, true} {
		holderTap := newTap()
		holder, hrec := newClient(Options{Mount: "/hc", Base: holderTap, NoShortTickets: v1})
		if rsp, _, err := fetch(t, holder, "GET", url, nil); err != nil || rsp.StatusCode != 200 {
			t.Fatalf("idle server: %v %v", rsp, err)
		}
		if x := hrec.last(); x.Credential != "key" || x.Attempts != 1 || x.Challenges != 0 || x.Echo {
			t.Fatalf("an idle server challenged: %+v", x)
		}
		holders = append(holders, holding{holderTap, holder, hrec, map[bool]string{false: "ticket (short)", true: "ticket"}[v1]})
	}

	// A burst of fresh-key calls (4 at a time, one client, no tickets)
	// switches the defence on; every call must still get through.
	loadTap := newTap()
	load, lrec := newClient(Options{Mount: "/hc", NoTickets: true, Base: loadTap})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 12; i++ {
				req, _ := http.NewRequest("GET", url, nil)
				rsp, err := load.Do(req)
				if err != nil {
					errs <- err
					return
				}
				io.Copy(io.Discard, rsp.Body)
				rsp.Body.Close()
				if rsp.StatusCode != 200 {
					errs <- errors.New(rsp.Status)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a call under load failed: %v", err)
	}
	challenges, echoed := 0, 0
	for _, x := range lrec.all {
		challenges += x.Challenges
		if x.Echo {
			echoed++
		}
		if x.Status != 200 {
			t.Fatalf("load call: %+v", x)
		}
	}
	if challenges == 0 || echoed == 0 {
		t.Fatalf("48 fresh-key calls against threshold 4: %d challenges, %d echoing calls; the defence never switched on", challenges, echoed)
	}
	maxD := 0
	for _, x := range lrec.all {
		maxD = max(maxD, x.Difficulty)
	}
	t.Logf("load: 48 calls, %d challenges, %d calls echoed, highest difficulty solved %d", challenges, echoed, maxD)
	if echoed <= challenges {
		t.Fatalf("the stored cookie was not reused: %d challenges for %d echoing calls", challenges, echoed)
	}
	for _, e := range loadTap.entries() {
		if e.status == 429 && e.typ != ProblemAdmission && e.typ != ProblemBusy || e.status != 200 && e.status != 429 {
			t.Fatalf("unexpected outer answer under load: %+v", e)
		}
		if e.typ == ProblemAdmission && (e.member != e.cookieD || e.member > 12) {
			t.Fatalf("challenge: difficulty member %d, cookie's byte %d (max 12)", e.member, e.cookieD)
		}
		if e.status == 429 && e.typ == ProblemAdmission && e.echo {
			t.Logf("an echo was refused (cookie step rollover?): %+v", e)
		}
	}

	// Keep the defence on, and show it is on before and after the ticket
	// request: a new client is challenged each time and gets through.
	stop := pressure(t, s.addr)
	time.Sleep(300 * time.Millisecond)
	x := freshCall(t, url)
	if x.Challenges == 0 || !x.Echo || x.Difficulty > 12 {
		t.Fatalf("fresh client before the ticket request: %+v, want a challenge solved", x)
	}
	solved := x.Difficulty
	for _, h := range holders {
		before := len(h.tap.entries())
		for i := 0; i < 3; i++ {
			rsp, _, err := fetch(t, h.client, "GET", url, nil)
			if err != nil || rsp.StatusCode != 200 {
				t.Fatalf("%s request %d: %v %v", h.ticket, i, rsp, err)
			}
			if x := h.rec.last(); x.Credential != h.ticket || x.Attempts != 1 || x.Challenges != 0 || x.Busy != 0 || x.Echo {
				t.Fatalf("%s request %d under the defence: %+v", h.ticket, i, x)
			}
		}
		for _, e := range h.tap.entries()[before:] {
			if !e.ticket || e.echo || e.status != 200 {
				t.Fatalf("%s request on the wire: %+v, want a ticket, no echo, 200", h.ticket, e)
			}
		}
	}
	x = freshCall(t, url)
	solved = max(solved, x.Difficulty)
	if x.Challenges == 0 {
		t.Fatalf("fresh client after the ticket requests: %+v; the defence was off, the ticket check proved nothing", x)
	}

	// hcfetch obeys the defence: a driver that did not would exit 1 with
	// error: urn:httpcrypt:admission.
	run := buildHcfetch(t)
	out, errOut, code := run("--mount", "/hc", "--repeat", "3", url)
	if code != 0 || out != "<h1>hello over httpcrypt</h1>\n" {
		t.Fatalf("hcfetch under the defence: code %d stdout %q stderr %q", code, out, errOut)
	}
	x = freshCall(t, url)
	solved = max(solved, x.Difficulty)
	if x.Challenges == 0 {
		t.Fatalf("the defence was off after hcfetch ran: %+v", x)
	}
	// The pressure (about 40 fresh-key requests a second against threshold 4)
	// asks for puzzles: d = 10 + 2·floor(log2(demand / 8)), capped at 12.
	t.Logf("fresh clients under pressure solved difficulty up to %d", solved)
	if solved == 0 {
		t.Fatal("no fresh client had to solve a puzzle (d > 0) under pressure")
	}
	n := stop()
	t.Logf("pressure requests challenged: %d", n)
	if n == 0 {
		t.Fatal("the pressure requests were never challenged")
	}
}

func TestLiveAdmissionBusyIsWaitedOut(t *testing.T) {
	needDefence(t)
	// Puzzles off (cookie only), one key agreement per second per prefix.
	s := startServe(t, "", "", "--defence", "auto", "--defence-threshold", "4", "--max-difficulty", "0",
		"--prefix-rate", "1", "--prefix-burst", "1")
	url := "http://" + s.addr + "/index.html"
	stop := pressure(t, s.addr)
	defer stop()
	time.Sleep(400 * time.Millisecond)
	w := newTap()
	c, rec := newClient(Options{Mount: "/hc", NoTickets: true, Base: w})
	busy := 0
	start := time.Now()
	for i := 0; i < 4; i++ {
		rsp, _, err := fetch(t, c, "GET", url, nil)
		if err != nil || rsp.StatusCode != 200 {
			t.Fatalf("call %d: %v %v", i, rsp, err)
		}
		x := rec.last()
		busy += x.Busy
		if i == 0 && x.Challenges == 0 {
			t.Fatalf("first call not challenged: %+v", x)
		}
	}
	t.Logf("4 calls in %v, %d busy answers waited out", time.Since(start), busy)
	if busy == 0 {
		t.Fatalf("4 calls in %v at one key agreement per second were never told busy: %+v", time.Since(start), w.entries())
	}
	for _, e := range w.entries() {
		if e.status == 429 && e.typ == ProblemBusy && !e.echo {
			t.Fatalf("busy for a request without an echo: %+v", e)
		}
	}
}

func buildHcfetch(t *testing.T) func(args ...string) (string, string, int) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "hcfetch")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/hcfetch").CombinedOutput(); err != nil {
		t.Fatalf("building hcfetch: %v\n%s", err, out)
	}
	return func(args ...string) (string, string, int) {
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
}
