package httpcrypt

// The engine's key decisions, without IO: which server key an attempt
// encrypts to (a suite-1 key, or a suite-2 certificate with its
// encapsulation key), which discovery the driver must run for it
// (`OPTIONS {mount}/pq` first when Options.PQ asks for suite 2, then
// `OPTIONS {mount}/`), what each answer means, and the pin that keeps an
// origin on suite 2 (spec §5, §6, spec/hybrid.md H4, H5).

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxCachedKems bounds the encapsulation keys kept by hash (1,184 bytes
// each); past it the cache starts again.
const maxCachedKems = 64

// serverKey is what an attempt encrypts to: exactly one of a suite-1 key
// and a suite-2 one.
type serverKey struct {
	v1     *DiscoveredKey
	hybrid *HybridKey
}

// HybridKey is a server's suite-2 key as a client uses it: the certificate
// (verified under the pinned identity in authenticated mode) and the
// encapsulation key it names.
type HybridKey struct {
	Cert *HybridCert
	Kem  *KemPublic
}

// hybridState is a host's suite-2 state.
type hybridState struct {
	// hybrid are the suite-2 keys of OPTIONS {mount}/pq (or of an
	// unknown-key problem), cached for the answer's max-age.
	hybrid        []HybridKey
	hybridFetched int64
	hybridMaxAge  int64
	// noHybrid: the last discovery found no suite 2. PQPrefer then uses
	// v1 while the v1 keys stay fresh, and asks OPTIONS {mount}/pq again
	// before the next v1 discovery.
	noHybrid bool
	// pinUntil is the not_after of the newest suite-2 certificate seen
	// (accepted by the mode): until then the host takes suite 2 only.
	pinUntil int64
}

func (h *hybridState) pinned(now int64) bool { return now <= h.pinUntil }

// discovery is what the driver does before an attempt.
type discovery int

const (
	haveKey     discovery = iota // the cache holds the key
	fetchHybrid                  // OPTIONS {mount}/pq, then hybridAnswer
	fetchV1                      // OPTIONS {mount}/, then storeCerts
)

// nextKey is the key an attempt to authority uses at now from the cache,
// or the discovery to run. PQOff: v1 only. PQPrefer and PQRequire: a
// cached suite-2 key; else, for PQPrefer on an origin that is not pinned
// and where suite 2 was missing at the last discovery, the v1 key; else
// OPTIONS {mount}/pq.
func (e *engine) nextKey(authority string, now int64) (*serverKey, discovery) {
	var hk *HybridKey
	fallback := e.opts.PQ == PQOff
	if !fallback {
		e.host(authority, func(h *hostState) {
			if fresh(h.hybridFetched, h.hybridMaxAge, now) {
				hk = chooseHybrid(h.hybrid, now)
			}
			fallback = e.opts.PQ == PQPrefer && !h.pinned(now) && h.noHybrid && fresh(h.fetched, h.maxAge, now)
		})
	}
	switch {
	case hk != nil:
		return &serverKey{hybrid: hk}, haveKey
	case !fallback:
		return nil, fetchHybrid
	}
	if k := e.cachedKey(authority, now); k != nil {
		return &serverKey{v1: k}, haveKey
	}
	return nil, fetchV1
}

// chooseHybrid picks the suite-2 key valid at now with the highest serial
// (later not_before on ties), or nil.
func chooseHybrid(keys []HybridKey, now int64) *HybridKey {
	var best *HybridKey
	for i := range keys {
		c := keys[i].Cert
		if c.ValidAt(now) && (best == nil || better(c.Serial, c.NotBefore, best.Cert.Serial, best.Cert.NotBefore)) {
			best = &keys[i]
		}
	}
	return best
}

// hybridAnswer decides on the answer to OPTIONS {mount}/pq. A 200 list
// with a suite-2 key valid now is cached for max-age and the key
// returned. No suite 2 (a 404, another status, an answer that is not a
// certificate list, or a list without a valid suite-2 certificate) is
// hybrid_downgrade for PQRequire and for a pinned origin; otherwise the
// absence is remembered and (nil, nil) sends the driver to v1 discovery.
// A labelled list that does not parse, certificates that fail the pinned
// identity, and a certificate whose key text is missing are errors.
func (e *engine) hybridAnswer(authority string, status int, header http.Header, body []byte) (*serverKey, error) {
	now := e.now()
	path := e.mount.HybridOptionsPath()
	why := fmt.Sprintf("OPTIONS %s answered %d", path, status)
	var keys []HybridKey
	if status == http.StatusOK {
		list, err := ParseHybridCertList(body)
		if err != nil && isCertList(header) {
			return nil, err
		}
		if err == nil {
			if keys, err = e.acceptHybrid(authority, list.Hybrid(), list.Kems, now); err != nil {
				return nil, err
			}
			why = "no valid suite-2 certificate in the answer to OPTIONS " + path
		}
	}
	var k *HybridKey
	var pin int64
	down := false
	e.host(authority, func(h *hostState) {
		if k = chooseHybrid(keys, now); k != nil {
			h.hybrid, h.hybridFetched, h.hybridMaxAge, h.noHybrid = keys, now, maxAgeOf(header), false
			return
		}
		h.hybrid, pin = nil, h.pinUntil
		if down = e.opts.PQ == PQRequire || h.pinned(now); !down {
			h.noHybrid = true
		}
	})
	switch {
	case k != nil:
		return &serverKey{hybrid: k}, nil
	case down:
		return nil, e.downgrade(authority, pin, why)
	}
	return nil, nil
}

// acceptHybrid caches the key texts kems by hash and returns the suite-2
// keys of certs the mode accepts (all, or those verifying under the
// pinned identity) whose key text is known; every accepted certificate
// pins the origin until its not_after. With no key valid now, a valid
// certificate that failed verification is bad_signature, and one whose
// key text is unknown kem_mismatch.
func (e *engine) acceptHybrid(authority string, certs []*HybridCert, kems []*KemPublic, now int64) ([]HybridKey, error) {
	var keys []HybridKey
	var pin int64
	badSig, mismatch := false, false
	e.mu.Lock()
	for _, k := range kems {
		if len(e.kems) >= maxCachedKems {
			clear(e.kems)
		}
		e.kems[k.Hash()] = k
	}
	for _, c := range certs {
		if e.identity != nil && c.Verify(e.identity) != nil {
			badSig = badSig || c.ValidAt(now)
			continue
		}
		pin = max(pin, int64(c.NotAfter))
		if k := e.kems[c.KemHash]; k != nil {
			keys = append(keys, HybridKey{Cert: c, Kem: k})
		} else if c.ValidAt(now) {
			mismatch = true
		}
	}
	e.mu.Unlock()
	e.host(authority, func(h *hostState) { h.pinUntil = max(h.pinUntil, pin) })
	if chooseHybrid(keys, now) == nil {
		switch {
		case badSig:
			return nil, &Error{Code: CodeBadSignature, Detail: BadSignatureDetail}
		case mismatch:
			return nil, &Error{Code: CodeKemMismatch, Detail: "no key text matches the kem_hash of " + hostPort(authority) + "'s suite-2 certificate"}
		}
	}
	return keys, nil
}

// downgrade is the error of a discovery without suite 2 where suite 2 is
// required (spec/hybrid.md H5).
func (e *engine) downgrade(authority string, pinUntil int64, why string) error {
	need := "which this client requires (pq=require)"
	if e.opts.PQ != PQRequire {
		need = "to which the origin is pinned until " + time.Unix(pinUntil, 0).UTC().Format(time.RFC3339)
	}
	return &Error{Code: CodeHybridDowngrade,
		Detail: fmt.Sprintf("%s offers no hybrid key agreement (%s), %s", hostPort(authority), why, need)}
}

// hybridRequired decides on an outer urn:httpcrypt:hybrid-required: a v1
// attempt of a client that may use suite 2 forgets that suite 2 was
// missing, so the retry asks OPTIONS {mount}/pq again.
func (e *engine) hybridRequired(a *attempt) bool {
	if e.opts.PQ == PQOff || a.hybrid {
		return false
	}
	e.host(a.authority, func(h *hostState) {
		h.noHybrid = false
		if a.credential == "ticket" {
			h.ticket = nil
		}
		if a.short != nil {
			h.dropShort(a.short)
		}
	})
	return true
}

// hybridUnknownKey takes the suite-2 certificates of an unknown-key
// problem (member hybrid_certs): those the mode accepts whose key text is
// cached become the host's suite-2 keys; otherwise the retry asks
// OPTIONS {mount}/pq again (and a pinned origin that offers none then is
// hybrid_downgrade).
func (e *engine) hybridUnknownKey(a *attempt, p *Problem) {
	if e.opts.PQ == PQOff {
		return
	}
	var certs []*HybridCert
	for _, l := range p.HybridCerts {
		if c, err := ParseHybridCertText(l); err == nil {
			certs = append(certs, c)
		}
	}
	now := e.now()
	keys, _ := e.acceptHybrid(a.authority, certs, nil, now)
	e.host(a.authority, func(h *hostState) {
		h.hybrid, h.hybridFetched = nil, 0
		if chooseHybrid(keys, now) != nil {
			h.hybrid, h.hybridFetched, h.noHybrid = keys, now, false
		}
	})
}

// cachedKey is the key to use at now if the cached certificates are fresh
// and one of them is valid, else nil (fetch them).
func (e *engine) cachedKey(authority string, now int64) *DiscoveredKey {
	var cached *DiscoveredKey
	e.host(authority, func(h *hostState) {
		if fresh(h.fetched, h.maxAge, now) {
			if k, err := ChooseKey(h.keys, now); err == nil {
				c := *k
				cached = &c
			}
		}
	})
	return cached
}

// fresh says whether a cache fetched at fetched with maxAge (0: no
// expiry) still holds at now.
func fresh(fetched, maxAge, now int64) bool { return maxAge == 0 || now < fetched+maxAge }

// maxAgeOf reads Cache-Control max-age (0 when absent).
func maxAgeOf(header http.Header) int64 {
	maxAge := int64(0)
	for _, d := range strings.Split(header.Get("Cache-Control"), ",") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(d), "max-age="); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				maxAge = max(n, 1) // max-age=0: ask again soon, not never
			}
		}
	}
	return maxAge
}

