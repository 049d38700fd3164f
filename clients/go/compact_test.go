package httpcrypt

import (
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/chacha20poly1305"
)

// Unit tests of profile 2 (spec §4.5) that pin the byte layouts
// independently of the stream code: associated data, nonces, target,
// response body, certificate version.

func TestCompactRequestAD0Bytes(t *testing.T) {
	ad, err := compactRequestAD0("example.com:8080")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := hex.DecodeString("6863322d726571" + "0010" + hex.EncodeToString([]byte("example.com:8080")))
	if !bytes.Equal(ad, want) {
		t.Fatalf("AD_0 prefix %x, want %x", ad, want)
	}
	if ad, err := compactRequestAD0(""); err != nil || string(ad) != "hc2-req\x00\x00" {
		t.Fatalf("empty host: %q %v", ad, err)
	}
	long := strings.Repeat("a", MaxBoundHost)
	if ad, err := compactRequestAD0(long); err != nil || binary.BigEndian.Uint16(ad[7:9]) != MaxBoundHost {
		t.Fatalf("65535-byte host must bind: %v", err)
	}
	if _, err := compactRequestAD0(long + "a"); CodeOf(err) != CodeBadHost {
		t.Fatalf("65536-byte host: %v, want bad_host", err)
	}
	if _, err := NewCompactRequestSealer(SessionKey{}, [NonceLen]byte{}, long+"a"); CodeOf(err) != CodeBadHost {
		t.Fatalf("sealer with a 65536-byte host: %v", err)
	}
	if _, err := NewCompactRequestOpener(SessionKey{}, [NonceLen]byte{}, long+"a", 0); CodeOf(err) != CodeBadHost {
		t.Fatalf("opener with a 65536-byte host: %v", err)
	}
}

// xopen opens one record (header || tag || payload) with raw
// XChaCha20-Poly1305 under the given nonce and associated-data prefix.
func xopen(t *testing.T, k SessionKey, nonce []byte, adPrefix, rec []byte) []byte {
	t.Helper()
	aead, err := chacha20poly1305.NewX(k[:])
	if err != nil {
		t.Fatal(err)
	}
	header, tag, payload := rec[:HeaderLen], rec[HeaderLen:RecordOverhead], rec[RecordOverhead:]
	ad := append(append([]byte(nil), adPrefix...), header...)
	out, err := aead.Open(nil, nonce, append(append([]byte(nil), payload...), tag...), ad)
	if err != nil {
		t.Fatalf("record does not open under AD %q: %v", ad, err)
	}
	return out
}

