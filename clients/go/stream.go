package httpcrypt

import (
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"sync"

	"golang.org/x/crypto/chacha20"
	"golang.org/x/crypto/chacha20poly1305"
)

// Sealed stream constants (spec §3).
const (
	HeaderLen      = 4
	RecordOverhead = HeaderLen + TagLen
	// RecordFloor and RecordCeiling bound a receiver's record maximum.
	RecordFloor   = 16 * 1024
	RecordCeiling = 1 << 24
	// DefaultMaxRecord is a receiver's default record maximum.
	DefaultMaxRecord = 1 << 20
	// DefaultRecordSize is the record size this client seals with.
	DefaultRecordSize = 16 * 1024
	maxRecords        = uint64(1) << 32

	flagFinal = uint32(1) << 31
	flagClear = uint32(1) << 30
	lenMask   = flagClear - 1
)

var (
	labelReq = []byte("hc1-req")
	labelRsp = []byte("hc1-rsp")
)

// xchacha is XChaCha20-Poly1305 as HChaCha20 subkey + RFC 8439 AEAD, with
// the subkey cached per 16-byte nonce prefix (spec §1.3): consecutive
// record nonces share it except once per 2^64 records.
type xchacha struct {
	key    SessionKey
	prefix [16]byte
	aead   cipher.AEAD
}

func (x *xchacha) forNonce(n *[NonceLen]byte) (cipher.AEAD, [12]byte) {
	var short [12]byte
	copy(short[4:], n[16:])
	if x.aead == nil || [16]byte(n[:16]) != x.prefix {
		sub, err := chacha20.HChaCha20(x.key[:], n[:16])
		if err != nil {
			panic("httpcrypt: HChaCha20 with a 32-byte key failed")
		}
		a, err := chacha20poly1305.New(sub)
		if err != nil {
			panic("httpcrypt: ChaCha20-Poly1305 with a 32-byte key failed")
		}
		x.aead, x.prefix = a, [16]byte(n[:16])
	}
	return x.aead, short
}

// chain is the state both ends share: nonce, index, previous tag.
type chain struct {
	x        xchacha
	n0       [NonceLen]byte
	index    uint64
	prevTag  [TagLen]byte
	response bool
	// ad0 is what precedes header_0 in AD_0: the label and, for a
	// response, request_n0; for a profile-2 request, the bound Host
	// (spec §3.3, §4.5).
	ad0 []byte
	ad  []byte
}

func newChain(k SessionKey, n0 [NonceLen]byte, response bool, ad0 []byte) chain {
	return chain{x: xchacha{key: k}, n0: n0, response: response, ad0: ad0, ad: make([]byte, 0, 64)}
}

// requestAD0 is AD_0 before header_0 of a v1 request: "hc1-req".
func requestAD0() []byte { return labelReq }

// responseAD0 is AD_0 before header_0 of a v1 response: "hc1-rsp" || request_n0.
func responseAD0(requestN0 [NonceLen]byte) []byte {
	return append(append(make([]byte, 0, len(labelRsp)+NonceLen), labelRsp...), requestN0[:]...)
}

// buildAD sets c.ad to AD_i for the current record (spec §3.3).
func (c *chain) buildAD(header []byte) {
	c.ad = c.ad[:0]
	if c.index == 0 {
		c.ad = append(c.ad, c.ad0...)
	} else {
		c.ad = append(c.ad, c.prevTag[:]...)
	}
	c.ad = append(c.ad, header...)
}

// Sealer produces the records of one stream. Seal appends non-final
// records; Finish appends the FINAL record, after which the sealer refuses
// further use.
type Sealer struct {
	c    chain
	done bool
}

// NewRequestSealer starts a request stream at n0 (the nonce in the path).
func NewRequestSealer(k SessionKey, n0 [NonceLen]byte) *Sealer {
	return &Sealer{c: newChain(k, n0, false, requestAD0())}
}

