// Package httpcrypt is a Go client for HTTPCrypt v1: opportunistic
// encryption for plain HTTP without a TLS handshake (spec/httpcrypt.md),
// with suite 2, the hybrid X25519 + ML-KEM-768 key agreement of
// spec/hybrid.md, as an option (Options.PQ).
//
// The protocol core (base64url, key agreement, sealed streams, inner
// messages, certificates, tickets, tokens) has no IO; Transport is an
// http.RoundTripper that drives it.
package httpcrypt

import (
	"errors"
	"fmt"
)

// Error codes shared with the Rust core and the test vectors (spec §12).
const (
	CodeBadBase64             = "bad_base64"
	CodeBadHost               = "bad_host"
	CodeBadNoncePath          = "bad_nonce_path"
	CodeBadQuery              = "bad_query"
	CodeNoCookie              = "no_cookie"
	CodeBadCookie             = "bad_cookie"
	CodeUnknownKey            = "unknown_key"
	CodeSmallOrder            = "small_order"
	CodeBodyTooLarge          = "body_too_large"
	CodeRecordTooLarge        = "record_too_large"
	CodeIntegrity             = "integrity"
	CodeClearInRequest        = "clear_in_request"
	CodeTruncated             = "truncated"
	CodeTrailingData          = "trailing_data"
	CodeTooManyRecords        = "too_many_records"
	CodeMalformedInner        = "malformed_inner"
	CodeInnerHeadTooLarge     = "inner_head_too_large"
	CodeForbiddenHeader       = "forbidden_header"
	CodeContentLengthMismatch = "content_length_mismatch"
	CodeBadDate               = "bad_date"
	CodeStale                 = "stale"
	CodeReplay                = "replay"
	CodeTokenRequired         = "token_required"
	CodeOverloaded            = "overloaded"
	CodeBadCertificate        = "bad_certificate"
	CodeBadSignature          = "bad_signature"
	CodeNotValid              = "not_valid"
	CodeBadRecord             = "bad_record"
	CodeBadToken              = "bad_token"
	// Admission (spec §14): an echo the server refuses, or a challenge the
	// client will not meet (difficulty above 24, search exhausted).
	CodeBadAdmission = "bad_admission"
	// CodeAdmissionRequired: still challenged after three retries (or a
	// body that cannot be sent again); CodeBusy likewise for busy.
	CodeAdmissionRequired = "admission_required"
	CodeBusy              = "busy"

	// Suite 2, the hybrid key agreement (spec/hybrid.md H6).
	// CodeBadCiphertext: a hybrid request's body (or decoded query) is
	// shorter than the 1,088-byte ML-KEM ciphertext (outer 400, malformed).
	CodeBadCiphertext = "bad_ciphertext"
	// CodeHybridRequired: a v1 fresh-key request to a server that takes
	// hybrid requests only (outer 400, urn:httpcrypt:hybrid-required).
	CodeHybridRequired = "hybrid_required"
	// CodeKemMismatch: an encapsulation key text whose SHA3-256 is not the
	// certificate's kem_hash.
	CodeKemMismatch = "kem_mismatch"
	// CodeHybridDowngrade: the origin is pinned to (or Options.PQ requires)
	// suite 2, and discovery offered none.
	CodeHybridDowngrade = "hybrid_downgrade"

	// CodeRefused: the server answered the outer request with a status
	// other than 200 (unauthenticated; Type names its problem, if any).
	CodeRefused = "refused"
	// CodeTransport: the connection failed (no HTTPCrypt answer at all).
	CodeTransport = "transport"
	// CodeConfig: the request or options cannot be used (e.g. https URL).
	CodeConfig = "config"

	// Client diagnoses (spec §12, "client diagnoses"): what went wrong
	// before any HTTPCrypt answer, worded the same in every client.
	// CodeConnectFailed: no connection to the host ("cannot connect to
	// HOST:PORT: REASON").
	CodeConnectFailed = "connect_failed"
	// CodeTimeout: the request's deadline passed ("timed out after N s
	// while PHASE").
	CodeTimeout = "timeout"
	// CodeNotHTTPCrypt: OPTIONS {mount}/ answered neither a certificate
	// list nor 404 ("HOST:PORT is not an HTTPCrypt server (OPTIONS PATH
	// answered STATUS)").
	CodeNotHTTPCrypt = "not_httpcrypt"
	// CodeNoEndpoint: OPTIONS {mount}/ answered 404 ("no HTTPCrypt
	// endpoint at MOUNT on HOST:PORT: wrong mount?").
	CodeNoEndpoint = "no_endpoint"
)

