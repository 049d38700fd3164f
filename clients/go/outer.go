package httpcrypt

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
)

// Outer constants (spec §4.1).
const (
	nonceB64Len  = 32
	idB64Len     = 14
	publicB64Len = 43
	ticketB64Len = 115
	shortB64Len  = 22 // a short ticket's h (spec §7.3)
	// MaxPad is the longest cookie pad.
	MaxPad = 16
	// GetFormLimit: the GET form is used only while the request line stays below it.
	GetFormLimit = 2000

	contentTypeOctet   = "application/octet-stream"
	contentTypeCerts   = "application/httpcrypt-certs"
	contentTypeProblem = "application/problem+json"
)

// Mount is the server's path prefix for HTTPCrypt: empty, or `/`-led
// without a trailing `/` (spec §4.1, D5).
type Mount string

// NewMount normalises configuration text; `?`, `#`, `%`, spaces and
// control characters are bad_nonce_path.
func NewMount(path string) (Mount, error) {
	for i := 0; i < len(path); i++ {
		c := path[i]
		if c == '?' || c == '#' || c == '%' || c <= ' ' || c >= 0x7f {
			return "", errCode(CodeBadNoncePath)
		}
	}
	t := strings.TrimRight(path, "/")
	if t == "" {
		return "", nil
	}
	if !strings.HasPrefix(t, "/") {
		t = "/" + t
	}
	return Mount(t), nil
}

// OptionsPath is `{mount}/`.
func (m Mount) OptionsPath() string { return string(m) + "/" }

// HybridOptionsPath is `{mount}/pq`, where a server offering suite 2
// answers its suite-2 certificates and key texts (spec/hybrid.md H4).
func (m Mount) HybridOptionsPath() string { return string(m) + "/pq" }

// NoncePath is `{mount}/{b64u(n0)}`.
func (m Mount) NoncePath(n0 *[NonceLen]byte) string {
	return string(m) + "/" + EncodeB64u(n0[:])
}

// GetTarget is `{mount}/{b64u(n0)}?{b64u(stream)}`.
func (m Mount) GetTarget(n0 *[NonceLen]byte, stream []byte) string {
	return m.NoncePath(n0) + "?" + EncodeB64u(stream)
}

// FitsGetForm reports whether a GET request line for a stream of this
// length stays below 2000 bytes ("GET " + target + " HTTP/1.1").
func FitsGetForm(m Mount, streamLen int) bool {
	return FitsGetFormProfile(m, streamLen, Profile1)
}

// FitsGetFormProfile is FitsGetForm for a request profile (the profile-2
// nonce segment has one more character).
func FitsGetFormProfile(m Mount, streamLen, profile int) bool {
	seg := nonceB64Len
	if profile == ProfileCompact {
		seg = compactSegmentLen
	}
	line := 4 + len(m) + 1 + seg + 1 + base64.RawURLEncoding.EncodedLen(streamLen) + 9
	return line < GetFormLimit
}

// RandomPad returns 0–16 random base64url characters (spec §4.1).
func RandomPad() string { return randomPad(MaxPad) }

// randomPad returns 0–maxPad random base64url characters, the length
// uniform (maxPad+1 is 17 or 8, so the modulo bias is at most 1/256).
func randomPad(maxPad int) string {
	b := randomBytes(maxPad + 1)
	n := int(b[0]) % (maxPad + 1)
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	out := make([]byte, n)
	for i := range out {
		out[i] = alphabet[b[1+i]&63]
	}
	return string(out)
}

// FormatCookie builds `{b64u(id)}{namePad}={b64u(value)}{valuePad}`; a pad
// that is not 0–16 base64url characters is bad_cookie.
func FormatCookie(id KID, value []byte, namePad, valuePad string) (string, error) {
	for _, p := range []string{namePad, valuePad} {
		if len(p) > MaxPad || !isB64(p) {
			return "", ErrBadCookie
		}
	}
	return EncodeB64u(id[:]) + namePad + "=" + EncodeB64u(value) + valuePad, nil
}

