package httpcrypt

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"testing"
)

// defaultVectorDir is the shared vector directory, relative to this package.
const defaultVectorDir = "../../vectors"

// vectorDir is $HTTPCRYPT_VECTORS when set (e.g. a scratch copy of the
// repository's vectors plus ones not merged yet), else defaultVectorDir.
func vectorDir() string {
	if d := os.Getenv("HTTPCRYPT_VECTORS"); d != "" {
		return d
	}
	return defaultVectorDir
}

type vector struct {
	Kind        string         `json:"kind"`
	Name        string         `json:"name"`
	Description string         `json:"description"`
	Input       map[string]any `json:"input"`
	Expect      string         `json:"expect"`
	Output      map[string]any `json:"output"`
}

func loadVectors(t testing.TB) []vector { return loadVectorsFrom(t, vectorDir()) }

// loadVectorsFrom reads every *.json of dir, in name order.
func loadVectorsFrom(t testing.TB, dir string) []vector {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no vectors found in %s (err %v)", dir, err)
	}
	sort.Strings(files)
	var out []vector
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var v vector
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, v)
	}
	return out
}

// skipReasons names the kinds this runner does not execute, and why.
var skipReasons = map[string]string{
	"split_seal":    splitWhy,
	"split_splice":  splitWhy,
	"content_batch": splitWhy,
}

const splitWhy = "the proxy and origin side of split serving (spec/split-serving.md); a client only opens the spliced CLEAR records, which the stream_open vectors cover"

var vectorRunners = map[string]func(t *testing.T, in map[string]any) (map[string]any, error){}

func TestVectors(t *testing.T) {
	vs := loadVectors(t)
	for _, v := range vs {
		t.Run(v.Kind+"/"+v.Name, func(t *testing.T) {
			if why, ok := skipReasons[v.Kind]; ok {
				t.Skip(why)
			}
			if err := checkVector(t, v); err != nil {
				t.Fatal(err)
			}
		})
	}
	if len(vs) < 200 {
		t.Fatalf("only %d vectors found", len(vs))
	}
}

