package httpcrypt

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha3"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// testServer is the server's side of spec §11.1–§11.4, enough to play the
// server in the vectors (server_request, exchange) and in in-memory tests.
type testServer struct {
	kex           *KexSecret
	cert          *KeyCert
	identity      ed25519.PrivateKey
	ticket        *TicketKey
	ticketExpires int64
	now           int64
	mount         Mount
	maxBody       int
	// ticketKID is the kex key the ticket key came with, under which its
	// short tickets run (spec §7.3); nil: the ticket key takes v1 tickets
	// only. With a suite-2 key the same ticket key also sits in the
	// suite-2 table under suite2TID, for short tickets of hybrid sessions.
	ticketKID *KID
	// kem and hcert, when set, are the server's suite-2 key: its ML-KEM
	// key and the certificate naming it with kex (spec/hybrid.md H2).
	// pqOnly refuses v1 fresh-key requests (hybrid_required) and v1
	// tickets, as `serve --pq only` does.
	kem    *KemSecret
	hcert  *HybridCert
	pqOnly bool
}

type accepted struct {
	head *RequestHead
	body []byte
	key  SessionKey
	n0   [NonceLen]byte
	kid  KID
	// profile is 1 or 2 (the nonce segment's form); host the outer Host
	// the server parsed (bound into record 0 in profile 2).
	profile int
	host    string
	// hybrid: a suite-2 session (fresh hybrid key or a ticket of one).
	hybrid bool
	// short: the cookie carried a short ticket (spec §7.3).
	short bool
}

func testServerFrom(t *testing.T, in map[string]any) *testServer {
	kex, err := NewKexSecret(hx(in, "server_secret"))
	if err != nil {
		t.Fatal(err)
	}
	id := ed25519.NewKeyFromSeed(hx(in, "identity_seed"))
	c := obj(in, "cert")
	// A profile-2 case's server announces it with a version-2 certificate.
	version := numOr(c, "version", numOr(in, "profile", 1))
	cert := SignCertVersion(id, uint8(version), uint32(num(c, "serial")), uint32(num(c, "not_before")), uint32(num(c, "not_after")), kex.Public())
	m, err := NewMount(str(in, "mount"))
	if err != nil {
		t.Fatal(err)
	}
	tk := obj(in, "ticket_key")
	s := &testServer{kex: kex, cert: cert, identity: id, ticket: ticketKeyFrom(tk), ticketExpires: num(tk, "expires"),
		now: num(in, "now"), mount: m, maxBody: int(numOr(in, "max_body", 16<<20))}
	if _, ok := tk["kid"].(string); ok {
		kid := KID(hx(tk, "kid"))
		s.ticketKID = &kid
	}
	return s
}

// parseOuter splits an HTTP/1.1 request into method, target, fields, body.
func parseOuter(raw []byte) (method, target string, fields []Field, body []byte, ok bool) {
	i := bytes.Index(raw, []byte("\r\n\r\n"))
	if i < 0 {
		return "", "", nil, nil, false
	}
	lines := strings.Split(string(raw[:i]), "\r\n")
	parts := strings.Split(lines[0], " ")
	if len(parts) != 3 {
		return "", "", nil, nil, false
	}
	for _, l := range lines[1:] {
		n, v, found := strings.Cut(l, ":")
		if !found {
			return "", "", nil, nil, false
		}
		fields = append(fields, Field{Name: n, Value: strings.TrimSpace(v)})
	}
	return parts[0], parts[1], fields, raw[i+4:], true
}