// FormatRequestHead writes the canonical outer request head (spec §4.1, D9).
func FormatRequestHead(get bool, target, host, cookie string, bodyLen int) []byte {
	var b strings.Builder
	if get {
		b.WriteString("GET ")
	} else {
		b.WriteString("POST ")
	}
	b.WriteString(target + " HTTP/1.1\r\nHost: " + host + "\r\nCookie: " + cookie + "\r\n")
	if !get {
		b.WriteString("Content-Type: " + contentTypeOctet + "\r\n")
	}
	if !get {
		b.WriteString("Content-Length: " + strconv.Itoa(bodyLen) + "\r\n")
	}
	b.WriteString("\r\n")
	return []byte(b.String())
}

// FormatResponseHead writes the canonical outer response head (spec §4.2).
func FormatResponseHead(bodyLen int) []byte {
	return []byte("HTTP/1.1 200 OK\r\nContent-Type: " + contentTypeOctet +
		"\r\nCache-Control: no-store\r\nContent-Length: " + strconv.Itoa(bodyLen) + "\r\n\r\n")
}

// Problem is an RFC 9457 problem document of the protocol (spec §4.4).
type Problem struct {
	Type   string   `json:"type"`
	Title  string   `json:"title,omitempty"`
	Status int      `json:"status,omitempty"`
	Certs  []string `json:"certs,omitempty"`
	// HybridCerts: the suite-2 certificates of an unknown-key problem
	// (spec/hybrid.md H3).
	HybridCerts []string `json:"hybrid_certs,omitempty"`
	// Admit and Difficulty: the challenge of urn:httpcrypt:admission
	// (Difficulty -1 when absent or not a small non-negative integer).
	Admit      string `json:"admit,omitempty"`
	Difficulty int    `json:"difficulty,omitempty"`
	// RetryAfter: the seconds urn:httpcrypt:busy asks to wait (-1 when absent).
	RetryAfter int `json:"retry_after,omitempty"`
}

// ParseProblem parses a problem document; it needs a string `type`.
func ParseProblem(body []byte) (*Problem, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, ErrMalformedInner
	}
	var p Problem
	if err := json.Unmarshal(raw["type"], &p.Type); err != nil || p.Type == "" {
		return nil, ErrMalformedInner
	}
	_ = json.Unmarshal(raw["title"], &p.Title)
	_ = json.Unmarshal(raw["status"], &p.Status)
	_ = json.Unmarshal(raw["admit"], &p.Admit)
	p.Difficulty, p.RetryAfter = smallInt(raw["difficulty"]), smallInt(raw["retry_after"])
	p.Certs, p.HybridCerts = stringList(raw["certs"]), stringList(raw["hybrid_certs"])
	return &p, nil
}

// stringList reads the strings of a JSON array, skipping other members.
func stringList(m json.RawMessage) []string {
	var out []string
	var items []json.RawMessage
	if json.Unmarshal(m, &items) == nil {
		for _, c := range items {
			var s string
			if json.Unmarshal(c, &s) == nil {
				out = append(out, s)
			}
		}
	}
	return out
}

// smallInt reads a JSON integer in 0..2^20, else -1.
func smallInt(m json.RawMessage) int {
	var n json.Number
	if m == nil || json.Unmarshal(m, &n) != nil {
		return -1
	}
	v, err := strconv.ParseInt(string(n), 10, 32)
	if err != nil || v < 0 || v > 1<<20 {
		return -1
	}
	return int(v)
}

// Route is where a server sends an outer request (spec §11.1).
type Route struct {
	// Kind: outside, options, method_not_allowed, not_found, post, get.
	Kind string
	// Profile is 1 or 2 for post and get (the nonce segment's form,
	// spec §4.5), 0 otherwise.
	Profile int
	N0      [NonceLen]byte
	Query   string
}

// ParseNoncePath decodes the 32-character nonce segment (bad_nonce_path).
func ParseNoncePath(s string) ([NonceLen]byte, error) {
	if len(s) != nonceB64Len {
		return [NonceLen]byte{}, errCode(CodeBadNoncePath)
	}
	b, err := DecodeB64u(s)
	if err != nil {
		return [NonceLen]byte{}, errCode(CodeBadNoncePath)
	}
	return [NonceLen]byte(b), nil
}

