package httpcrypt

// The settings of a Transport and what it reports of each call.

import (
	"errors"
	"net/http"
	"time"
)

// KeyPolicy says which client key pair a request uses.
type KeyPolicy int

const (
	// FreshKeyPerRequest: a new X25519 key pair for every request (unlinkable).
	FreshKeyPerRequest KeyPolicy = iota
	// ReuseKeyPerHost: one key pair per host, so the server's session cache applies.
	ReuseKeyPerHost
)

// PQMode says whether a Transport uses suite 2, the hybrid X25519 +
// ML-KEM-768 key agreement (spec/hybrid.md H5).
type PQMode int

const (
	// PQOff: suite 1 only, exactly as a v1 client (the default).
	PQOff PQMode = iota
	// PQPrefer asks `OPTIONS {mount}/pq` first and uses suite 2 when the
	// server offers it, else v1. An origin whose suite-2 certificate was
	// seen is pinned to suite 2 until that certificate's not_after: a later
	// discovery offering only suite 1 is hybrid_downgrade.
	PQPrefer
	// PQRequire: suite 2 or hybrid_downgrade.
	PQRequire
)

// ParsePQMode reads "off", "prefer" or "require".
func ParsePQMode(s string) (PQMode, error) {
	for m := PQOff; m <= PQRequire; m++ {
		if s == m.String() {
			return m, nil
		}
	}
	return PQOff, errors.New("pq mode must be off, prefer or require")
}

// String is the mode's name: off, prefer or require.
func (m PQMode) String() string {
	switch m {
	case PQPrefer:
		return "prefer"
	case PQRequire:
		return "require"
	}
	return "off"
}

// Defaults of ShortPolicy (spec §7.3).
const (
	// DefaultShortTicketReuse is R: the requests one short ticket is
	// presented with before the client asks for a new one. Requests that
	// carry the same ticket are linkable to each other, as requests under
	// one reused key pair are.
	DefaultShortTicketReuse = 16
	// DefaultShortTicketMaxAge is T: how long after its first use the
	// client asks for a new short ticket.
	DefaultShortTicketMaxAge = 600 * time.Second
)

// ShortPolicy says when a client asks for a new short ticket (spec §7.3).
// Zero fields take the defaults.
type ShortPolicy struct {
	// Reuse is R, the requests per short ticket: the request that uses
	// the held ticket for the R-th time asks for a new one (1 asks on
	// every request, so no two requests share a ticket).
	Reuse int
	// MaxAge is T: a request once T has passed since the held ticket's
	// first use asks for a new one (whole seconds, the engine's clock).
	MaxAge time.Duration
}

// reuse is R with its default.
func (p ShortPolicy) reuse() int {
	if p.Reuse <= 0 {
		return DefaultShortTicketReuse
	}
	return p.Reuse
}

// maxAge is T in seconds with its default.
func (p ShortPolicy) maxAge() int64 {
	if p.MaxAge <= 0 {
		return int64(DefaultShortTicketMaxAge / time.Second)
	}
	return int64(p.MaxAge / time.Second)
}

// Options configure a Transport. The zero value is the Rust client's
// default: opportunistic mode, empty mount, GET form for small requests,
// tickets on (short tickets asked for and presented), a fresh key pair
// per request.
type Options struct {
	// Mount is the server's HTTPCrypt path prefix (e.g. "/hc").
	Mount string
	// Identity pins the server's Ed25519 identity key (base64url):
	// authenticated mode, certificates must verify under it.
	Identity string
	// Base carries the outer requests; nil uses a new http.Transport
	// (proxy from the environment, no transparent compression, and a
	// server's early answer read after it stopped taking the body).
	Base http.RoundTripper
	// KeyPolicy chooses fresh or per-host client key pairs.
	KeyPolicy KeyPolicy
	// NoGetForm always uses the POST form.
	NoGetForm bool
	// NoTickets never presents tickets the server issued (and never asks
	// for short ones).
	NoTickets bool
	// NoShortTickets never asks for short tickets (spec §7.3): the server's
	// v1 tickets (§7.2) are presented instead, as by a client of the
	// contract alone (hcfetch --v1-tickets).
	NoShortTickets bool
	// ShortTickets says when to ask for a new short ticket (R and T).
	ShortTickets ShortPolicy
	// OneShot is for a client that sends one request and keeps nothing
	// (a command-line fetch): it presents and asks for no ticket, and a
	// safe request declines one (`Ticket: none`, spec §7.3), so the answer
	// carries no ticket it could never present. hcfetch without --repeat.
	OneShot bool
	// NoCompact always uses the v1 request layout, even with a key whose
	// certificate has version 2 (spec §4.5 lets a client do so).
	NoCompact bool
	// PQ chooses the hybrid key agreement (suite 2): off (default),
	// prefer or require.
	PQ PQMode
	// RecordSize is the plaintext size of request records (default 16 KiB).
	RecordSize int
	// Limits bound the server's (hostile) responses; zero fields take defaults.
	Limits Limits
	// Now is the clock (default time.Now).
	Now func() time.Time
	// ClockOffset is added to the clock for the inner Date (v1) or the
	// time in n0 (profile 2) until a stale answer corrects it (tests use
	// it to simulate a wrong clock).
	ClockOffset time.Duration
	// Observe, if set, is called after every exchange that produced an
	// authenticated response.
	Observe func(Exchange)
}

// Exchange describes what a middlebox saw of one call.
type Exchange struct {
	// Credential is what the outer cookie carried: "key" (a public key),
	// "ticket" (a v1 ticket) or "ticket (short)" (a short ticket, spec §7.3).
	Credential string
	// Attempts counts the outer requests (2 after a retry).
	Attempts int
	// OuterMethod is GET or POST.
	OuterMethod string
	// OuterURL is the outer request URL.
	OuterURL string
	// Suite is the key agreement of the session: 1 (X25519), or 2 (the
	// hybrid X25519 + ML-KEM-768 of spec/hybrid.md, also for a ticket
	// issued in such a session).
	Suite int
	// Profile is the request profile of the last attempt: 1, or 2 (the
	// compact layout of spec §4.5, target segment `2{b64u(n0)}`).
	Profile int
	// Status is the inner status.
	Status int
	// Challenges and Busy count the outer 429 answers of spec §14 the call
	// met (urn:httpcrypt:admission, urn:httpcrypt:busy).
	Challenges, Busy int
	// Echo says whether the last attempt carried an hc1-admit echo, and
	// Difficulty the puzzle difficulty it solved.
	Echo       bool
	Difficulty int
}