func TestCompactRequestRecordZeroBindsHost(t *testing.T) {
	k := SessionKey(bytes.Repeat([]byte{7}, 32))
	n0 := NewCompactNonce(1_700_000_000)
	s, err := NewCompactRequestSealer(k, n0, "h.test")
	if err != nil {
		t.Fatal(err)
	}
	stream, err := s.Finish(nil, []byte("GET / HTTP/1.1\r\n\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	// Independently: AD_0 = "hc2-req" || u16(6) || "h.test" || header_0.
	got := xopen(t, k, n0[:], []byte("hc2-req\x00\x06h.test"), stream)
	if string(got) != "GET / HTTP/1.1\r\n\r\n" {
		t.Fatalf("plaintext %q", got)
	}
	// The server opens it only under the same Host.
	for host, want := range map[string]string{"h.test": "", "H.test": CodeIntegrity, "h.test:80": CodeIntegrity, "": CodeIntegrity} {
		o, _ := NewCompactRequestOpener(k, n0, host, 0)
		if _, err := OpenAll(o, stream); CodeOf(err) != want {
			t.Fatalf("opened under host %q: %v, want %q", host, err, want)
		}
	}
	// Nor as a v1 request.
	if _, err := OpenAll(NewRequestOpener(k, n0, 0), stream); CodeOf(err) != CodeIntegrity {
		t.Fatalf("a profile-2 request opened as v1: %v", err)
	}
	// Record 1 chains on tag 0 as in v1.
	s, _ = NewCompactRequestSealer(k, n0, "h.test")
	two, _ := s.Seal(nil, []byte("ab"))
	two, _ = s.Finish(two, []byte("c"))
	xopen(t, k, n0[:], []byte("hc2-req\x00\x06h.test"), two[:RecordOverhead+2])
	n1 := nonceAdd(&n0, 1)
	xopen(t, k, n1[:], two[HeaderLen:RecordOverhead], two[RecordOverhead+2:])
}

func TestCompactResponseLayout(t *testing.T) {
	k := SessionKey(bytes.Repeat([]byte{8}, 32))
	reqN0 := NewCompactNonce(1_700_000_000)
	r := [ResponseRandomLen]byte(bytes.Repeat([]byte{0x42}, 16))
	n := CompactResponseNonce(r)
	if hex.EncodeToString(n[:]) != "ffffffffffffffff"+strings.Repeat("42", 16) {
		t.Fatalf("response nonce %x", n)
	}
	body := append([]byte(nil), r[:]...)
	body, err := SealAll(NewCompactResponseSealer(k, reqN0, r), body, []byte("HTTP/1.1 200 OK\r\n\r\nhi"), 1000)
	if err != nil {
		t.Fatal(err)
	}
	// r (16 bytes, not 24) precedes the stream; AD_0 = "hc2-rsp" || request_n0 || header_0.
	if !bytes.Equal(body[:16], r[:]) || len(body) != 16+RecordOverhead+21 {
		t.Fatalf("body layout %x", body)
	}
	got := xopen(t, k, n[:], append([]byte("hc2-rsp"), reqN0[:]...), body[16:])
	if string(got) != "HTTP/1.1 200 OK\r\n\r\nhi" {
		t.Fatalf("plaintext %q", got)
	}
	if p, err := OpenAll(NewCompactResponseOpener(k, reqN0, 0), body); err != nil || string(p) != string(got) {
		t.Fatalf("client open: %q %v", p, err)
	}
	// Bound to its request, and not a v1 response.
	other := reqN0
	other[23] ^= 1
	if _, err := OpenAll(NewCompactResponseOpener(k, other, 0), body); CodeOf(err) != CodeIntegrity {
		t.Fatalf("answer to another request: %v", err)
	}
	if _, err := OpenAll(NewResponseOpener(k, reqN0, 0), body); CodeOf(err) == "" {
		t.Fatal("a profile-2 response opened as v1")
	}
	// Shorter than r, or r alone: truncated.
	for _, n := range []int{0, 1, 15, 16} {
		if _, err := OpenAll(NewCompactResponseOpener(k, reqN0, 0), body[:n]); CodeOf(err) != CodeTruncated {
			t.Fatalf("%d bytes: %v, want truncated", n, err)
		}
	}
	// Fed in every split, it gives the same plaintext.
	mk := func() *Opener { return NewCompactResponseOpener(k, reqN0, 0) }
	if p, err := openSplits(t, mk, body); err != nil || string(p) != string(got) {
		t.Fatalf("split open: %q %v", p, err)
	}
}

func TestCompactNonceTime(t *testing.T) {
	a, b := NewCompactNonce(0x0102030405), NewCompactNonce(0x0102030405)
	if hex.EncodeToString(a[:5]) != "0102030405" || NonceTime(&a) != 0x0102030405 {
		t.Fatalf("time bytes %x", a[:5])
	}
	if bytes.Equal(a[5:], b[5:]) {
		t.Fatal("the 19 random bytes repeat")
	}
	if n := NewCompactNonce(-5); NonceTime(&n) != 0 {
		t.Fatal("a negative time is not clamped to 0")
	}
	n := NewCompactNonce(1000)
	for now, want := range map[int64]string{1000: "", 1060: "", 940: "", 1061: CodeStale, 939: CodeStale} {
		got, err := CheckNonceTime(&n, now, 60)
		if CodeOf(err) != want || (err == nil && got != 1000) {
			t.Fatalf("now %d: %d %v, want %q", now, got, err, want)
		}
	}
}

func TestCompactTargetAndRoute(t *testing.T) {
	var n0 [NonceLen]byte
	for i := range n0 {
		n0[i] = byte(i)
	}
	m := Mount("/hc")
	p := m.CompactNoncePath(&n0)
	if p != "/hc/2"+EncodeB64u(n0[:]) || len(p) != len("/hc/")+33 {
		t.Fatalf("path %q", p)
	}
	if g := m.CompactGetTarget(&n0, []byte{1, 2, 3}); g != p+"?AQID" {
		t.Fatalf("GET target %q", g)
	}
	r, err := RouteRequest("POST", p, m)
	if err != nil || r.Kind != "post" || r.Profile != ProfileCompact || r.N0 != n0 {
		t.Fatalf("route %+v %v", r, err)
	}
	r, err = RouteRequest("GET", m.NoncePath(&n0)+"?AQID", m)
	if err != nil || r.Kind != "get" || r.Profile != Profile1 || r.Query != "AQID" {
		t.Fatalf("v1 route %+v %v", r, err)
	}
	for _, seg := range []string{"1" + EncodeB64u(n0[:]), "3" + EncodeB64u(n0[:]), "2" + EncodeB64u(n0[:]) + "A", "2" + EncodeB64u(n0[:])[:31] + "="} {
		if _, err := RouteRequest("POST", "/hc/"+seg, m); CodeOf(err) != CodeBadNoncePath {
			t.Fatalf("segment %q: %v", seg, err)
		}
	}
	// The GET limit counts the extra character.
	var fit int
	for fit = 0; FitsGetFormProfile(m, fit+1, ProfileCompact); fit++ {
	}
	if !FitsGetFormProfile(m, fit, ProfileCompact) || FitsGetFormProfile(m, fit+1, ProfileCompact) {
		t.Fatal("limit search")
	}
	line := "GET " + m.CompactGetTarget(&n0, make([]byte, fit)) + " HTTP/1.1"
	if len(line) >= GetFormLimit {
		t.Fatalf("request line of %d bytes judged to fit", len(line))
	}
	line = "GET " + m.CompactGetTarget(&n0, make([]byte, fit+3)) + " HTTP/1.1"
	if len(line) < GetFormLimit {
		t.Fatalf("request line of %d bytes judged not to fit", len(line))
	}
}

func TestCompactPads(t *testing.T) {
	seen := map[int]bool{}
	for i := 0; i < 2000; i++ {
		p := RandomCompactPad()
		if len(p) > CompactMaxPad || !isB64(p) {
			t.Fatalf("pad %q", p)
		}
		seen[len(p)] = true
	}
	if len(seen) != CompactMaxPad+1 {
		t.Fatalf("pad lengths seen: %v", seen)
	}
	var id KID
	if _, err := FormatCompactCookie(id, make([]byte, 32), "abcdefg", "1234567"); err != nil {
		t.Fatal(err)
	}
	if _, err := FormatCompactCookie(id, make([]byte, 32), "abcdefgh", ""); CodeOf(err) != CodeBadCookie {
		t.Fatalf("8-character pad: %v", err)
	}
	if _, err := FormatCompactCookie(id, make([]byte, 32), "", "a=b"); CodeOf(err) != CodeBadCookie {
		t.Fatalf("pad outside the alphabet: %v", err)
	}
}

func TestCertVersion2(t *testing.T) {
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{3}, 32))
	id, _ := ParseIdentity(priv.Public().(ed25519.PublicKey))
	kex := GenerateKexSecret()
	c := SignCertVersion(priv, CertVersionCompact, 5, 100, 200, kex.Public())
	b := c.Encode()
	if b[0] != 2 || b[1] != 1 {
		t.Fatalf("version/suite bytes %x", b[:2])
	}
	back, err := ParseCertText(c.Text())
	if err != nil || back.Version != 2 || back.Verify(id) != nil || back.Profile() != ProfileCompact {
		t.Fatalf("v2 certificate: %+v %v", back, err)
	}
	if k := back.Key(); k.Version != 2 || k.Profile() != ProfileCompact {
		t.Fatalf("key of a v2 certificate: %+v", k)
	}
	// The signature covers the version byte.
	b[0] = 1
	v1, err := DecodeCert(b)
	if err != nil || v1.Verify(id) == nil {
		t.Fatalf("a v2 certificate relabelled v1 still verifies: %v", err)
	}
	for _, v := range []byte{0, 3, 255} {
		b[0] = v
		if _, err := DecodeCert(b); CodeOf(err) != CodeBadCertificate {
			t.Fatalf("version %d: %v", v, err)
		}
	}
	if k := SignCert(priv, 5, 100, 200, kex.Public()).Key(); k.Profile() != Profile1 {
		t.Fatal("a v1 certificate's key is profile 2")
	}
	// TLSA has no version: always v1.
	tl, err := ReadTLSA(3, 0, 0, EncodeTLSA(priv, c))
	if tk := tl.Key(); err != nil || tk.Profile() != Profile1 || tk.Version != 1 {
		t.Fatalf("TLSA key: %+v %v", tl, err)
	}
}

