package httpcrypt

// The runner of vectors/hybrid/ (suite 2, spec/hybrid.md; kinds in
// vectors/README.md), and a corrupted copy of it that must fail.

import (
	"bytes"
	"crypto/ed25519"
	"crypto/mlkem/mlkemtest"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

// hybridVectorDir is the suite-2 directory under the vector directory.
func hybridVectorDir() string { return filepath.Join(vectorDir(), "hybrid") }

// hybridKinds are the kinds of vectors/hybrid/; every one has a runner.
var hybridKinds = []string{"xwing", "hybrid_cert", "hybrid_cert_verify", "hybrid_aaaa", "hybrid_cert_list", "hybrid_exchange", "hybrid_server_request"}

func TestHybridVectors(t *testing.T) {
	vs := loadVectorsFrom(t, hybridVectorDir())
	seen := map[string]int{}
	for _, v := range vs {
		seen[v.Kind]++
		t.Run(v.Kind+"/"+v.Name, func(t *testing.T) {
			if err := checkVector(t, v); err != nil {
				t.Fatal(err)
			}
		})
	}
	for _, k := range hybridKinds {
		if seen[k] == 0 {
			t.Errorf("no %s case in %s", k, hybridVectorDir())
		}
	}
	if len(vs) < 40 {
		t.Fatalf("only %d hybrid vectors found", len(vs))
	}
}

// TestHybridVectorsCorruptedCopyFails runs a copy of vectors/hybrid/ in
// which every case is altered in what it expects: every one must fail, so
// a runner that checks nothing cannot pass.
func TestHybridVectorsCorruptedCopyFails(t *testing.T) {
	corruptedCopyFails(t, hybridVectorDir())
}

// corruptedCopyFails runs a copy of the vectors of src in which every case
// is altered in what it expects (a character of its first output string,
// or the error code), and requires every one to fail.
func corruptedCopyFails(t *testing.T, src string) {
	t.Helper()
	dir := t.TempDir()
	files, err := filepath.Glob(filepath.Join(src, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no vectors in %s: %v", src, err)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatal(err)
		}
		if v["expect"] == "ok" {
			if !corruptFirstString(v["output"]) {
				t.Fatalf("%s: no output string to corrupt", f)
			}
		} else if v["expect"] == CodeIntegrity {
			v["expect"] = CodeTruncated
		} else {
			v["expect"] = CodeIntegrity
		}
		out, _ := json.Marshal(v)
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	vs := loadVectorsFrom(t, dir)
	for _, v := range vs {
		if err := checkVector(t, v); err == nil {
			t.Errorf("corrupted case %s passed", v.Name)
		}
	}
	if len(vs) != len(files) {
		t.Fatalf("%d corrupted cases read back, %d written", len(vs), len(files))
	}
}

// corruptFirstString changes the last character of the first string leaf
// of x (members in name order, arrays in order).
func corruptFirstString(x any) bool {
	switch x := x.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if s, ok := x[k].(string); ok && s != "" {
				x[k] = flipLast(s)
				return true
			}
			if corruptFirstString(x[k]) {
				return true
			}
		}
	case []any:
		for i, e := range x {
			if s, ok := e.(string); ok && s != "" {
				x[i] = flipLast(s)
				return true
			}
			if corruptFirstString(e) {
				return true
			}
		}
	}
	return false
}

func flipLast(s string) string {
	c := byte('A')
	if s[len(s)-1] == 'A' {
		c = 'B'
	}
	return s[:len(s)-1] + string(c)
}

func hexList(addrs [][16]byte) []string {
	out := []string{}
	for _, a := range addrs {
		out = append(out, hex.EncodeToString(a[:]))
	}
	return out
}

