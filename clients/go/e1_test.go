package httpcrypt

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// wireRecorder relays loopback connections to target and keeps every byte
// the clients sent: what the network sees of their requests.
type wireRecorder struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	sent   bytes.Buffer
}

func startWireRecorder(t *testing.T, target string) *wireRecorder {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w := &wireRecorder{l: l, target: target}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go w.relay(c)
		}
	}()
	return w
}

func (w *wireRecorder) relay(c net.Conn) {
	defer c.Close()
	s, err := net.Dial("tcp", w.target)
	if err != nil {
		return
	}
	defer s.Close()
	go func() { _, _ = io.Copy(c, s); c.Close() }()
	buf := make([]byte, 32*1024)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			w.mu.Lock()
			w.sent.Write(buf[:n])
			w.mu.Unlock()
			if _, err := s.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (w *wireRecorder) bytes() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]byte(nil), w.sent.Bytes()...)
}

// Erratum E1: every field the caller sets reaches the service inside the
// sealed request and never shows on the wire; the outer requests carry
// only what the network needs.
func TestLiveCallerFieldsTravelInside(t *testing.T) {
	s := startGateway(t)
	relay := startWireRecorder(t, s.addr)
	c, _ := newClient(Options{Mount: "/hc", NoGetForm: true})
	secrets := map[string]string{
		"Authorization": "Bearer e1-secret-token", "X-Caller": "e1-caller-field",
		"User-Agent": "e1-agent/1.0", "Accept": "text/e1", "Cookie": "sid=e1-cookie",
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+relay.l.Addr().String()+"/echo", nil)
	for k, v := range secrets {
		req.Header.Set(k, v)
	}
	rsp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer rsp.Body.Close()
	var doc struct{ Headers [][2]string }
	if err := json.NewDecoder(rsp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, h := range doc.Headers {
		seen[strings.ToLower(h[0])] = h[1]
	}
	wire := relay.bytes()
	for k, v := range secrets {
		if seen[strings.ToLower(k)] != v {
			t.Errorf("the service saw %s = %q, want %q", k, seen[strings.ToLower(k)], v)
		}
		if bytes.Contains(wire, []byte(v)) {
			t.Errorf("%s travelled in clear", k)
		}
	}
	network := map[string]bool{"host": true, "cookie": true, "content-type": true, "content-length": true, "transfer-encoding": true}
	heads := 0
	for _, head := range bytes.Split(wire, []byte("\r\n\r\n")) {
		if !bytes.HasPrefix(head, []byte("OPTIONS ")) && !bytes.HasPrefix(head, []byte("POST ")) {
			continue
		}
		heads++
		for _, line := range strings.Split(string(head), "\r\n")[1:] {
			if name, _, _ := strings.Cut(line, ":"); !network[strings.ToLower(name)] {
				t.Errorf("outer field %q is not for the network", line)
			}
		}
	}
	if heads != 2 {
		t.Fatalf("want the OPTIONS and the sealed POST on the wire, got %d heads", heads)
	}
}
