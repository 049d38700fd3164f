package httpcrypt

// Load-aware admission (spec §14, a project addition): the cookie a server
// under load hands out, the puzzle bound to a request's n0, the client's
// bounded solver, and the server's check of an echo (for the vectors and
// the in-memory server).
//
//	cookie = u32 step || u8 d || SHA3-256("hc1-admit" || secret || u32 step || u8 d || addr16)[0..16]
//	echo   = cookie || solution (8 bytes)
//	puzzle = SHA3-256("hc1-puzzle" || cookie || n0 || solution) has >= d leading zero bits

import (
	"context"
	"crypto/subtle"
	"encoding/binary"
	"math/bits"
	"net/netip"

	"golang.org/x/crypto/sha3"
)

const (
	// AdmitCookieLen is the admission cookie's length (28 characters).
	AdmitCookieLen = 21
	// AdmitSolutionLen is the length of a puzzle solution.
	AdmitSolutionLen = 8
	// AdmitEchoLen is cookie || solution (39 characters).
	AdmitEchoLen = AdmitCookieLen + AdmitSolutionLen
	// AdmitCookieName names the echo's cookie pair: 9 characters, so a
	// server without the defence never takes it for a credential (§11.3).
	AdmitCookieName = "hc1-admit"
	// MaxClientDifficulty is the most work a client does (spec §14.5):
	// above it the client gives up with bad_admission.
	MaxClientDifficulty = 24
	// AdmitEchoSeconds is how long a client keeps echoing a cookie.
	AdmitEchoSeconds = 25
	// MaxAdmissionRetries bounds the challenges and busy answers one call
	// follows (spec §14.5).
	MaxAdmissionRetries = 3
	// MaxBusyWaitSeconds caps the wait on urn:httpcrypt:busy.
	MaxBusyWaitSeconds = 5

	admitEchoB64Len = 39
	admitLabel      = "hc1-admit"
	puzzleLabel     = "hc1-puzzle"
)

// AdmitCookie is the 21-byte admission cookie.
type AdmitCookie [AdmitCookieLen]byte

// Step is the cookie period the cookie was issued in.
func (c *AdmitCookie) Step() uint32 { return binary.BigEndian.Uint32(c[:4]) }

// Difficulty is the puzzle difficulty the cookie carries (covered by its MAC).
func (c *AdmitCookie) Difficulty() int { return int(c[4]) }

// Addr16 is the 16-byte form of an address: IPv6 as is, IPv4 as
// IPv4-mapped IPv6 (::ffff:a.b.c.d).
func Addr16(a netip.Addr) [16]byte { return a.Unmap().As16() }

// MakeAdmitCookie computes the cookie for step, difficulty d and the
// peer's 16-byte address under secret (the server's side).
func MakeAdmitCookie(secret []byte, step uint32, d uint8, addr [16]byte) AdmitCookie {
	var c AdmitCookie
	binary.BigEndian.PutUint32(c[:4], step)
	c[4] = d
	h := sha3.New256()
	h.Write([]byte(admitLabel))
	h.Write(secret)
	h.Write(c[:5])
	h.Write(addr[:])
	copy(c[5:], h.Sum(nil)[:16])
	return c
}

// ParseAdmitCookie decodes the `admit` member of a challenge (exactly 28
// canonical base64url characters); anything else is bad_admission.
func ParseAdmitCookie(s string) (AdmitCookie, error) {
	b, err := decodeFixed(s, AdmitCookieLen)
	if err != nil {
		return AdmitCookie{}, errCode(CodeBadAdmission)
	}
	return AdmitCookie(b), nil
}

// puzzleInput is "hc1-puzzle" || cookie || n0 || solution: the solver
// rewrites the last 8 bytes, the verifier fills them from the echo, and
// both decide with holds.
type puzzleInput [len(puzzleLabel) + AdmitCookieLen + NonceLen + AdmitSolutionLen]byte

func newPuzzleInput(c *AdmitCookie, n0 *[NonceLen]byte, solution []byte) *puzzleInput {
	var p puzzleInput
	i := copy(p[:], puzzleLabel)
	i += copy(p[i:], c[:])
	i += copy(p[i:], n0[:])
	copy(p[i:], solution)
	return &p
}