func init() {
	vectorRunners["xwing"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		kem, kex, err := XWingExpandSeed(hx(in, "seed"))
		if err != nil {
			return nil, err
		}
		pk := append(kem.Public().Bytes(), kex.Public()...)
		eseed := hx(in, "eseed")
		ssM, ctM, err := mlkemtest.Encapsulate768(kem.Public().ek, eseed[:32])
		if err != nil {
			t.Fatal(err)
		}
		eph, err := NewKexSecret(eseed[32:])
		if err != nil {
			return nil, err
		}
		a, err := HybridAgreementFrom(kex.Public(), eph, ctM, ssM)
		if err != nil {
			return nil, err
		}
		k, err := HybridDecapsulate(kex, kem, a.CtX[:], a.CtM)
		if err != nil {
			return nil, err
		}
		if k != a.Key {
			t.Fatal("the two halves of the agreement differ")
		}
		return map[string]any{"pk": hex.EncodeToString(pk), "ct": hex.EncodeToString(append(a.CtM, a.CtX[:]...)),
			"ss": hex.EncodeToString(k[:])}, nil
	}
	vectorRunners["hybrid_cert"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		priv := ed25519.NewKeyFromSeed(hx(in, "identity_seed"))
		kem, err := NewKemSecret(hx(in, "kem_seed"))
		if err != nil {
			return nil, err
		}
		c := SignHybridCert(priv, uint8(num(in, "version")), uint32(num(in, "serial")), uint32(num(in, "not_before")),
			uint32(num(in, "not_after")), hx(in, "kex_public"), kem.Public().Hash())
		id, _ := ParseIdentity(priv.Public().(ed25519.PublicKey))
		if err := c.Verify(id); err != nil {
			t.Fatalf("own certificate does not verify: %v", err)
		}
		if back, err := ParseHybridCertText(c.Text()); err != nil || *back != *c {
			t.Fatalf("own certificate does not parse back: %v", err)
		}
		if back, err := ParseHybridAAAA(FormatHybridAAAA(c)); err != nil || *back != *c {
			t.Fatalf("own AAAA set does not parse back: %v", err)
		}
		if back, err := ParseKemText(kem.Public().Text()); err != nil || back.Check(c) != nil || len(kem.Public().Text()) != KemTextLen {
			t.Fatalf("own key text does not parse back: %v", err)
		}
		kid, hash := c.KID(), c.KemHash
		return map[string]any{"cert": hex.EncodeToString(c.Encode()), "text": c.Text(), "kid": hex.EncodeToString(kid[:]),
			"kem_hash": hex.EncodeToString(hash[:]), "kem_text": kem.Public().Text(), "aaaa": hexList(FormatHybridAAAA(c))}, nil
	}
	vectorRunners["hybrid_cert_verify"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		ac, err := ParseAnyCertText(str(in, "text"))
		if err != nil {
			return nil, err
		}
		id, err := ParseIdentity(hx(in, "identity_public"))
		if err != nil {
			return nil, err
		}
		// A suite-1 certificate verifies as one, or not at all; either way
		// it is not a suite-2 certificate.
		if err := ac.Verify(id); err != nil {
			return nil, err
		}
		c := ac.Hybrid
		if c == nil {
			return nil, ErrBadCertificate
		}
		if text, ok := in["kem_text"].(string); ok {
			kem, err := ParseKemText(text)
			if err != nil {
				return nil, err
			}
			if err := kem.Check(c); err != nil {
				return nil, err
			}
		}
		kid := c.KID()
		return map[string]any{"version": c.Version, "serial": c.Serial, "not_before": c.NotBefore, "not_after": c.NotAfter,
			"kex_public": hex.EncodeToString(c.KexPublic[:]), "kem_hash": hex.EncodeToString(c.KemHash[:]),
			"kid": hex.EncodeToString(kid[:])}, nil
	}
	vectorRunners["hybrid_aaaa"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		var addrs [][16]byte
		for _, a := range in["addrs"].([]any) {
			b, err := hex.DecodeString(a.(string))
			if err != nil || len(b) != 16 {
				t.Fatalf("bad address in vector: %v", a)
			}
			addrs = append(addrs, [16]byte(b))
		}
		c, err := ParseHybridAAAA(addrs)
		if err != nil {
			return nil, err
		}
		return map[string]any{"cert": hex.EncodeToString(c.Encode())}, nil
	}
	vectorRunners["hybrid_cert_list"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		l, err := ParseHybridCertList([]byte(str(in, "body")))
		if err != nil {
			return nil, err
		}
		certs, hashes := []any{}, []string{}
		for _, c := range l.Certs {
			kid := c.KID()
			certs = append(certs, map[string]any{"suite": c.Suite(), "kid": hex.EncodeToString(kid[:])})
		}
		for _, k := range l.Kems {
			h := k.Hash()
			hashes = append(hashes, hex.EncodeToString(h[:]))
		}
		return map[string]any{"certs": certs, "kem_hashes": hashes}, nil
	}
	vectorRunners["hybrid_server_request"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		acc, err := hybridServerFrom(t, in).accept(hx(in, "outer_request"))
		if err != nil {
			return nil, err
		}
		return map[string]any{"method": acc.head.Method, "target": acc.head.Target, "body": hex.EncodeToString(acc.body)}, nil
	}
	vectorRunners["hybrid_exchange"] = runHybridExchange
}

