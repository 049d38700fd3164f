package httpcrypt

// The runner of vectors/short-ticket/ (short tickets, spec §7.3; kinds in
// vectors/README.md, "Short tickets"): the derivation of k', the `Ticket`
// field, and the server's acceptance of the cookie (played by the same
// test-only server side as the v1 server_request and ticket_open kinds).

import (
	"encoding/hex"
	"path/filepath"
	"testing"
)

// shortTicketVectorDir is the short-ticket directory under the vector
// directory.
func shortTicketVectorDir() string { return filepath.Join(vectorDir(), "short-ticket") }

// shortTicketKinds are the kinds of vectors/short-ticket/; every one has a
// runner.
var shortTicketKinds = []string{"short_ticket_issue", "short_ticket_field", "short_ticket_accept"}

func TestShortTicketVectors(t *testing.T) {
	vs := loadVectorsFrom(t, shortTicketVectorDir())
	seen := map[string]int{}
	pos, neg := 0, 0
	for _, v := range vs {
		seen[v.Kind]++
		if v.Expect == "ok" {
			pos++
		} else {
			neg++
		}
		t.Run(v.Kind+"/"+v.Name, func(t *testing.T) {
			if err := checkVector(t, v); err != nil {
				t.Fatal(err)
			}
		})
	}
	for _, k := range shortTicketKinds {
		if seen[k] == 0 {
			t.Errorf("no %s case in %s", k, shortTicketVectorDir())
		}
	}
	if pos < 3 || neg <= pos {
		t.Fatalf("%d positive and %d negative short-ticket cases", pos, neg)
	}
}

// TestShortTicketVectorsCorruptedCopyFails: a copy of vectors/short-ticket/
// with every expectation altered fails case by case.
func TestShortTicketVectorsCorruptedCopyFails(t *testing.T) {
	corruptedCopyFails(t, shortTicketVectorDir())
}

func init() {
	vectorRunners["short_ticket_issue"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		tk := ticketKeyFrom(obj(in, "ticket_key"))
		st := tk.IssueShort(KID(hx(in, "kid")), [ShortHLen]byte(hx(in, "h")))
		back, err := ParseShortTicketField(st.Field())
		if err != nil || *back != *st || !isShortTicketField(st.Field()) {
			t.Fatalf("short ticket field does not parse back: %v", err)
		}
		cookie, err := FormatCookie(st.TID, st.H[:], str(in, "name_pad"), str(in, "value_pad"))
		if err != nil {
			return nil, err
		}
		return map[string]any{"key": hex.EncodeToString(st.Key[:]), "field": st.Field(), "cookie": cookie}, nil
	}
	vectorRunners["short_ticket_field"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		st, err := ParseShortTicketField(str(in, "field"))
		if err != nil {
			return nil, err
		}
		return map[string]any{"tid": hex.EncodeToString(st.TID[:]), "h": hex.EncodeToString(st.H[:]),
			"key": hex.EncodeToString(st.Key[:])}, nil
	}
	vectorRunners["short_ticket_accept"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		srv := testServerFrom(t, in)
		cred, err := ScanCookies([]string{str(in, "cookie")}, srv.lookup)
		if err != nil {
			return nil, err
		}
		if !cred.Short {
			t.Fatalf("the cookie scan found no short ticket: %+v", cred)
		}
		kid, tk, err := srv.shortTicketKey(cred.ID)
		if err != nil {
			return nil, err
		}
		k := tk.ShortKey(kid, [ShortHLen]byte(cred.Value))
		return map[string]any{"kid": hex.EncodeToString(kid[:]), "session_key": hex.EncodeToString(k[:])}, nil
	}
}