// isCertList says whether the answer is labelled application/httpcrypt-certs.
func isCertList(header http.Header) bool {
	ct, _, _ := strings.Cut(header.Get("Content-Type"), ";")
	return strings.EqualFold(strings.TrimSpace(ct), contentTypeCerts)
}

// storeCerts takes the 200 answer to OPTIONS {mount}/ (header and body):
// checks the certificate list in authenticated mode, caches it for
// max-age and returns the keys kept.
func (e *engine) storeCerts(authority string, status int, header http.Header, body []byte) ([]DiscoveredKey, error) {
	maxAge := maxAgeOf(header)
	certs, err := ParseCertList(body)
	if err != nil {
		if !isCertList(header) {
			return nil, e.notHTTPCrypt(authority, status) // e.g. a web server's 200 to OPTIONS
		}
		return nil, err
	}
	keys, err := e.acceptCerts(certs)
	if err != nil {
		return nil, err
	}
	now := e.now()
	e.host(authority, func(h *hostState) { h.keys, h.fetched, h.maxAge = keys, now, maxAge })
	return keys, nil
}

// acceptCerts keeps the certificates the client's mode accepts: all of
// them (opportunistic) or those verifying under the pinned identity.
func (e *engine) acceptCerts(certs []*KeyCert) ([]DiscoveredKey, error) {
	if _, err := ChooseCert(certs, e.now(), e.identity); err != nil {
		if errors.Is(err, ErrBadSignature) {
			return nil, &Error{Code: CodeBadSignature, Detail: BadSignatureDetail}
		}
		return nil, err
	}
	var keys []DiscoveredKey
	for _, c := range certs {
		if e.identity == nil || c.Verify(e.identity) == nil {
			keys = append(keys, c.Key())
		}
	}
	return keys, nil
}

// notHTTPCrypt is the diagnosis of an OPTIONS answer without certificates.
func (e *engine) notHTTPCrypt(authority string, status int) error {
	if status == 404 {
		mount := string(e.mount)
		if mount == "" {
			mount = "/"
		}
		return &Error{Code: CodeNoEndpoint, Status: status,
			Detail: fmt.Sprintf("no HTTPCrypt endpoint at %s on %s: wrong mount?", mount, hostPort(authority))}
	}
	return &Error{Code: CodeNotHTTPCrypt, Status: status,
		Detail: fmt.Sprintf("%s is not an HTTPCrypt server (OPTIONS %s answered %d)", hostPort(authority), e.mount.OptionsPath(), status)}
}