// NewResponseSealer starts a response stream at the fresh nonce n0,
// answering the request whose nonce is requestN0. The caller writes n0
// in front of the stream (spec §4.2).
func NewResponseSealer(k SessionKey, requestN0, n0 [NonceLen]byte) *Sealer {
	return &Sealer{c: newChain(k, n0, true, responseAD0(requestN0))}
}

var errSealerDone = errors.New("httpcrypt: sealer used after its FINAL record")

func (s *Sealer) append(dst, plaintext []byte, final, clear bool) ([]byte, error) {
	if s.done {
		return dst, errSealerDone
	}
	if len(plaintext) > RecordCeiling {
		return dst, ErrRecordTooLarge
	}
	if clear && !s.c.response {
		return dst, ErrClearInRequest
	}
	if s.c.index >= maxRecords {
		return dst, ErrTooManyRecords
	}
	w := uint32(len(plaintext))
	if final {
		w |= flagFinal
	}
	if clear {
		w |= flagClear
	}
	start := len(dst)
	dst = grow(dst, RecordOverhead+len(plaintext)+TagLen)
	rec := dst[start : start+RecordOverhead+len(plaintext)]
	binary.BigEndian.PutUint32(rec, w)
	s.c.buildAD(rec[:HeaderLen])
	n := nonceAdd(&s.c.n0, s.c.index)
	aead, short := s.c.x.forNonce(&n)
	payload := rec[RecordOverhead:]
	if clear {
		copy(payload, plaintext)
		s.c.ad = append(s.c.ad, plaintext...)
		aead.Seal(rec[HeaderLen:HeaderLen], short[:], nil, s.c.ad)
	} else {
		// Seal straight into the payload slot (ct || tag; the record has
		// room for the tag after it), then move the tag in front.
		out := aead.Seal(payload[:0], short[:], plaintext, s.c.ad)
		var tag [TagLen]byte
		copy(tag[:], out[len(plaintext):])
		copy(rec[HeaderLen:RecordOverhead], tag[:])
	}
	copy(s.c.prevTag[:], rec[HeaderLen:RecordOverhead])
	s.c.index++
	if final {
		s.done = true
	}
	return dst[:start+len(rec)], nil
}

// grow extends dst by n bytes (contents unspecified).
func grow(dst []byte, n int) []byte {
	if cap(dst)-len(dst) < n {
		nd := make([]byte, len(dst), 2*cap(dst)+n)
		copy(nd, dst)
		dst = nd
	}
	return dst[:len(dst)+n]
}

// Seal appends a non-final encrypted record holding plaintext to dst.
func (s *Sealer) Seal(dst, plaintext []byte) ([]byte, error) {
	return s.append(dst, plaintext, false, false)
}

// SealClear appends a non-final CLEAR record (responses only, spec §9).
func (s *Sealer) SealClear(dst, plaintext []byte) ([]byte, error) {
	return s.append(dst, plaintext, false, true)
}

// Finish appends the FINAL encrypted record (possibly empty).
func (s *Sealer) Finish(dst, plaintext []byte) ([]byte, error) {
	return s.append(dst, plaintext, true, false)
}

// FinishClear appends the FINAL record as a CLEAR record (responses only).
func (s *Sealer) FinishClear(dst, plaintext []byte) ([]byte, error) {
	return s.append(dst, plaintext, true, true)
}

// SealAll seals plaintext as records of at most recordSize bytes, the last
// one FINAL (an empty plaintext gives one empty FINAL record).
func SealAll(s *Sealer, dst, plaintext []byte, recordSize int) ([]byte, error) {
	if recordSize < 1 {
		recordSize = 1
	}
	var err error
	for len(plaintext) > recordSize {
		if dst, err = s.Seal(dst, plaintext[:recordSize]); err != nil {
			return dst, err
		}
		plaintext = plaintext[recordSize:]
	}
	return s.Finish(dst, plaintext)
}

// Event is what an Opener yields: verified plaintext of one record, or the
// end of the stream.
type Event struct {
	// Data is a record's verified plaintext (never empty unless End);
	// valid until the next call on the Opener.
	Data []byte
	// Clear: the record was a CLEAR record.
	Clear bool
	// End: the FINAL record verified; the stream is complete.
	End bool
}