// Problem types (spec §4.4).
const (
	ProblemMalformed     = "urn:httpcrypt:malformed"
	ProblemUnknownKey    = "urn:httpcrypt:unknown-key"
	ProblemTooLarge      = "urn:httpcrypt:too-large"
	ProblemIntegrity     = "urn:httpcrypt:integrity"
	ProblemStale         = "urn:httpcrypt:stale"
	ProblemReplay        = "urn:httpcrypt:replay"
	ProblemTokenRequired = "urn:httpcrypt:token-required"
	ProblemOverloaded    = "urn:httpcrypt:overloaded"
	// ProblemAdmission and ProblemBusy are outer 429 answers (spec §14.4).
	ProblemAdmission = "urn:httpcrypt:admission"
	ProblemBusy      = "urn:httpcrypt:busy"
	// ProblemHybridRequired: the server takes hybrid requests only
	// (spec/hybrid.md H4).
	ProblemHybridRequired = "urn:httpcrypt:hybrid-required"
)

// Error is every failure of this package. Code is the spec's snake_case
// code (spec §12). When the server reported the problem, Type is its
// problem type URN and Status its HTTP status; Authenticated says whether
// the report arrived sealed (inner) or in plaintext (outer).
type Error struct {
	Code          string
	Type          string
	Status        int
	Authenticated bool
	// Err is an underlying cause (transport errors), if any.
	Err error
	// Detail, if set, is the diagnosis shown instead of the generic text
	// (the wordings of spec §12's client diagnoses).
	Detail string
}

func (e *Error) Error() string {
	switch {
	case e.Detail != "":
		return "httpcrypt: " + e.Detail
	case e.Type != "" && e.Authenticated:
		return fmt.Sprintf("httpcrypt: server reported %s (inner status %d)", e.Type, e.Status)
	case e.Type != "":
		return fmt.Sprintf("httpcrypt: outer %d %s (unauthenticated)", e.Status, e.Type)
	case e.Code == CodeRefused:
		return fmt.Sprintf("httpcrypt: outer status %d (unauthenticated)", e.Status)
	case e.Err != nil:
		return fmt.Sprintf("httpcrypt: %s: %v", e.Code, e.Err)
	}
	return "httpcrypt: " + e.Code
}

func (e *Error) Unwrap() error { return e.Err }

// Is matches errors with the same code, so errors.Is(err, ErrIntegrity) works.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && t.Type == "" && t.Err == nil && t.Status == 0 && t.Detail == ""
}

// Label is what a report shows: the problem type when the server named
// one, the code otherwise.
func (e *Error) Label() string {
	if e.Type != "" {
		return e.Type
	}
	return e.Code
}

func errCode(code string) *Error { return &Error{Code: code} }

// Sentinel errors for errors.Is.
var (
	ErrBadBase64             = errCode(CodeBadBase64)
	ErrBadCookie             = errCode(CodeBadCookie)
	ErrUnknownKey            = errCode(CodeUnknownKey)
	ErrSmallOrder            = errCode(CodeSmallOrder)
	ErrRecordTooLarge        = errCode(CodeRecordTooLarge)
	ErrIntegrity             = errCode(CodeIntegrity)
	ErrClearInRequest        = errCode(CodeClearInRequest)
	ErrTruncated             = errCode(CodeTruncated)
	ErrTrailingData          = errCode(CodeTrailingData)
	ErrTooManyRecords        = errCode(CodeTooManyRecords)
	ErrMalformedInner        = errCode(CodeMalformedInner)
	ErrInnerHeadTooLarge     = errCode(CodeInnerHeadTooLarge)
	ErrForbiddenHeader       = errCode(CodeForbiddenHeader)
	ErrContentLengthMismatch = errCode(CodeContentLengthMismatch)
	ErrBadDate               = errCode(CodeBadDate)
	ErrStale                 = errCode(CodeStale)
	ErrReplay                = errCode(CodeReplay)
	ErrTokenRequired         = errCode(CodeTokenRequired)
	ErrBadCertificate        = errCode(CodeBadCertificate)
	ErrBadSignature          = errCode(CodeBadSignature)
	ErrNotValid              = errCode(CodeNotValid)
	ErrBadRecord             = errCode(CodeBadRecord)
	ErrBadToken              = errCode(CodeBadToken)
	ErrBodyTooLarge          = errCode(CodeBodyTooLarge)
	ErrBadCiphertext         = errCode(CodeBadCiphertext)
	ErrHybridRequired        = errCode(CodeHybridRequired)
	ErrKemMismatch           = errCode(CodeKemMismatch)
	ErrHybridDowngrade       = errCode(CodeHybridDowngrade)
)

// CodeOf returns the code of err if it is (or wraps) an *Error, else "".
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// codeForProblem maps a problem type to the code a client reports for it.
func codeForProblem(typ string) string {
	switch typ {
	case ProblemUnknownKey:
		return CodeUnknownKey
	case ProblemIntegrity:
		return CodeIntegrity
	case ProblemStale:
		return CodeStale
	case ProblemReplay:
		return CodeReplay
	case ProblemTokenRequired:
		return CodeTokenRequired
	case ProblemOverloaded:
		return CodeOverloaded
	case ProblemTooLarge:
		return CodeBodyTooLarge
	case ProblemMalformed:
		return CodeMalformedInner
	case ProblemAdmission:
		return CodeAdmissionRequired
	case ProblemBusy:
		return CodeBusy
	case ProblemHybridRequired:
		return CodeHybridRequired
	}
	return CodeRefused
}