func TestCompactTransportFreshAndTicket(t *testing.T) {
	m := newCompactMemServer(t, 1_700_000_000)
	m.issueTickets = true
	var xs []Exchange
	c := memClient(m, Options{Observe: func(x Exchange) { xs = append(xs, x) }})
	for i, cred := range []string{"key", "ticket"} {
		got, err := memFetch(t, c, "GET", nil, -1)
		if err != nil || !strings.HasPrefix(got, "GET /path?q=1 0 ") {
			t.Fatalf("request %d: %q %v", i+1, got, err)
		}
		x, seen := xs[len(xs)-1], m.last()
		if x.Profile != ProfileCompact || x.Credential != cred || x.Attempts != 1 || x.OuterMethod != "GET" {
			t.Fatalf("request %d: %+v", i+1, x)
		}
		seg := strings.TrimPrefix(strings.SplitN(seen.target, "?", 2)[0], "/hc/")
		if seen.profile != ProfileCompact || len(seg) != 33 || seg[0] != '2' || seen.host != "example.test" {
			t.Fatalf("request %d: server saw %+v", i+1, seen)
		}
		if NonceTime(&seen.n0) != m.clock.Load() {
			t.Fatalf("time in n0 %d, clock %d", NonceTime(&seen.n0), m.clock.Load())
		}
		if _, ok := Get(seen.head.Fields, "date"); ok {
			t.Fatalf("profile-2 inner request carries Date: %+v", seen.head.Fields)
		}
		if _, ok := Get(seen.head.Fields, "host"); ok {
			t.Fatalf("profile-2 inner request carries Host: %+v", seen.head.Fields)
		}
	}
	// POST form and streamed bodies of every size.
	pc := memClient(m, Options{RecordSize: 1000, NoGetForm: true, NoTickets: true})
	for _, n := range []int{0, 1, 1000, 5000} {
		data, _ := io.ReadAll(&chunky{n: n})
		got, err := memFetch(t, pc, "POST", bytes.NewReader(data), int64(n))
		if err != nil || !strings.HasPrefix(got, "POST /path?q=1 ") || m.last().profile != ProfileCompact {
			t.Fatalf("POST %d bytes: %q %v", n, got, err)
		}
		if m.lastOuterLen.Load() != m.lastBodyLen.Load() {
			t.Fatalf("%d bytes: announced %d, sent %d", n, m.lastOuterLen.Load(), m.lastBodyLen.Load())
		}
		if got, err := memFetch(t, pc, "POST", io.NopCloser(&chunky{n: n}), 0); err != nil || !strings.HasPrefix(got, "POST") {
			t.Fatalf("streamed POST %d bytes: %q %v", n, got, err)
		}
	}
}