type openState int

const (
	stNonce openState = iota
	stRecords
	stEndPending
	stDone
	stFailed
)

// Opener opens one stream: push input with Receive in any split, pull
// verified plaintext with NextEvent, and call Finish at the end of input.
//
// Receive borrows its argument when nothing is buffered (complete records
// are opened straight from it): the caller must not modify it until
// NextEvent has reported that it needs more input. Only an incomplete
// record is copied, so an Opener holds at most one record beyond that.
type Opener struct {
	c   chain
	max int
	// nonceLen is what precedes a response stream: 24 bytes of n0 (v1)
	// or the 16 random bytes r of n0 = 0xff^8 || r (profile 2).
	nonceLen int
	buf      []byte // owned: an incomplete record (and what followed it)
	pos      int
	in       []byte // borrowed input, used while buf is empty
	scratch  []byte
	state    openState
	err      *Error
}

func clampMax(m int) int {
	if m < RecordFloor {
		return RecordFloor
	}
	if m > RecordCeiling {
		return RecordCeiling
	}
	return m
}

// NewRequestOpener opens a request stream whose nonce n0 came from the path.
func NewRequestOpener(k SessionKey, n0 [NonceLen]byte, maxRecord int) *Opener {
	return &Opener{c: newChain(k, n0, false, requestAD0()), max: clampMax(maxRecord), state: stRecords}
}

// NewResponseOpener opens a response body (n0 || stream) answering the
// request whose nonce is requestN0.
func NewResponseOpener(k SessionKey, requestN0 [NonceLen]byte, maxRecord int) *Opener {
	return &Opener{c: newChain(k, [NonceLen]byte{}, true, responseAD0(requestN0)), max: clampMax(maxRecord), state: stNonce, nonceLen: NonceLen}
}

func (o *Opener) fail(e *Error) error {
	o.state, o.err = stFailed, e
	o.buf, o.pos, o.in, o.scratch = nil, 0, nil, nil
	return e
}

// avail is the unconsumed input.
func (o *Opener) avail() []byte {
	if o.pos < len(o.buf) {
		return o.buf[o.pos:]
	}
	return o.in
}

func (o *Opener) consume(n int) {
	if o.pos < len(o.buf) {
		o.pos += n
	} else {
		o.in = o.in[n:]
	}
}

// keep copies borrowed leftovers into the owned buffer before the caller
// gets its slice back.
func (o *Opener) keep() {
	if len(o.in) > 0 {
		o.buf = append(o.buf[:0], o.in...)
		o.pos, o.in = 0, nil
	}
}

// Receive pushes input bytes. Bytes after the FINAL record are trailing_data.
func (o *Opener) Receive(b []byte) error {
	if o.state == stFailed {
		return o.err
	}
	if len(b) == 0 {
		return nil
	}
	if o.state == stEndPending || o.state == stDone {
		return o.fail(ErrTrailingData)
	}
	o.keep()
	if o.pos < len(o.buf) {
		n := copy(o.buf, o.buf[o.pos:])
		o.buf, o.pos = append(o.buf[:n], b...), 0
		return nil
	}
	o.buf, o.pos, o.in = o.buf[:0], 0, b
	return nil
}

// NextEvent returns the next event; ok is false when more input is needed
// (or after End).
func (o *Opener) NextEvent() (ev Event, ok bool, err error) {
	for {
		switch o.state {
		case stFailed:
			return Event{}, false, o.err
		case stDone:
			return Event{}, false, nil
		case stEndPending:
			o.state = stDone
			o.release()
			return Event{End: true}, true, nil
		case stNonce:
			a := o.avail()
			if len(a) < o.nonceLen {
				o.keep()
				return Event{}, false, nil
			}
			// v1: n0 itself; profile 2: r of n0 = 0xff^8 || r.
			copy(o.c.n0[NonceLen-o.nonceLen:], a[:o.nonceLen])
			o.consume(o.nonceLen)
			o.state = stRecords
		case stRecords:
			data, clear, final, got, err := o.openRecord()
			if err != nil {
				return Event{}, false, err
			}
			if !got {
				o.keep()
				return Event{}, false, nil
			}
			if final {
				if len(data) == 0 {
					o.state = stDone
					o.release()
					return Event{End: true}, true, nil
				}
				o.state = stEndPending
			} else if len(data) == 0 {
				continue
			}
			return Event{Data: data, Clear: clear}, true, nil
		}
	}
}

