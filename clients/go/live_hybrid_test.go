package httpcrypt

// Live tests of suite 2 (spec/hybrid.md) against the Rust server started
// with `httpcrypt serve --pq on`. They need a binary that has the option;
// with one that does not, they skip and say so (the binary itself is found
// as for the other live tests, whose absence fails).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// needPQServer skips the test unless `httpcrypt serve` takes --pq.
func needPQServer(t *testing.T) {
	t.Helper()
	bin := serverBin(t)
	out, _ := exec.Command(bin, "serve", "--help").CombinedOutput()
	if !bytes.Contains(out, []byte("--pq")) {
		t.Skipf("%s has no `serve --pq` (this binary predates the suite-2 server); build one that has it or set HTTPCRYPT_BIN", bin)
	}
}

func TestLiveHybrid(t *testing.T) {
	needPQServer(t)
	s := startServe(t, "", "", "--pq", "on")
	url := "http://" + s.addr + "/index.html"
	const page = "<h1>hello over httpcrypt</h1>\n"

	// require, authenticated: the GET form with ct_M in the query, then
	// tickets of the hybrid session: short ones (spec §7.3, presented as
	// hybrid ticket requests under the suite-2 kid) or v1 ones.
	for _, v1 := range []bool{false, true} {
		w := &wireLog{base: &http.Transport{}}
		c, rec := newClient(Options{Mount: "/hc", Identity: s.identity, PQ: PQRequire, NoShortTickets: v1, Base: w})
		ticket := map[bool]string{false: "ticket (short)", true: "ticket"}[v1]
		for i, want := range []string{"key", ticket, ticket} {
			rsp, body, err := fetch(t, c, "GET", url, nil)
			if err != nil || rsp.StatusCode != 200 || string(body) != page {
				t.Fatalf("request %d: %v %v %q", i+1, rsp, err, body)
			}
			if x := rec.last(); x.Suite != 2 || x.Credential != want || x.OuterMethod != "GET" || x.Attempts != 1 {
				t.Fatalf("request %d: %+v, want suite 2 with a %s over the GET form", i+1, x, want)
			}
			wantCookieValue(t, fmt.Sprintf("request %d", i+1), w.last().cookie, want)
		}
	}
	// The POST form: ct_M, then the sealed stream.
	post, rec2 := newClient(Options{Mount: "/hc", PQ: PQPrefer, NoGetForm: true, NoTickets: true})
	rsp, body, err := fetch(t, post, "GET", url, nil)
	if err != nil || rsp.StatusCode != 200 || string(body) != page {
		t.Fatalf("POST form: %v %v", rsp, err)
	}
	if x := rec2.last(); x.Suite != 2 || x.OuterMethod != "POST" {
		t.Fatalf("POST form: %+v", x)
	}
	// A v1 client still gets through a server in --pq on.
	v1, rec3 := newClient(Options{Mount: "/hc"})
	if _, _, err := fetch(t, v1, "GET", url, nil); err != nil || rec3.last().Suite != 1 {
		t.Fatalf("v1 client: %v %+v", err, rec3.last())
	}

	// The pin: the server comes back without suite 2 (same keys, same
	// address); the prefer client that saw suite 2 refuses to fall back.
	stopAll(t, s)
	startServe(t, s.addr, s.keys)
	post.Transport.(*Transport).ForgetKeys(s.addr)
	post.Transport.(*Transport).CloseIdleConnections()
	_, _, err = fetch(t, post, "GET", url, nil)
	wantCode(t, err, CodeHybridDowngrade)
	// A client that never saw suite 2 there uses v1; require refuses.
	fresh, rec4 := newClient(Options{Mount: "/hc", PQ: PQPrefer})
	if _, _, err := fetch(t, fresh, "GET", url, nil); err != nil || rec4.last().Suite != 1 {
		t.Fatalf("prefer against v1: %v %+v", err, rec4.last())
	}
	req, _ := newClient(Options{Mount: "/hc", PQ: PQRequire})
	_, _, err = fetch(t, req, "GET", url, nil)
	wantCode(t, err, CodeHybridDowngrade)
}

func TestLiveHybridOnly(t *testing.T) {
	needPQServer(t)
	s := startServe(t, "", "", "--pq", "only")
	url := "http://" + s.addr + "/index.html"
	c, rec := newClient(Options{Mount: "/hc", Identity: s.identity, PQ: PQPrefer})
	if _, _, err := fetch(t, c, "GET", url, nil); err != nil || rec.last().Suite != 2 {
		t.Fatalf("prefer against --pq only: %v %+v", err, rec.last())
	}
	v1, _ := newClient(Options{Mount: "/hc"})
	_, _, err := fetch(t, v1, "GET", url, nil)
	wantCode(t, err, CodeHybridRequired)
}

func TestLiveHybridHcfetch(t *testing.T) {
	needPQServer(t)
	s := startServe(t, "", "", "--pq", "on")
	bin := filepath.Join(t.TempDir(), "hcfetch")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/hcfetch").CombinedOutput(); err != nil {
		t.Fatalf("building hcfetch: %v\n%s", err, out)
	}
	cmd := exec.CommandContext(ctx, bin, "--mount", "/hc", "--identity", s.identity, "--pq", "require", "--repeat", "2", "http://"+s.addr+"/index.html")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	want := "request 1: status 200, credential key\nrequest 2: status 200, credential ticket (short)\n"
	if err != nil || stderr.String() != want || !strings.Contains(stdout.String(), "hello") {
		t.Fatalf("hcfetch --pq require: %v stdout %q stderr %q", err, stdout.String(), stderr.String())
	}
}