// checkVector runs one case and says how the result differs from the
// file: a negative case must fail with exactly its code, a positive one
// produce every output member.
func checkVector(t *testing.T, v vector) error {
	run, ok := vectorRunners[v.Kind]
	if !ok {
		return fmt.Errorf("no runner for kind %q", v.Kind)
	}
	out, err := run(t, v.Input)
	if v.Expect != "ok" {
		if err == nil {
			return fmt.Errorf("%s: expected %s, got success %v", v.Description, v.Expect, out)
		}
		if got := CodeOf(err); got != v.Expect {
			return fmt.Errorf("%s: expected %s, got %q (%v)", v.Description, v.Expect, got, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: unexpected error %v", v.Description, err)
	}
	for k, want := range v.Output {
		got, ok := out[k]
		if !ok {
			return fmt.Errorf("runner gave no %q", k)
		}
		if !jsonEqual(got, want) {
			return fmt.Errorf("%s: %s mismatch\n got %v\nwant %v", v.Description, k, got, want)
		}
	}
	return nil
}

func jsonEqual(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	var x, y any
	_ = json.Unmarshal(ja, &x)
	_ = json.Unmarshal(jb, &y)
	return reflect.DeepEqual(x, y)
}

// Input helpers: they panic on malformed vector files (a test bug).
func hx(in map[string]any, k string) []byte {
	s, ok := in[k].(string)
	if !ok {
		panic(fmt.Sprintf("vector input %q is not a string", k))
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

func str(in map[string]any, k string) string {
	s, _ := in[k].(string)
	return s
}

func num(in map[string]any, k string) int64 {
	f, ok := in[k].(float64)
	if !ok {
		panic(fmt.Sprintf("vector input %q is not a number", k))
	}
	return int64(f)
}

func numOr(in map[string]any, k string, d int64) int64 {
	if _, ok := in[k].(float64); ok {
		return num(in, k)
	}
	return d
}

func obj(in map[string]any, k string) map[string]any {
	m, _ := in[k].(map[string]any)
	return m
}

func n24(b []byte) [NonceLen]byte { return [NonceLen]byte(b) }

func identityOpt(in map[string]any) (*Identity, error) {
	if _, ok := in["identity_public"]; !ok {
		return nil, nil
	}
	return ParseIdentity(hx(in, "identity_public"))
}

func fieldsOut(fs []Field) [][]string {
	out := [][]string{}
	for _, f := range fs {
		out = append(out, []string{f.Name, f.Value})
	}
	return out
}

func certOut(c *KeyCert) map[string]any {
	return map[string]any{"version": c.Version, "serial": c.Serial, "not_before": c.NotBefore, "not_after": c.NotAfter,
		"kex_public": hex.EncodeToString(c.KexPublic[:]), "cert": hex.EncodeToString(c.Encode())}
}

func limitsFrom(in map[string]any) Limits {
	l := DefaultLimits()
	l.MaxInnerHead = int(numOr(in, "max_inner_head", int64(l.MaxInnerHead)))
	l.MaxInnerFields = int(numOr(in, "max_inner_fields", int64(l.MaxInnerFields)))
	return l
}

// openSplits opens body whole, byte by byte and split at every offset;
// every way must agree. It returns the plaintext.
func openSplits(t *testing.T, mk func() *Opener, body []byte) ([]byte, error) {
	feed := func(chunks [][]byte) ([]byte, error) {
		o := mk()
		var out []byte
		for _, c := range chunks {
			if err := o.Receive(c); err != nil {
				return nil, err
			}
			for {
				ev, ok, err := o.NextEvent()
				if err != nil {
					return nil, err
				}
				if !ok || ev.End {
					break
				}
				out = append(out, ev.Data...)
			}
		}
		if err := o.Finish(); err != nil {
			return nil, err
		}
		return out, nil
	}
	whole, werr := feed([][]byte{body})
	same := func(how string, p []byte, err error) {
		if CodeOf(err) != CodeOf(werr) || !bytes.Equal(p, whole) {
			t.Fatalf("%s gave %v / %q, whole gave %v", how, err, CodeOf(err), werr)
		}
	}
	var bytewise [][]byte
	for i := range body {
		bytewise = append(bytewise, body[i:i+1])
	}
	p, err := feed(bytewise)
	same("byte by byte", p, err)
	for i := 0; i <= len(body); i++ {
		p, err := feed([][]byte{body[:i], body[i:]})
		same("split at "+strconv.Itoa(i), p, err)
	}
	// Through one reused read buffer, scribbled over after every drain: the
	// opener may borrow input only until it asks for more.
	o := mk()
	var reused []byte
	buf := make([]byte, 7)
	err = nil
	for off := 0; off < len(body) && err == nil; off += len(buf) {
		n := copy(buf, body[off:])
		if err = o.Receive(buf[:n]); err != nil {
			break
		}
		for {
			ev, ok, e := o.NextEvent()
			if e != nil {
				err = e
				break
			}
			if !ok || ev.End {
				break
			}
			reused = append(reused, ev.Data...)
		}
		for i := range buf {
			buf[i] = 0xa5
		}
	}
	if err == nil {
		err = o.Finish()
	}
	if err == nil {
		same("reused buffer", reused, nil)
	} else {
		same("reused buffer", whole, err)
	}
	return whole, werr
}

func init() {
	vectorRunners["b64u"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		b, err := DecodeB64u(str(in, "text"))
		if err != nil {
			return nil, err
		}
		if EncodeB64u(b) != str(in, "text") {
			t.Fatal("re-encoding differs")
		}
		return map[string]any{"hex": hex.EncodeToString(b)}, nil
	}
	vectorRunners["kex"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		k, err := NewKexSecret(hx(in, "secret"))
		if err != nil {
			return nil, err
		}
		peer := hx(in, "peer_public")
		shared, err := k.Shared(peer)
		if err != nil {
			return nil, err
		}
		sk, err := k.SessionKey(peer)
		if err != nil {
			return nil, err
		}
		kid := KeyID(k.Public())
		return map[string]any{"public": hex.EncodeToString(k.Public()), "kid": hex.EncodeToString(kid[:]),
			"shared": hex.EncodeToString(shared), "session_key": hex.EncodeToString(sk[:])}, nil
	}
	vectorRunners["inner_request"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		h, body, err := DecodeRequest(hx(in, "message"), limitsFrom(in))
		if err != nil {
			return nil, err
		}
		if got := string(append(h.Format(nil), body...)); got != string(hx(in, "message")) {
			t.Fatalf("format does not round-trip: %q", got)
		}
		return map[string]any{"method": h.Method, "target": h.Target, "fields": fieldsOut(h.Fields), "body": hex.EncodeToString(body)}, nil
	}
	vectorRunners["inner_response"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		method := "GET" // absent: the answer to a GET (erratum E2)
		if m, ok := in["request_method"].(string); ok {
			method = m
		}
		h, body, err := DecodeResponseTo(method, hx(in, "message"), limitsFrom(in))
		if err != nil {
			return nil, err
		}
		return map[string]any{"status": h.Status, "reason": h.Reason, "fields": fieldsOut(h.Fields), "body": hex.EncodeToString(body)}, nil
	}
	vectorRunners["route"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		m, err := NewMount(str(in, "mount"))
		if err != nil {
			return nil, err
		}
		r, err := RouteRequest(str(in, "method"), str(in, "target"), m)
		if err != nil {
			return nil, err
		}
		out := map[string]any{"route": r.Kind}
		if r.Kind == "post" || r.Kind == "get" {
			out["n0"] = hex.EncodeToString(r.N0[:])
			out["profile"] = r.Profile
		}
		if r.Kind == "get" {
			out["query"] = r.Query
		}
		return out, nil
	}
	vectorRunners["cookie_scan"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		var fields []string
		for _, f := range in["fields"].([]any) {
			fields = append(fields, f.(string))
		}
		ids := map[KID]string{}
		for _, x := range in["ids"].([]any) {
			m := x.(map[string]any)
			ids[KID(hx(m, "id"))] = str(m, "kind")
		}
		c, err := ScanCookies(fields, func(k KID) string { return ids[k] })
		if err != nil {
			return nil, err
		}
		kind := "key"
		if c.Ticket {
			kind = "ticket"
		}
		return map[string]any{"kind": kind, "id": hex.EncodeToString(c.ID[:]), "value": hex.EncodeToString(c.Value)}, nil
	}
	vectorRunners["date_check"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		var d *string
		if s, ok := in["date"].(string); ok {
			d = &s
		}
		got, err := CheckDate(d, num(in, "now"), num(in, "window"))
		if err != nil {
			return nil, err
		}
		return map[string]any{"date": got}, nil
	}
	vectorRunners["nonce_time"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		n0 := n24(hx(in, "n0"))
		got, err := CheckNonceTime(&n0, num(in, "now"), num(in, "window"))
		if err != nil {
			return nil, err
		}
		if got != NonceTime(&n0) {
			t.Fatalf("CheckNonceTime %d, NonceTime %d", got, NonceTime(&n0))
		}
		return map[string]any{"time": got}, nil
	}
	vectorRunners["stream_seal"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		k := SessionKey(hx(in, "key"))
		compact := numOr(in, "profile", Profile1) == ProfileCompact
		var s *Sealer
		var body []byte
		response := str(in, "direction") == "response"
		var rn0 [NonceLen]byte
		var err error
		switch {
		case response && compact:
			rn0 = n24(hx(in, "request_n0"))
			r := [ResponseRandomLen]byte(hx(in, "response_random"))
			s = NewCompactResponseSealer(k, rn0, r)
			body = append(body, r[:]...)
		case response:
			rn0 = n24(hx(in, "request_n0"))
			n0 := n24(hx(in, "n0"))
			s = NewResponseSealer(k, rn0, n0)
			body = append(body, n0[:]...)
		case compact:
			if s, err = NewCompactRequestSealer(k, n24(hx(in, "n0")), str(in, "host")); err != nil {
				return nil, err
			}
		default:
			s = NewRequestSealer(k, n24(hx(in, "n0")))
		}
		var want []byte
		for _, r := range in["records"].([]any) {
			m := r.(map[string]any)
			p := hx(m, "plaintext")
			want = append(want, p...)
			clear, _ := m["clear"].(bool)
			final, _ := m["final"].(bool)
			switch {
			case final && clear:
				body, err = s.FinishClear(body, p)
			case final:
				body, err = s.Finish(body, p)
			case clear:
				body, err = s.SealClear(body, p)
			default:
				body, err = s.Seal(body, p)
			}
			if err != nil {
				return nil, err
			}
		}
		var mk func() *Opener
		switch {
		case response && compact:
			mk = func() *Opener { return NewCompactResponseOpener(k, rn0, DefaultMaxRecord) }
		case response:
			mk = func() *Opener { return NewResponseOpener(k, rn0, DefaultMaxRecord) }
		default:
			mk = requestOpenerFor(t, in, DefaultMaxRecord)
		}
		back, err := openSplits(t, mk, body)
		if err != nil || !bytes.Equal(back, want) {
			t.Fatalf("sealed stream does not open back: %v", err)
		}
		return map[string]any{"body": hex.EncodeToString(body)}, nil
	}
	vectorRunners["stream_open"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		k := SessionKey(hx(in, "key"))
		max := int(numOr(in, "max_record", DefaultMaxRecord))
		var mk func() *Opener
		if str(in, "direction") == "response" {
			rn0 := n24(hx(in, "request_n0"))
			mk = func() *Opener { return NewResponseOpener(k, rn0, max) }
			if numOr(in, "profile", Profile1) == ProfileCompact {
				mk = func() *Opener { return NewCompactResponseOpener(k, rn0, max) }
			}
		} else {
			if _, err := compactHostOK(in); err != nil {
				return nil, err
			}
			mk = requestOpenerFor(t, in, max)
		}
		p, err := openSplits(t, mk, hx(in, "body"))
		if err != nil {
			return nil, err
		}
		return map[string]any{"plaintext": hex.EncodeToString(p)}, nil
	}
	vectorRunners["cert"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		priv := ed25519.NewKeyFromSeed(hx(in, "identity_seed"))
		c := SignCertVersion(priv, uint8(numOr(in, "version", CertVersion1)), uint32(num(in, "serial")), uint32(num(in, "not_before")), uint32(num(in, "not_after")), hx(in, "kex_public"))
		id, err := ParseIdentity(priv.Public().(ed25519.PublicKey))
		if err != nil {
			return nil, err
		}
		if err := c.Verify(id); err != nil {
			t.Fatalf("own certificate does not verify: %v", err)
		}
		if back, err := ParseCertText(c.Text()); err != nil || *back != *c {
			t.Fatalf("own certificate does not parse back: %v", err)
		}
		var addrs []string
		for _, a := range FormatAAAA(c) {
			addrs = append(addrs, hex.EncodeToString(a[:]))
		}
		kid, signer := c.KID(), id.SignerID()
		return map[string]any{"cert": hex.EncodeToString(c.Encode()), "text": c.Text(), "kid": hex.EncodeToString(kid[:]),
			"signer": hex.EncodeToString(signer[:]), "identity_public": hex.EncodeToString(id.Bytes()),
			"aaaa": addrs, "identity_txt": FormatIdentityTXT(id)}, nil
	}
	vectorRunners["cert_verify"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		c, err := ParseCertText(str(in, "text"))
		if err != nil {
			return nil, err
		}
		id, err := ParseIdentity(hx(in, "identity_public"))
		if err != nil {
			return nil, err
		}
		if err := c.Verify(id); err != nil {
			return nil, err
		}
		return certOut(c), nil
	}
	vectorRunners["cert_choose"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		var certs []*KeyCert
		for _, l := range in["lines"].([]any) {
			c, err := ParseCertText(l.(string))
			if err != nil {
				return nil, err
			}
			certs = append(certs, c)
		}
		id, err := identityOpt(in)
		if err != nil {
			return nil, err
		}
		c, err := ChooseCert(certs, num(in, "now"), id)
		if err != nil {
			return nil, err
		}
		// The key-level choice must agree with the certificate-level one.
		var keys []DiscoveredKey
		for _, x := range certs {
			if id == nil || x.Verify(id) == nil {
				keys = append(keys, x.Key())
			}
		}
		if k, err := ChooseKey(keys, num(in, "now")); err != nil || k.Serial != c.Serial || k.NotBefore != c.NotBefore {
			t.Fatalf("ChooseKey disagrees with ChooseCert: %v", err)
		}
		return map[string]any{"serial": c.Serial, "not_before": c.NotBefore}, nil
	}
	vectorRunners["cert_list"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		certs, err := ParseCertList([]byte(str(in, "body")))
		if err != nil {
			return nil, err
		}
		serials := []uint32{}
		for _, c := range certs {
			serials = append(serials, c.Serial)
		}
		return map[string]any{"serials": serials}, nil
	}
	vectorRunners["aaaa"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		var addrs [][16]byte
		for _, a := range in["addrs"].([]any) {
			b, err := hex.DecodeString(a.(string))
			if err != nil || len(b) != 16 {
				t.Fatalf("bad address in vector: %v", a)
			}
			addrs = append(addrs, [16]byte(b))
		}
		c, err := ParseAAAA(addrs)
		if err != nil {
			return nil, err
		}
		return map[string]any{"cert": hex.EncodeToString(c.Encode())}, nil
	}
	vectorRunners["identity_txt"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		id, err := ParseIdentityTXT(str(in, "text"))
		if err != nil {
			return nil, err
		}
		return map[string]any{"identity_public": hex.EncodeToString(id.Bytes())}, nil
	}
	vectorRunners["txt"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		var strs [][]byte
		for _, s := range in["strings"].([]any) {
			b, err := hex.DecodeString(s.(string))
			if err != nil {
				t.Fatal(err)
			}
			strs = append(strs, b)
		}
		c, err := ParseTXT(strs)
		if err != nil {
			return nil, err
		}
		return map[string]any{"cert": hex.EncodeToString(c.Encode())}, nil
	}
	vectorRunners["ticket_seal"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		tk := ticketKeyFrom(obj(in, "ticket_key"))
		tic := tk.Seal(TicketContents{Key: SessionKey(hx(in, "session_key")), KID: KID(hx(in, "kid")), Expiry: uint32(num(in, "expiry"))}, n24(hx(in, "n")))
		back, err := ParseTicketField(tic.Field())
		if err != nil || *back != *tic {
			t.Fatalf("ticket field does not parse back: %v", err)
		}
		cookie, err := FormatCookie(tic.TID(), tic.Sealed(), str(in, "name_pad"), str(in, "value_pad"))
		if err != nil {
			return nil, err
		}
		return map[string]any{"ticket": hex.EncodeToString(tic[:]), "field": tic.Field(), "cookie": cookie}, nil
	}
	vectorRunners["ticket_open"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		tk := ticketKeyFrom(obj(in, "ticket_key"))
		c, err := tk.Open(hx(in, "sealed"), num(in, "now"))
		if err != nil {
			return nil, err
		}
		return map[string]any{"session_key": hex.EncodeToString(c.Key[:]), "kid": hex.EncodeToString(c.KID[:]), "expiry": c.Expiry}, nil
	}
	vectorRunners["ticket_field"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		tic, err := ParseTicketField(str(in, "field"))
		if err != nil {
			return nil, err
		}
		return map[string]any{"ticket": hex.EncodeToString(tic[:])}, nil
	}
	vectorRunners["token"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		cr := [24]byte(hx(in, "client_random"))
		secret, k := hx(in, "token_secret"), SessionKey(hx(in, "session_key"))
		r := FormatRandom(secret, k, cr)
		if back, err := VerifyRandom(secret, k, r); err != nil || back != cr {
			t.Fatalf("own token does not verify: %v", err)
		}
		return map[string]any{"client_random_field": EncodeB64u(cr[:]), "random_field": r}, nil
	}
	vectorRunners["token_verify"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		cr, err := VerifyRandom(hx(in, "token_secret"), SessionKey(hx(in, "session_key")), str(in, "random_field"))
		if err != nil {
			return nil, err
		}
		return map[string]any{"client_random": hex.EncodeToString(cr[:])}, nil
	}
	vectorRunners["server_request"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		srv := testServerFrom(t, in)
		acc, err := srv.accept(hx(in, "outer_request"))
		if err != nil {
			return nil, err
		}
		return map[string]any{"method": acc.head.Method, "target": acc.head.Target, "body": hex.EncodeToString(acc.body)}, nil
	}
	vectorRunners["exchange"] = runExchange
	vectorRunners["service_request"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		srv := testServerFrom(t, in)
		authority, _ := in["authority"].(string)
		var pass []string
		if l, ok := in["pass_outer"].([]any); ok {
			for _, n := range l {
				pass = append(pass, n.(string))
			}
		}
		sr, err := srv.serviceRequest(hx(in, "outer_request"), authority, pass)
		if err != nil {
			return nil, err
		}
		pairs := func(fs []Field) [][]string {
			out := [][]string{}
			for _, f := range fs {
				out = append(out, []string{f.Name, f.Value})
			}
			return out
		}
		return map[string]any{"method": sr.head.Method, "target": sr.head.Target, "fields": pairs(sr.head.Fields),
			"outer_fields": pairs(sr.outer), "body": hex.EncodeToString(sr.body)}, nil
	}
	vectorRunners["admit_cookie"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		addr, err := netip.ParseAddr(str(in, "addr"))
		if err != nil {
			t.Fatalf("bad address in vector: %v", err)
		}
		c := MakeAdmitCookie(hx(in, "secret"), uint32(num(in, "step")), uint8(num(in, "difficulty")), Addr16(addr))
		back, err := ParseAdmitCookie(EncodeB64u(c[:]))
		if err != nil || back != c || int64(c.Step()) != num(in, "step") || int64(c.Difficulty()) != num(in, "difficulty") {
			t.Fatalf("own cookie does not parse back: %v", err)
		}
		return map[string]any{"cookie": hex.EncodeToString(c[:]), "admit": EncodeB64u(c[:])}, nil
	}
	vectorRunners["admit_verify"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		addr, err := netip.ParseAddr(str(in, "addr"))
		if err != nil {
			t.Fatalf("bad address in vector: %v", err)
		}
		n0 := n24(hx(in, "n0"))
		secret := hx(in, "secret")
		other := bytes.Repeat([]byte{0x5a}, 32)
		// The secret is accepted as the current one and as the previous one.
		chk, err := VerifyAdmitEcho(str(in, "echo"), &n0, Addr16(addr), [][]byte{secret, other}, uint32(num(in, "step_now")))
		chk2, err2 := VerifyAdmitEcho(str(in, "echo"), &n0, Addr16(addr), [][]byte{other, secret}, uint32(num(in, "step_now")))
		if CodeOf(err) != CodeOf(err2) || (err == nil && *chk != *chk2) {
			t.Fatalf("the order of the secrets matters: %v / %v", err, err2)
		}
		if _, e := VerifyAdmitEcho(str(in, "echo"), &n0, Addr16(addr), [][]byte{other}, uint32(num(in, "step_now"))); e == nil {
			t.Fatal("echo accepted under a secret that did not make it")
		}
		if err != nil {
			return nil, err
		}
		return map[string]any{"difficulty": chk.Difficulty, "puzzle_hash": hex.EncodeToString(chk.PuzzleHash[:])}, nil
	}
	registerRspamdRunners()
	vectorRunners["tlsa"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		priv := ed25519.NewKeyFromSeed(hx(in, "identity_seed"))
		c := SignCert(priv, uint32(num(in, "serial")), uint32(num(in, "not_before")), uint32(num(in, "not_after")), hx(in, "kex_public"))
		der := EncodeTLSA(priv, c)
		back, err := ReadTLSA(3, 0, 0, der)
		if err != nil {
			t.Fatalf("own TLSA certificate does not read back: %v", err)
		}
		id, _ := ParseIdentity(priv.Public().(ed25519.PublicKey))
		if err := back.Verify(id); err != nil || back.Key() != c.Key() {
			t.Fatalf("own TLSA certificate does not verify or differs: %v", err)
		}
		return map[string]any{"der": hex.EncodeToString(der), "rdata": FormatTLSA(der)}, nil
	}
	vectorRunners["tlsa_read"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		c, err := ReadTLSA(int(num(in, "usage")), int(num(in, "selector")), int(num(in, "matching")), hx(in, "data"))
		if err != nil {
			return nil, err
		}
		id, err := identityOpt(in)
		if err != nil {
			return nil, err
		}
		if id != nil {
			if err := c.Verify(id); err != nil {
				return nil, err
			}
		}
		return map[string]any{"serial": c.Serial, "not_before": c.NotBefore, "not_after": c.NotAfter, "kex_public": hex.EncodeToString(c.KexPublic[:])}, nil
	}
}

// compactHostOK checks the host of a profile-2 request case (bad_host
// when it cannot be bound).
func compactHostOK(in map[string]any) (string, error) {
	if numOr(in, "profile", Profile1) != ProfileCompact {
		return "", nil
	}
	host := str(in, "host")
	_, err := compactRequestAD0(host)
	return host, err
}

// requestOpenerFor makes request openers for a stream case of either
// profile (profile 2 binds the input host).
func requestOpenerFor(t *testing.T, in map[string]any, max int) func() *Opener {
	k, n0 := SessionKey(hx(in, "key")), n24(hx(in, "n0"))
	if numOr(in, "profile", Profile1) != ProfileCompact {
		return func() *Opener { return NewRequestOpener(k, n0, max) }
	}
	host := str(in, "host")
	return func() *Opener {
		o, err := NewCompactRequestOpener(k, n0, host, max)
		if err != nil {
			t.Fatalf("request opener: %v", err)
		}
		return o
	}
}

func ticketKeyFrom(m map[string]any) *TicketKey {
	return &TicketKey{TID: KID(hx(m, "tid")), Key: [32]byte(hx(m, "key"))}
}
