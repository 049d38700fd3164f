package httpcrypt

// The bodies of the driver: the request stream sealed as the caller's
// body is read, and the response opened as it is read, so that only
// verified plaintext comes out.

import (
	"io"
	"net/http"
)

// limitedRead reads r whole, failing with body_too_large past limit bytes.
func limitedRead(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, &Error{Code: CodeTransport, Err: err}
	}
	if int64(len(b)) > limit {
		return nil, ErrBodyTooLarge
	}
	return b, nil
}

// sealedLen is the stream length of n plaintext bytes in records of rs:
// as SealAll cuts it, the FINAL record holding the last 1..rs bytes.
func sealedLen(n, rs int64) int64 {
	if n == 0 {
		return RecordOverhead
	}
	return n + (n+rs-1)/rs*RecordOverhead
}

// sealReader produces the request stream as the body is read: it fills a
// record with exactly recordSize plaintext bytes (so the outer length is
// predictable), seals it, and seals the FINAL record at the body's end.
type sealReader struct {
	sealer     *Sealer
	pending    []byte // plaintext not yet sealed
	body       io.ReadCloser
	recordSize int
	out        []byte // sealed bytes not yet returned
	eof        bool
	finished   bool
	err        error
}

func (s *sealReader) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		if s.finished {
			return 0, io.EOF
		}
		for !s.eof && len(s.pending) < s.recordSize+1 {
			if s.body == nil || s.body == http.NoBody {
				s.eof = true
				break
			}
			if cap(s.pending)-len(s.pending) < 4096 {
				np := make([]byte, len(s.pending), 2*s.recordSize+4096)
				copy(np, s.pending)
				s.pending = np
			}
			n, err := s.body.Read(s.pending[len(s.pending):cap(s.pending)])
			s.pending = s.pending[:len(s.pending)+n]
			if err == io.EOF {
				s.eof = true
			} else if err != nil {
				s.err = err
				return 0, err
			}
		}
		var err error
		s.out = s.out[:0]
		if len(s.pending) > s.recordSize || !s.eof && len(s.pending) == s.recordSize {
			s.out, err = s.sealer.Seal(s.out, s.pending[:s.recordSize])
			s.pending = s.pending[:copy(s.pending, s.pending[s.recordSize:])]
		} else if s.eof {
			s.out, err = s.sealer.Finish(s.out, s.pending)
			s.pending, s.finished = nil, true
		}
		if err != nil {
			s.err = err
			return 0, err
		}
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
}

func (s *sealReader) Close() error {
	if s.body != nil {
		return s.body.Close()
	}
	return nil
}

// openedBody is a response body that releases only verified plaintext.
type openedBody struct {
	src     io.ReadCloser
	opener  *Opener
	dec     innerDecoder
	buf     []byte
	pending []byte
	ended   bool
	err     error
	eof     bool
	// readErr names a failed read of the outer body (a timeout, a reset).
	readErr func(error) error
}

// openResponse reads until the inner head is complete and returns it with
// a reader for the rest of the body (none for the answer to a HEAD
// request or a 304, whatever their Content-Length says: erratum E2).
func openResponse(src io.ReadCloser, o *Opener, limits Limits, requestMethod string, readErr func(error) error) (*openedBody, *ResponseHead, error) {
	b := &openedBody{src: src, opener: o, dec: innerDecoder{limits: limits}, buf: make([]byte, 32*1024), readErr: readErr}
	for {
		data, err := b.next()
		if err != nil {
			return nil, nil, err
		}
		if data == nil && b.eof {
			return nil, nil, ErrMalformedInner // the stream ended inside the head
		}
		headBytes, rest, err := b.dec.receive(data)
		if err != nil {
			return nil, nil, err
		}
		if headBytes != nil {
			h, err := ParseResponseHead(headBytes, limits)
			if err != nil {
				return nil, nil, err
			}
			b.dec.setContentLength(h.Fields, isBodiless(requestMethod, h.Status))
			if err := b.dec.countBody(0); err != nil {
				return nil, nil, err
			}
			b.pending = append([]byte(nil), rest...)
			return b, h, nil
		}
	}
}

// next returns the next verified plaintext (a copy), or nil at the end.
func (b *openedBody) next() ([]byte, error) {
	for {
		if b.eof {
			return nil, nil
		}
		ev, ok, err := b.opener.NextEvent()
		if err != nil {
			return nil, err
		}
		if ok {
			if ev.End {
				b.ended = true
				continue
			}
			return append([]byte(nil), ev.Data...), nil
		}
		n, rerr := b.src.Read(b.buf)
		if n > 0 {
			if err := b.opener.Receive(b.buf[:n]); err != nil {
				return nil, err
			}
			continue
		}
		if rerr == io.EOF {
			if err := b.opener.Finish(); err != nil {
				return nil, err
			}
			b.eof = true
			return nil, nil
		}
		if rerr != nil {
			return nil, b.readErr(rerr)
		}
	}
}

func (b *openedBody) Read(p []byte) (int, error) {
	for len(b.pending) == 0 {
		if b.err != nil {
			return 0, b.err
		}
		data, err := b.next()
		if err != nil {
			b.err = err
			return 0, err
		}
		if data == nil {
			if err := b.dec.finish(); err != nil {
				b.err = err
				return 0, err
			}
			b.err = io.EOF
			return 0, io.EOF
		}
		if _, _, err := b.dec.receive(data); err != nil {
			b.err = err
			return 0, err
		}
		b.pending = data
	}
	n := copy(p, b.pending)
	b.pending = b.pending[n:]
	return n, nil
}

func (b *openedBody) Close() error { return b.src.Close() }