// RouteRequest routes on the method and the target exactly as received.
func RouteRequest(method, target string, m Mount) (Route, error) {
	path, query, hasQuery := strings.Cut(target, "?")
	rest, ok := strings.CutPrefix(path, string(m)+"/")
	if !ok {
		return Route{Kind: "outside"}, nil
	}
	switch method {
	case "OPTIONS":
		if rest == "" {
			return Route{Kind: "options"}, nil
		}
		return Route{Kind: "not_found"}, nil
	case "POST", "GET":
		n0, profile, err := ParseNonceSegment(rest)
		if err != nil {
			return Route{}, err
		}
		if method == "POST" {
			return Route{Kind: "post", Profile: profile, N0: n0}, nil
		}
		if !hasQuery {
			return Route{}, errCode(CodeBadQuery)
		}
		return Route{Kind: "get", Profile: profile, N0: n0, Query: query}, nil
	}
	return Route{Kind: "method_not_allowed"}, nil
}

// DecodeQuery decodes a GET query (bounded before decoding, spec D22).
func DecodeQuery(q string, maxBody int) ([]byte, error) {
	if len(q)/4*3 > maxBody {
		return nil, ErrBodyTooLarge
	}
	b, err := DecodeB64u(q)
	if err != nil {
		return nil, errCode(CodeBadQuery)
	}
	return b, nil
}

// Credential is what a server finds in the cookie.
type Credential struct {
	// Ticket: the pair named a ticket key; Value is the sealed ticket, or
	// with Short the short ticket's h (spec §7.3).
	Ticket bool
	Short  bool
	ID     KID
	// Value is the client public key (32 bytes), the sealed ticket (86)
	// or h (16).
	Value []byte
}

// hasShape says whether a pair looks like an HTTPCrypt cookie of the
// contract (spec §11.3). A short ticket's 22–38 characters are not in the
// shape (§7.3): the contract's no_cookie for other cookies of that length
// stays as it is.
func hasShape(name, value string) bool {
	nameOK := len(name) >= idB64Len && len(name) <= idB64Len+MaxPad && isB64(name)
	vl := len(value)
	valueOK := (vl >= publicB64Len && vl <= publicB64Len+MaxPad || vl >= ticketB64Len && vl <= ticketB64Len+MaxPad) && isB64(value)
	return nameOK && valueOK
}

func stripPad(text string, n int) ([]byte, error) {
	l := base64.RawURLEncoding.EncodedLen(n)
	if len(text) < l || len(text) > l+MaxPad || !isB64(text[l:]) {
		return nil, ErrBadCookie
	}
	b, err := DecodeB64u(text[:l])
	if err != nil {
		return nil, ErrBadCookie
	}
	return b, nil
}

// ScanCookies finds the first pair naming a known ID (spec §11.3); lookup
// says whether an ID is a key ("key"), a ticket key ("ticket") or unknown
// (""). Under a ticket key a value of at most 38 characters is a short
// ticket (§7.3); the lengths of the two forms do not overlap.
func ScanCookies(fields []string, lookup func(KID) string) (*Credential, error) {
	shaped := false
	for _, f := range fields {
		for _, pair := range strings.Split(f, ";") {
			pair = strings.Trim(pair, " \t")
			name, value, ok := strings.Cut(pair, "=")
			if !ok {
				continue
			}
			name, value = strings.Trim(name, " \t"), strings.Trim(value, " \t")
			if hasShape(name, value) {
				shaped = true
			}
			if len(name) < idB64Len {
				continue
			}
			idb, err := DecodeB64u(name[:idB64Len])
			if err != nil {
				continue
			}
			id := KID(idb)
			kind := lookup(id)
			if kind == "" {
				continue
			}
			if pad := name[idB64Len:]; len(pad) > MaxPad || !isB64(pad) {
				return nil, ErrBadCookie
			}
			n, short := 32, false
			if kind == "ticket" {
				n = SealedTicketLen
				if len(value) <= shortB64Len+MaxPad {
					n, short = ShortHLen, true
				}
			}
			v, err := stripPad(value, n)
			if err != nil {
				return nil, err
			}
			return &Credential{Ticket: kind == "ticket", Short: short, ID: id, Value: v}, nil
		}
	}
	if shaped {
		return nil, ErrUnknownKey
	}
	return nil, errCode(CodeNoCookie)
}