func (s *testServer) accept(raw []byte) (*accepted, error) {
	method, target, fields, body, ok := parseOuter(raw)
	if !ok {
		return nil, errCode(CodeMalformedInner)
	}
	path, _, _ := strings.Cut(target, "?")
	if !strings.HasPrefix(path, string(s.mount)+"/") {
		return nil, errCode("outside")
	}
	host, ok := Get(fields, "host")
	if !ok || host == "" {
		return nil, errCode(CodeBadHost)
	}
	// Step 3: the nonce segment, and for profile 2 a Host that fits u16
	// (before the GET query is looked at, spec §11.1).
	if method == "POST" || method == "GET" {
		if _, profile, err := ParseNonceSegment(strings.TrimPrefix(path, string(s.mount)+"/")); err == nil &&
			profile == ProfileCompact && len(host) > MaxBoundHost {
			return nil, errCode(CodeBadHost)
		}
	}
	r, err := RouteRequest(method, target, s.mount)
	if err != nil {
		return nil, err
	}
	clen := -1
	if v, ok := Get(fields, "content-length"); ok {
		if clen, err = strconv.Atoi(v); err != nil {
			return nil, errCode(CodeMalformedInner)
		}
	}
	var stream []byte
	switch r.Kind {
	case "post":
		if clen > s.maxBody {
			return nil, ErrBodyTooLarge
		}
		stream = body
		if clen >= 0 && clen < len(body) {
			stream = body[:clen]
		}
	case "get":
		if clen > 0 || len(body) > 0 {
			return nil, errCode(CodeBadQuery)
		}
		if stream, err = DecodeQuery(r.Query, s.maxBody); err != nil {
			return nil, err
		}
	default:
		return nil, errCode(r.Kind)
	}
	var cookies []string
	for _, f := range fields {
		if strings.EqualFold(f.Name, "cookie") {
			cookies = append(cookies, f.Value)
		}
	}
	cred, err := ScanCookies(cookies, s.lookup)
	if err != nil {
		return nil, s.refuseClassical(cookies, err)
	}
	var k SessionKey
	kid := cred.ID
	if cred.Short {
		var tk *TicketKey
		if kid, tk, err = s.shortTicketKey(cred.ID); err != nil {
			return nil, err
		}
		k = tk.ShortKey(kid, [ShortHLen]byte(cred.Value))
	} else if cred.Ticket {
		c, err := s.ticket.Open(cred.Value, s.now)
		if err != nil {
			return nil, s.refuseClassical(cookies, err)
		}
		if s.lookup(c.KID) != "key" {
			return nil, s.refuseClassical(cookies, ErrUnknownKey)
		}
		k, kid = c.Key, c.KID
	} else if s.hcert != nil && cred.ID == s.hcert.KID() {
		// spec/hybrid.md H3: ct_M is the first 1,088 bytes, then the stream.
		if k, err = HybridDecapsulate(s.kex, s.kem, cred.Value, stream); err != nil {
			return nil, err
		}
		stream = stream[KemCiphertextLen:]
	} else if k, err = s.kex.SessionKey(cred.Value); err != nil {
		return nil, err
	}
	hybrid := s.hcert != nil && kid == s.hcert.KID()
	opener := NewRequestOpener(k, r.N0, DefaultMaxRecord)
	if r.Profile == ProfileCompact {
		if opener, err = NewCompactRequestOpener(k, r.N0, host, DefaultMaxRecord); err != nil {
			return nil, err
		}
	}
	plain, err := OpenAll(opener, stream)
	if err != nil {
		return nil, err
	}
	head, ibody, err := DecodeRequest(plain, DefaultLimits())
	if err != nil {
		return nil, err
	}
	return &accepted{head: head, body: ibody, key: k, n0: r.N0, kid: kid, profile: r.Profile, host: host, hybrid: hybrid, short: cred.Short}, nil
}

// suite2TID is the ID under which a server's suite-2 key table holds its
// ticket key for short tickets: SHA3-256("hc1-short-ticket-suite2" ||
// tid)[0..10]. A short ticket carries no kid, so the one issued in a
// hybrid session names the suite-2 key by this ID.
func suite2TID(tid KID) KID {
	h := sha3.Sum256(append([]byte("hc1-short-ticket-suite2"), tid[:]...))
	return KID(h[:KIDLen])
}

// shortTicketKey is the kex key ID and the ticket key of the short tickets
// under id (spec §7.3): the ticket key must have come with a kex key that
// is still held, else unknown_key. Under suite2TID it is the suite-2 key.
func (s *testServer) shortTicketKey(id KID) (KID, *TicketKey, error) {
	if s.ticketKID == nil {
		return KID{}, nil, ErrUnknownKey
	}
	kid, tk := *s.ticketKID, s.ticket
	if s.hcert != nil && id == suite2TID(s.ticket.TID) {
		kid, tk = s.hcert.KID(), &TicketKey{TID: id, Key: s.ticket.Key}
	}
	if s.lookup(kid) != "key" {
		return KID{}, nil, ErrUnknownKey
	}
	return kid, tk, nil
}

// issueShort is the short ticket the server answers an ask with, for the
// session acc runs under (its suite's table), h fresh random.
func (s *testServer) issueShort(acc *accepted) *ShortTicket {
	tk := s.ticket
	if acc.hybrid {
		tk = &TicketKey{TID: suite2TID(tk.TID), Key: tk.Key}
	}
	return tk.IssueShort(acc.kid, [ShortHLen]byte(randomBytes(ShortHLen)))
}