func TestCompactTransportStaleRetryCorrectsTheNonceTime(t *testing.T) {
	m := newCompactMemServer(t, 1_700_000_000)
	var xs []Exchange
	c := memClient(m, Options{ClockOffset: -5 * time.Minute, NoTickets: true, Observe: func(x Exchange) { xs = append(xs, x) }})
	if _, err := memFetch(t, c, "GET", nil, -1); err != nil {
		t.Fatal(err)
	}
	if x := xs[len(xs)-1]; x.Attempts != 2 || x.Profile != ProfileCompact {
		t.Fatalf("expected one stale retry: %+v", x)
	}
	m.mu.Lock()
	first, second := m.seen[0], m.seen[1]
	m.mu.Unlock()
	if !first.stale || NonceTime(&first.n0) != m.clock.Load()-300 || second.stale || NonceTime(&second.n0) != m.clock.Load() {
		t.Fatalf("times in n0: %d then %d, clock %d", NonceTime(&first.n0), NonceTime(&second.n0), m.clock.Load())
	}
	if first.n0 == second.n0 {
		t.Fatal("the retry reused n0")
	}
	if _, err := memFetch(t, c, "GET", nil, -1); err != nil || xs[len(xs)-1].Attempts != 1 {
		t.Fatalf("corrected offset not kept: %v %+v", err, xs[len(xs)-1])
	}
	// Without the retry the answer is the sealed stale problem.
	m2 := newCompactMemServer(t, 1_700_000_000)
	c2 := memClient(m2, Options{ClockOffset: -5 * time.Minute})
	req, _ := http.NewRequest("POST", "http://example.test/x", io.NopCloser(strings.NewReader("once")))
	if _, err := c2.Do(req); CodeOf(err) != CodeStale {
		t.Fatalf("body that cannot be resent: %v, want stale", err)
	}
}

