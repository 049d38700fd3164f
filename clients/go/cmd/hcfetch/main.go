// Command hcfetch is the Go client's interop driver: it fetches a URL over
// HTTPCrypt with the contract every language's driver shares:
//
//	hcfetch [--mount PATH] [--identity B64U] [-X METHOD] [-H 'Name: value']...
//	        [-d DATA | --data-file FILE] [--repeat N] [--pq off|prefer|require]
//	        [--v1-tickets] URL
//
// The URL's path and query are the inner target. The request is sent N
// times through one client; each prints `request I: status S, credential
// key|ticket|ticket (short)` on stderr (what the outer cookie carried: a
// public key, a v1 ticket, or a short ticket, spec §7.3), and the last body
// goes to stdout. The client asks for short tickets and presents them;
// --v1-tickets never asks, so the server's v1 tickets are presented
// instead. Exit 0 when every request got an authenticated inner response,
// 1 on a protocol error (`error: CODE` on stderr), 2 on bad usage. Under a
// server's admission defence (spec §14) the Transport solves the
// challenge, echoes the cookie and waits out busy answers; the output is
// unchanged.
package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	httpcrypt "github.com/httpcrypt/httpcrypt/clients/go"
)

type args struct {
	mount, identity, method, data, dataFile, url string
	hasData                                      bool
	headers                                      []string
	repeat                                       int
	pq                                           httpcrypt.PQMode
	v1Tickets                                    bool
}

func usage(msg string) {
	fmt.Fprintf(os.Stderr, "hcfetch: %s\nusage: hcfetch [--mount PATH] [--identity B64U] [-X METHOD] [-H 'Name: value']... [-d DATA | --data-file FILE] [--repeat N] [--pq off|prefer|require] [--v1-tickets] URL\n", msg)
	os.Exit(2)
}

func parse(argv []string) args {
	a := args{method: "GET", repeat: 1}
	for i := 0; i < len(argv); i++ {
		arg := argv[i]
		// "--name=value" as well as "--name value", so that a value that
		// starts with "-" (1 in 64 base64url keys) can be passed safely.
		inline, hasInline := "", false
		if strings.HasPrefix(arg, "--") {
			if name, v, ok := strings.Cut(arg, "="); ok {
				arg, inline, hasInline = name, v, true
			}
		}
		val := func() string {
			if hasInline {
				return inline
			}
			if i+1 >= len(argv) {
				usage(arg + " needs a value")
			}
			i++
			return argv[i]
		}
		switch arg {
		case "--mount":
			a.mount = val()
		case "--identity":
			a.identity = val()
		case "-X", "--request":
			a.method = val()
		case "-H", "--header":
			a.headers = append(a.headers, val())
		case "-d", "--data":
			a.data, a.hasData = val(), true
		case "--data-file":
			a.dataFile = val()
		case "--pq":
			m, err := httpcrypt.ParsePQMode(val())
			if err != nil {
				usage("--pq takes off, prefer or require")
			}
			a.pq = m
		case "--v1-tickets":
			if hasInline {
				usage("--v1-tickets takes no value")
			}
			a.v1Tickets = true
		case "--repeat":
			n, err := strconv.Atoi(val())
			if err != nil || n < 1 || n > 1000 {
				usage("--repeat takes 1..1000")
			}
			a.repeat = n
		default:
			if strings.HasPrefix(arg, "-") || a.url != "" {
				usage("unexpected argument " + strconv.Quote(arg))
			}
			a.url = arg
		}
	}
	if a.url == "" {
		usage("missing URL")
	}
	if a.hasData && a.dataFile != "" {
		usage("-d and --data-file exclude each other")
	}
	if a.method == "GET" && (a.hasData || a.dataFile != "") {
		a.method = "POST"
	}
	return a
}

func newRequest(a args) (*http.Request, error) {
	var req *http.Request
	var err error
	switch {
	case a.dataFile != "":
		f, ferr := os.Open(a.dataFile)
		if ferr != nil {
			return nil, ferr
		}
		st, ferr := f.Stat()
		if ferr != nil {
			f.Close()
			return nil, ferr
		}
		req, err = http.NewRequest(a.method, a.url, f)
		if err == nil {
			req.ContentLength = st.Size()
			req.GetBody = func() (io.ReadCloser, error) { return os.Open(a.dataFile) }
		}
	case a.hasData:
		req, err = http.NewRequest(a.method, a.url, bytes.NewReader([]byte(a.data)))
	default:
		req, err = http.NewRequest(a.method, a.url, nil)
	}
	if err != nil {
		return nil, err
	}
	for _, h := range a.headers {
		n, v, ok := strings.Cut(h, ":")
		if !ok {
			return nil, fmt.Errorf("header %q is not 'Name: value'", h)
		}
		req.Header.Add(strings.TrimSpace(n), strings.TrimSpace(v))
	}
	return req, nil
}

func fail(err error) {
	label := "transport"
	var he *httpcrypt.Error
	if errors.As(err, &he) {
		label = he.Label()
	}
	fmt.Fprintf(os.Stderr, "hcfetch: %v\nerror: %s\n", err, label)
	os.Exit(1)
}

func main() {
	a := parse(os.Args[1:])
	var last httpcrypt.Exchange
	tr := httpcrypt.NewTransport(httpcrypt.Options{
		Mount:          a.mount,
		Identity:       a.identity,
		PQ:             a.pq,
		NoShortTickets: a.v1Tickets,
		// One request per process (without --repeat): a ticket could
		// never be presented, so the request declines one.
		OneShot: a.repeat <= 1,
		Observe: func(x httpcrypt.Exchange) { last = x },
	})
	client := &http.Client{
		Transport: tr,
		// The inner response is the answer; redirects are the caller's business.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	for i := 1; i <= a.repeat; i++ {
		req, err := newRequest(a)
		if err != nil {
			fmt.Fprintf(os.Stderr, "hcfetch: %v\n", err)
			os.Exit(2)
		}
		rsp, err := client.Do(req)
		if err != nil {
			fail(err)
		}
		fmt.Fprintf(os.Stderr, "request %d: status %d, credential %s\n", i, rsp.StatusCode, last.Credential)
		var out io.Writer = io.Discard
		if i == a.repeat {
			out = os.Stdout
		}
		_, err = io.Copy(out, rsp.Body)
		rsp.Body.Close()
		if err != nil {
			fail(err)
		}
	}
}