// lookup says what id names now: a key of either suite ("key"; the v1
// key not in pqOnly mode), the ticket key ("ticket", also under its
// suite-2 ID for short tickets), or nothing.
func (s *testServer) lookup(id KID) string {
	switch {
	case id == s.cert.KID() && !s.pqOnly && s.now <= int64(s.cert.NotAfter):
		return "key"
	case s.hcert != nil && id == s.hcert.KID() && s.now <= int64(s.hcert.NotAfter):
		return "key"
	case s.ticket != nil && id == s.ticket.TID && s.now <= s.ticketExpires:
		return "ticket"
	case s.ticket != nil && s.hcert != nil && s.ticketKID != nil && id == suite2TID(s.ticket.TID) && s.now <= s.ticketExpires:
		return "ticket"
	}
	return ""
}

// refuseClassical turns an unknown_key of a pqOnly server into
// hybrid_required when a fresh-key cookie names the v1 key ID of its kex
// key (spec/hybrid.md H3 step 1).
func (s *testServer) refuseClassical(cookies []string, err error) error {
	if !s.pqOnly || CodeOf(err) != CodeUnknownKey {
		return err
	}
	c, e := ScanCookies(cookies, func(id KID) string {
		if id == s.cert.KID() && s.now <= int64(s.cert.NotAfter) {
			return "key"
		}
		return ""
	})
	if e == nil && !c.Ticket {
		return ErrHybridRequired
	}
	return err
}

// hybridServerFrom is testServerFrom with the suite-2 key of a vector
// (kem_seed, the cert fields, version 1), holding it alone: pqOnly.
func hybridServerFrom(t *testing.T, in map[string]any) *testServer {
	s := testServerFrom(t, in)
	kem, err := NewKemSecret(hx(in, "kem_seed"))
	if err != nil {
		t.Fatal(err)
	}
	c := obj(in, "cert")
	s.kem, s.pqOnly = kem, true
	s.hcert = SignHybridCert(s.identity, CertVersion1, uint32(num(c, "serial")), uint32(num(c, "not_before")), uint32(num(c, "not_after")), s.kex.Public(), kem.Public().Hash())
	return s
}

// protocolFields are the inner request fields the server consumes (spec
// §4.3, erratum E1): the freshness Date (§8.1), the token fields
// Client-Random and Random (§8.4) and Ticket (§7.2). They never reach the
// service.
var protocolFields = []string{"date", "client-random", "random", "ticket"}

// serviceRequest is what the service is handed for the outer request raw
// (spec §4.3, erratum E1).
type serviceRequest struct {
	// head is built from the inner request alone: its method, target and
	// fields but the protocol's own, with a Host first where the inner head
	// has none.
	head *RequestHead
	body []byte
	// outer holds the allow-listed outer fields, apart from the request:
	// unauthenticated.
	outer []Field
}

// serviceRequest accepts and opens raw and builds the service's request.
// Where the inner head has no Host, the service's Host is the outer Host a
// profile-2 stream binds, else authority (the configured name; "" for
// none), else there is none: an outer Host nothing authenticated never
// reaches the service. passOuter names the outer fields handed over apart:
// each name in list order, its values in outer order; no other outer field
// takes part.
func (s *testServer) serviceRequest(raw []byte, authority string, passOuter []string) (*serviceRequest, error) {
	acc, err := s.accept(raw)
	if err != nil {
		return nil, err
	}
	head := &RequestHead{Method: acc.head.Method, Target: acc.head.Target}
	if _, ok := Get(acc.head.Fields, "host"); !ok {
		switch {
		case acc.profile == ProfileCompact:
			head.Fields = append(head.Fields, Field{Name: "Host", Value: acc.host})
		case authority != "":
			head.Fields = append(head.Fields, Field{Name: "Host", Value: authority})
		}
	}
	for _, f := range acc.head.Fields {
		if !slices.ContainsFunc(protocolFields, func(p string) bool { return strings.EqualFold(p, f.Name) }) {
			head.Fields = append(head.Fields, f)
		}
	}
	_, _, fields, _, _ := parseOuter(raw)
	var outer []Field
	for _, name := range passOuter {
		for _, f := range fields {
			if strings.EqualFold(f.Name, name) {
				outer = append(outer, f)
			}
		}
	}
	return &serviceRequest{head: head, body: acc.body, outer: outer}, nil
}