func (p *puzzleInput) solution() []byte { return p[len(p)-AdmitSolutionLen:] }

// hash is SHA3-256 of the input.
func (p *puzzleInput) hash() [32]byte { return sha3.Sum256(p[:]) }

// holds reports whether the puzzle hash has at least d leading zero bits.
// It is the one test used by the solver and the verifier.
func (p *puzzleInput) holds(d int) bool { return leadingZeroBits(p.hash()) >= d }

func leadingZeroBits(h [32]byte) int {
	n := 0
	for _, b := range h {
		if b != 0 {
			return n + bits.LeadingZeros8(b)
		}
		n += 8
	}
	return n
}

// PuzzleHash is SHA3-256("hc1-puzzle" || cookie || n0 || solution).
func PuzzleHash(c *AdmitCookie, n0 *[NonceLen]byte, solution []byte) [32]byte {
	return newPuzzleInput(c, n0, solution).hash()
}

// SolvePuzzle finds 8 solution bytes (a big-endian counter from 0) such
// that the puzzle of c under n0 holds for difficulty d. d above 24 is
// refused at once; the search stops after max(2^16, 16·2^d) tries (it
// fails with probability about e^-16) with bad_admission, and when ctx
// ends. d = 0 needs no work: any solution holds.
func SolvePuzzle(ctx context.Context, c *AdmitCookie, n0 *[NonceLen]byte, d int) ([AdmitSolutionLen]byte, error) {
	var zero [AdmitSolutionLen]byte
	if d < 0 || d > MaxClientDifficulty {
		return zero, &Error{Code: CodeBadAdmission, Type: ProblemAdmission}
	}
	p := newPuzzleInput(c, n0, zero[:])
	tries := max(uint64(1)<<16, uint64(16)<<d)
	for i := uint64(0); i < tries; i++ {
		if i&4095 == 4095 && ctx.Err() != nil {
			return zero, &Error{Code: CodeTransport, Err: ctx.Err()}
		}
		binary.BigEndian.PutUint64(p.solution(), i)
		if p.holds(d) {
			return [AdmitSolutionLen]byte(p.solution()), nil
		}
	}
	return zero, &Error{Code: CodeBadAdmission, Type: ProblemAdmission}
}

// FormatAdmitEcho is b64u(cookie || solution), the hc1-admit value.
func FormatAdmitEcho(c *AdmitCookie, solution [AdmitSolutionLen]byte) string {
	return EncodeB64u(append(c[:], solution[:]...))
}

// AdmitCheck is what a server learns from an accepted echo.
type AdmitCheck struct {
	Difficulty int
	Step       uint32
	PuzzleHash [32]byte
}

// VerifyAdmitEcho is the server's check of an echo (spec §14.3): exactly
// 39 canonical base64url characters; the cookie's step is stepNow or the
// one before; its MAC matches under one of secrets for the peer's
// address; the puzzle holds for this request's n0. Every failure is
// bad_admission.
func VerifyAdmitEcho(echo string, n0 *[NonceLen]byte, addr [16]byte, secrets [][]byte, stepNow uint32) (*AdmitCheck, error) {
	bad := errCode(CodeBadAdmission)
	if len(echo) != admitEchoB64Len {
		return nil, bad
	}
	b, err := DecodeB64u(echo)
	if err != nil || len(b) != AdmitEchoLen {
		return nil, bad
	}
	c := AdmitCookie(b[:AdmitCookieLen])
	step := c.Step()
	if uint64(step) != uint64(stepNow) && uint64(step)+1 != uint64(stepNow) {
		return nil, bad
	}
	ok := false
	for _, s := range secrets {
		want := MakeAdmitCookie(s, step, c[4], addr)
		if subtle.ConstantTimeCompare(want[:], c[:]) == 1 {
			ok = true
		}
	}
	if !ok {
		return nil, bad
	}
	p := newPuzzleInput(&c, n0, b[AdmitCookieLen:])
	if !p.holds(c.Difficulty()) {
		return nil, bad
	}
	return &AdmitCheck{Difficulty: c.Difficulty(), Step: step, PuzzleHash: p.hash()}, nil
}