func TestCompactTransportChoice(t *testing.T) {
	// A v1 certificate: v1 layout (Date, Host inside, 32-character segment).
	m := newMemServer(t, 1_700_000_000)
	var xs []Exchange
	c := memClient(m, Options{Observe: func(x Exchange) { xs = append(xs, x) }})
	if _, err := memFetch(t, c, "GET", nil, -1); err != nil {
		t.Fatal(err)
	}
	seen := m.last()
	if xs[0].Profile != Profile1 || seen.profile != Profile1 {
		t.Fatalf("v1 key used profile %d", seen.profile)
	}
	if _, ok := Get(seen.head.Fields, "date"); !ok {
		t.Fatal("v1 inner request without Date")
	}
	// A v2 certificate with NoCompact: v1.
	m2 := newCompactMemServer(t, 1_700_000_000)
	if _, err := memFetch(t, memClient(m2, Options{NoCompact: true}), "GET", nil, -1); err != nil || m2.last().profile != Profile1 {
		t.Fatalf("NoCompact: %v profile %d", err, m2.last().profile)
	}
	// A caller's Host apart from the URL's travels inside; the outer
	// (bound) Host stays the authority.
	req, _ := http.NewRequest("GET", "http://example.test/v", nil)
	req.Host = "virtual.test"
	req.Header.Set("Date", "Mon, 01 Jan 2024 00:00:00 GMT")
	rsp, err := memClient(m2, Options{}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	rsp.Body.Close()
	seen = m2.last()
	if h, _ := Get(seen.head.Fields, "host"); seen.profile != ProfileCompact || h != "virtual.test" || seen.host != "example.test" {
		t.Fatalf("virtual host: %+v", seen)
	}
	if d, _ := Get(seen.head.Fields, "date"); d != "Mon, 01 Jan 2024 00:00:00 GMT" {
		t.Fatalf("a caller's Date is passed on unjudged in profile 2: %q", d)
	}
	// Keys installed by hand carry their version.
	tr := NewTransport(Options{Base: m2, Now: m2.now, Mount: "/hc"})
	opts := m2.options.Load()
	tr.SetKeys("example.test", []DiscoveredKey{m2.srv.cert.Key()})
	var x Exchange
	tr.opts.Observe = func(e Exchange) { x = e }
	if _, err := memFetch(t, &http.Client{Transport: tr}, "GET", nil, -1); err != nil || x.Profile != ProfileCompact || m2.options.Load() != opts {
		t.Fatalf("SetKeys with a v2 key: %v %+v", err, x)
	}
}

func TestBoundHostOK(t *testing.T) {
	for h, want := range map[string]bool{"a.test": true, "127.0.0.1:8080": true, "[::1]:80": true,
		"[fe80::1%eth0]:80": false, "bücher.test": false, "": false, "a b": false} {
		if boundHostOK(h) != want {
			t.Fatalf("boundHostOK(%q) != %v", h, want)
		}
	}
}