// scratchPool recycles decryption buffers between streams (a one-record
// stream would otherwise allocate a record-sized buffer).
var scratchPool sync.Pool

func getScratch(n int) []byte {
	if b, ok := scratchPool.Get().(*[]byte); ok && cap(*b) >= n {
		return (*b)[:0]
	}
	return make([]byte, 0, max(n, RecordFloor+TagLen))
}

// release returns the scratch buffer once the stream has ended: the last
// Data it backed is no longer valid after the End event.
func (o *Opener) release() {
	if o.scratch != nil {
		b := o.scratch[:0]
		scratchPool.Put(&b)
		o.scratch = nil
	}
}

// openRecord verifies the next record (spec §11.2: the header is judged
// before the payload is awaited).
func (o *Opener) openRecord() (data []byte, clear, final, got bool, err error) {
	avail := o.avail()
	if len(avail) < HeaderLen {
		return nil, false, false, false, nil
	}
	w := binary.BigEndian.Uint32(avail)
	l := int(w & lenMask)
	final, clear = w&flagFinal != 0, w&flagClear != 0
	if l > o.max {
		return nil, false, false, false, o.fail(ErrRecordTooLarge)
	}
	if clear && !o.c.response {
		return nil, false, false, false, o.fail(ErrClearInRequest)
	}
	if o.c.index >= maxRecords {
		return nil, false, false, false, o.fail(ErrTooManyRecords)
	}
	total := RecordOverhead + l
	if len(avail) < total {
		return nil, false, false, false, nil
	}
	header, tag, payload := avail[:HeaderLen], avail[HeaderLen:RecordOverhead], avail[RecordOverhead:total]
	o.c.buildAD(header)
	n := nonceAdd(&o.c.n0, o.c.index)
	aead, short := o.c.x.forNonce(&n)
	if clear {
		o.c.ad = append(o.c.ad, payload...)
		if _, e := aead.Open(nil, short[:], tag, o.c.ad); e != nil {
			return nil, false, false, false, o.fail(ErrIntegrity)
		}
		data = payload
	} else {
		// The AEAD wants ciphertext || tag; the record has tag || ciphertext.
		if cap(o.scratch) < l+TagLen {
			o.scratch = getScratch(l + TagLen)
		}
		o.scratch = append(append(o.scratch[:0], payload...), tag...)
		out, e := aead.Open(o.scratch[:0], short[:], o.scratch, o.c.ad)
		if e != nil {
			return nil, false, false, false, o.fail(ErrIntegrity)
		}
		data = out
	}
	copy(o.c.prevTag[:], tag)
	o.c.index++
	o.consume(total)
	if final && len(o.avail()) != 0 {
		return nil, false, false, false, o.fail(ErrTrailingData)
	}
	return data, clear, final, true, nil
}

// Complete reports whether the FINAL record has verified.
func (o *Opener) Complete() bool { return o.state == stEndPending || o.state == stDone }

// Records is the number of records verified so far.
func (o *Opener) Records() uint64 { return o.c.index }

// Finish ends the input: it succeeds only if the FINAL record verified;
// otherwise the stream was truncated.
func (o *Opener) Finish() error {
	switch o.state {
	case stFailed:
		return o.err
	case stEndPending, stDone:
		return nil
	}
	return ErrTruncated
}

// OpenAll opens a whole stream held in memory.
func OpenAll(o *Opener, body []byte) ([]byte, error) {
	if err := o.Receive(body); err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(body)) // plaintext is never longer than its stream
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
	if err := o.Finish(); err != nil {
		return nil, err
	}
	return out, nil
}