// runHybridExchange plays both sides of a hybrid_exchange case: the client
// learns the suite-2 key from its texts, builds the outer request, the
// in-test server accepts it and seals the response, the client opens it.
func runHybridExchange(t *testing.T, in map[string]any) (map[string]any, error) {
	srv := hybridServerFrom(t, in)
	cert, err := ParseHybridCertText(srv.hcert.Text())
	if err != nil {
		return nil, err
	}
	kem, err := ParseKemText(srv.kem.Public().Text())
	if err != nil {
		return nil, err
	}
	if err := kem.Check(cert); err != nil {
		return nil, err
	}
	n0 := n24(hx(in, "n0"))
	var k SessionKey
	var cookie string
	var ctM []byte
	if _, ok := in["ticket"]; ok {
		tic := Ticket(hx(in, "ticket"))
		k = SessionKey(hx(in, "ticket_session_key"))
		cookie, err = FormatCookie(tic.TID(), tic.Sealed(), str(in, "name_pad"), str(in, "value_pad"))
	} else {
		client, err := NewKexSecret(hx(in, "client_secret"))
		if err != nil {
			return nil, err
		}
		e := obj(in, "encapsulation")
		// crypto/mlkem encapsulates deterministically in tests: check the
		// case's ct_m and ss_m against its m.
		ss, ct, err := mlkemtest.Encapsulate768(kem.ek, hx(e, "m"))
		if err != nil || !bytes.Equal(ct, hx(e, "ct_m")) || !bytes.Equal(ss, hx(e, "ss_m")) {
			t.Fatalf("ML-KEM encapsulation with m differs from the case: %v", err)
		}
		a, err := HybridAgreementFrom(cert.KexPublic[:], client, hx(e, "ct_m"), hx(e, "ss_m"))
		if err != nil {
			return nil, err
		}
		k, ctM = a.Key, a.CtM
		cookie, err = FormatCookie(cert.KID(), a.CtX[:], str(in, "name_pad"), str(in, "value_pad"))
		if err != nil {
			return nil, err
		}
	}
	if err != nil {
		return nil, err
	}
	inner := hx(in, "inner_request")
	stream, err := SealAll(NewRequestSealer(k, n0), nil, inner, int(num(in, "record_size")))
	if err != nil {
		return nil, err
	}
	payload := append(ctM, stream...)
	var outer []byte
	if str(in, "form") == "get" {
		outer = FormatRequestHead(true, srv.mount.GetTarget(&n0, payload), str(in, "host"), cookie, 0)
	} else {
		outer = append(FormatRequestHead(false, srv.mount.NoncePath(&n0), str(in, "host"), cookie, len(payload)), payload...)
	}

	acc, err := srv.accept(outer)
	if err != nil {
		return nil, err
	}
	if got := append(acc.head.Format(nil), acc.body...); !bytes.Equal(got, inner) || acc.key != k || !acc.hybrid {
		t.Fatalf("server saw a different request (hybrid %v): %q", acc.hybrid, got)
	}
	rsp, err := acc.sealResponse(hx(in, "response_n0"), hx(in, "inner_response"), int(num(in, "response_record_size")))
	if err != nil {
		return nil, err
	}
	plain, err := OpenAll(NewResponseOpener(k, n0, DefaultMaxRecord), rsp)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(plain, hx(in, "inner_response")) {
		t.Fatalf("client opened a different inner response: %q", plain)
	}
	kid := cert.KID()
	return map[string]any{"cert_text": cert.Text(), "kem_text": kem.Text(), "kid": hex.EncodeToString(kid[:]),
		"session_key": hex.EncodeToString(k[:]), "cookie": cookie, "outer_request": hex.EncodeToString(outer),
		"response_body": hex.EncodeToString(rsp)}, nil
}