// sealResponse seals an inner response as the server answers acc: v1
// `n0 || stream` under the 24-byte nonce, profile 2 `r || stream` under
// 0xff^8 || r; nonce holds 24 or 16 bytes accordingly.
func (acc *accepted) sealResponse(nonce, inner []byte, recordSize int) ([]byte, error) {
	out := append([]byte(nil), nonce...)
	var s *Sealer
	if acc.profile == ProfileCompact {
		s = NewCompactResponseSealer(acc.key, acc.n0, [ResponseRandomLen]byte(nonce))
	} else {
		s = NewResponseSealer(acc.key, acc.n0, n24(nonce))
	}
	return SealAll(s, out, inner, recordSize)
}

// runExchange plays both sides of an exchange vector.
func runExchange(t *testing.T, in map[string]any) (map[string]any, error) {
	srv := testServerFrom(t, in)
	n0 := n24(hx(in, "n0"))
	compact := numOr(in, "profile", Profile1) == ProfileCompact
	formatCookie := FormatCookie
	if compact {
		formatCookie = FormatCompactCookie
	}
	var k SessionKey
	var cookie string
	var err error
	if _, ok := in["ticket"]; ok {
		tic := Ticket(hx(in, "ticket"))
		k = SessionKey(hx(in, "ticket_session_key"))
		cookie, err = formatCookie(tic.TID(), tic.Sealed(), str(in, "name_pad"), str(in, "value_pad"))
	} else {
		var client *KexSecret
		if client, err = NewKexSecret(hx(in, "client_secret")); err != nil {
			return nil, err
		}
		// The client learns the server key from the certificate text.
		cert, err := ParseCertText(srv.cert.Text())
		if err != nil {
			return nil, err
		}
		if k, err = client.SessionKey(cert.KexPublic[:]); err != nil {
			return nil, err
		}
		// The certificate's version chooses the profile (spec §4.5).
		if got := cert.Key(); (got.Profile() == ProfileCompact) != compact {
			t.Fatalf("certificate version %d for a profile-%d case", cert.Version, map[bool]int{false: 1, true: 2}[compact])
		}
		cookie, err = formatCookie(cert.KID(), client.Public(), str(in, "name_pad"), str(in, "value_pad"))
		if err != nil {
			return nil, err
		}
	}
	if err != nil {
		return nil, err
	}
	inner := hx(in, "inner_request")
	host := str(in, "host")
	sealer := NewRequestSealer(k, n0)
	noncePath, getTarget := srv.mount.NoncePath, srv.mount.GetTarget
	if compact {
		if sealer, err = NewCompactRequestSealer(k, n0, host); err != nil {
			return nil, err
		}
		noncePath, getTarget = srv.mount.CompactNoncePath, srv.mount.CompactGetTarget
	}
	stream, err := SealAll(sealer, nil, inner, int(num(in, "record_size")))
	if err != nil {
		return nil, err
	}
	var outer []byte
	if str(in, "form") == "get" {
		outer = FormatRequestHead(true, getTarget(&n0, stream), host, cookie, 0)
	} else {
		outer = append(FormatRequestHead(false, noncePath(&n0), host, cookie, len(stream)), stream...)
	}

	// Server side: accept, check the inner request, seal the response.
	acc, err := srv.accept(outer)
	if err != nil {
		return nil, err
	}
	if got := append(acc.head.Format(nil), acc.body...); !bytes.Equal(got, inner) {
		t.Fatalf("server saw a different inner request: %q", got)
	}
	if want := map[bool]int{false: Profile1, true: ProfileCompact}[compact]; acc.profile != want || acc.host != host {
		t.Fatalf("server took profile %d, host %q", acc.profile, acc.host)
	}
	var rnonce []byte
	if compact {
		rnonce = hx(in, "response_random")
	} else {
		rnonce = hx(in, "response_n0")
	}
	rsp, err := acc.sealResponse(rnonce, hx(in, "inner_response"), int(num(in, "response_record_size")))
	if err != nil {
		return nil, err
	}

	// Client side again: open the response with k and the request nonce.
	opener := NewResponseOpener(k, n0, DefaultMaxRecord)
	if compact {
		opener = NewCompactResponseOpener(k, n0, DefaultMaxRecord)
	}
	plain, err := OpenAll(opener, rsp)
	if err != nil {
		return nil, err
	}
	head, body, err := DecodeResponse(plain, DefaultLimits())
	if err != nil {
		return nil, err
	}
	if got := append(head.Format(nil), body...); !bytes.Equal(got, hx(in, "inner_response")) {
		t.Fatalf("client opened a different inner response: %q", got)
	}
	return map[string]any{"cert_text": srv.cert.Text(), "session_key": hex.EncodeToString(k[:]), "cookie": cookie,
		"outer_request": hex.EncodeToString(outer), "response_body": hex.EncodeToString(rsp)}, nil
}
