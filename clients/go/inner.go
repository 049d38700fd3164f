package httpcrypt

import (
	"bytes"
	"strconv"
	"strings"
)

// Field is one header field of an inner message; names keep their case.
type Field struct {
	Name  string
	Value string
}

// Limits bound what a receiver accepts from its (possibly hostile) peer.
type Limits struct {
	// MaxRecord is the record maximum (clamped into [16 KiB, 2^24]).
	MaxRecord int
	// MaxInnerHead bounds the inner head in bytes, CRLF CRLF included.
	MaxInnerHead int
	// MaxInnerFields bounds the number of inner field lines.
	MaxInnerFields int
}

// DefaultLimits are the spec's defaults (spec §3.6, §4.3).
func DefaultLimits() Limits {
	return Limits{MaxRecord: DefaultMaxRecord, MaxInnerHead: 64 * 1024, MaxInnerFields: 100}
}

func (l Limits) orDefault() Limits {
	d := DefaultLimits()
	if l.MaxRecord == 0 {
		l.MaxRecord = d.MaxRecord
	}
	if l.MaxInnerHead == 0 {
		l.MaxInnerHead = d.MaxInnerHead
	}
	if l.MaxInnerFields == 0 {
		l.MaxInnerFields = d.MaxInnerFields
	}
	return l
}

// forbiddenInner are the inner fields the stream's framing replaces (spec §4.3).
var forbiddenInner = []string{"transfer-encoding", "connection", "keep-alive", "upgrade"}

func isForbidden(name string) bool {
	for _, f := range forbiddenInner {
		if strings.EqualFold(name, f) {
			return true
		}
	}
	return false
}

// RequestHead is the head of an inner request.
type RequestHead struct {
	Method string
	Target string
	Fields []Field
}

// ResponseHead is the head of an inner response.
type ResponseHead struct {
	Status int
	Reason string
	Fields []Field
}

// Get returns the value of the first field named name (case-insensitive).
func Get(fields []Field, name string) (string, bool) {
	for _, f := range fields {
		if strings.EqualFold(f.Name, name) {
			return f.Value, true
		}
	}
	return "", false
}

func formatFields(dst []byte, fields []Field) []byte {
	for _, f := range fields {
		dst = append(dst, f.Name...)
		dst = append(dst, ": "...)
		dst = append(dst, f.Value...)
		dst = append(dst, "\r\n"...)
	}
	return append(dst, "\r\n"...)
}

// Format appends `METHOD SP target SP HTTP/1.1 CRLF fields CRLF` to dst.
func (h *RequestHead) Format(dst []byte) []byte {
	dst = append(dst, h.Method...)
	dst = append(dst, ' ')
	dst = append(dst, h.Target...)
	dst = append(dst, " HTTP/1.1\r\n"...)
	return formatFields(dst, h.Fields)
}

// Format appends `HTTP/1.1 SP status SP reason CRLF fields CRLF` to dst.
func (h *ResponseHead) Format(dst []byte) []byte {
	dst = append(dst, "HTTP/1.1 "...)
	dst = strconv.AppendInt(dst, int64(h.Status), 10)
	dst = append(dst, ' ')
	dst = append(dst, h.Reason...)
	dst = append(dst, "\r\n"...)
	return formatFields(dst, h.Fields)
}

func isTchar(c byte) bool {
	if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTchar(s[i]) {
			return false
		}
	}
	return true
}

// isFieldText: HTAB, SP, VCHAR, obs-text.
func isFieldText(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\t' && (c < 0x20 || c == 0x7f) {
			return false
		}
	}
	return true
}

// splitLines checks the line ends (CR only before LF, LF only after CR)
// and returns the lines of a head that ends in CRLF CRLF, without the
// final empty line.
func splitLines(head []byte) ([]string, error) {
	for i := 0; i < len(head); i++ {
		switch head[i] {
		case '\r':
			if i+1 >= len(head) || head[i+1] != '\n' {
				return nil, ErrMalformedInner
			}
			i++
		case '\n':
			return nil, ErrMalformedInner
		}
	}
	if len(head) == 0 || head[0] == ' ' || head[0] == '\t' || head[0] == '\r' || head[0] == '\n' {
		return nil, ErrMalformedInner
	}
	if !bytes.HasSuffix(head, []byte("\r\n\r\n")) {
		return nil, ErrMalformedInner
	}
	lines := strings.Split(string(head[:len(head)-4]), "\r\n")
	return lines, nil
}

// parseFields parses field lines (no obsolete folding) and applies the
// inner rules: forbidden fields, one well-formed Content-Length.
func parseFields(lines []string, limits Limits) ([]Field, error) {
	if len(lines) > limits.MaxInnerFields {
		return nil, ErrInnerHeadTooLarge
	}
	fields := make([]Field, 0, len(lines))
	for _, l := range lines {
		colon := strings.IndexByte(l, ':')
		if colon <= 0 || !isToken(l[:colon]) {
			// Also catches folding: a line starting with SP or HTAB.
			return nil, ErrMalformedInner
		}
		name := l[:colon]
		value := strings.Trim(l[colon+1:], " \t")
		if !isFieldText(value) {
			return nil, ErrMalformedInner
		}
		fields = append(fields, Field{Name: name, Value: value})
	}
	seenCL := false
	for _, f := range fields {
		if isForbidden(f.Name) {
			return nil, ErrForbiddenHeader
		}
		if strings.EqualFold(f.Name, "content-length") {
			if seenCL {
				return nil, ErrContentLengthMismatch
			}
			seenCL = true
			if _, ok := parseContentLength(f.Value); !ok {
				return nil, ErrContentLengthMismatch
			}
		}
	}
	return fields, nil
}

// parseContentLength: 1–19 ASCII digits (spec §4.3, D20).
func parseContentLength(v string) (uint64, bool) {
	if v == "" || len(v) > 19 {
		return 0, false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(v, 10, 64)
	return n, err == nil
}

// ParseRequestHead parses a complete inner request head (through CRLF CRLF).
func ParseRequestHead(head []byte, limits Limits) (*RequestHead, error) {
	limits = limits.orDefault()
	lines, err := splitLines(head)
	if err != nil {
		return nil, err
	}
	parts := strings.Split(lines[0], " ")
	if len(parts) != 3 || !isToken(parts[0]) || parts[1] == "" || parts[2] != "HTTP/1.1" {
		return nil, ErrMalformedInner
	}
	for i := 0; i < len(parts[1]); i++ {
		if c := parts[1][i]; c <= 0x20 || c == 0x7f {
			return nil, ErrMalformedInner
		}
	}
	fields, err := parseFields(lines[1:], limits)
	if err != nil {
		return nil, err
	}
	return &RequestHead{Method: parts[0], Target: parts[1], Fields: fields}, nil
}

// ParseResponseHead parses a complete inner response head. The status
// must be 200–999 (spec §4.3, D6).
func ParseResponseHead(head []byte, limits Limits) (*ResponseHead, error) {
	limits = limits.orDefault()
	lines, err := splitLines(head)
	if err != nil {
		return nil, err
	}
	line := lines[0]
	if !strings.HasPrefix(line, "HTTP/1.1 ") || len(line) < 12 {
		return nil, ErrMalformedInner
	}
	code := line[9:12]
	for i := 0; i < 3; i++ {
		if code[i] < '0' || code[i] > '9' {
			return nil, ErrMalformedInner
		}
	}
	status, _ := strconv.Atoi(code)
	reason := ""
	if rest := line[12:]; rest != "" {
		if rest[0] != ' ' || !isFieldText(rest[1:]) {
			return nil, ErrMalformedInner
		}
		reason = rest[1:]
	}
	if status < 200 {
		return nil, ErrMalformedInner
	}
	fields, err := parseFields(lines[1:], limits)
	if err != nil {
		return nil, err
	}
	return &ResponseHead{Status: status, Reason: reason, Fields: fields}, nil
}

// innerDecoder splits stream plaintext into a head and body chunks,
// enforcing the head limits and a declared Content-Length.
type innerDecoder struct {
	limits   Limits
	buf      []byte
	scanned  int
	headDone bool
	clen     uint64
	hasCLen  bool
	bodyLen  uint64
	err      error
}

// receive pushes plaintext; it returns the complete head once (head != nil)
// and any body bytes that follow in this call.
func (d *innerDecoder) receive(p []byte) (head []byte, body []byte, err error) {
	if d.err != nil {
		return nil, nil, d.err
	}
	if d.headDone {
		return nil, p, d.countBody(len(p))
	}
	d.buf = append(d.buf, p...)
	from := d.scanned - 3
	if from < 0 {
		from = 0
	}
	i := bytes.Index(d.buf[from:], []byte("\r\n\r\n"))
	if i < 0 {
		d.scanned = len(d.buf)
		if len(d.buf) >= d.limits.MaxInnerHead {
			return nil, nil, d.fail(ErrInnerHeadTooLarge)
		}
		return nil, nil, nil
	}
	end := from + i + 4
	if end > d.limits.MaxInnerHead {
		return nil, nil, d.fail(ErrInnerHeadTooLarge)
	}
	d.headDone = true
	head, body = d.buf[:end], d.buf[end:]
	d.buf = nil
	return head, body, d.countBody(len(body))
}

// setContentLength takes the body length a parsed head declares. A
// bodiless message (an answer to HEAD, a 304) carries the representation's
// length, checked only for its syntax by the head's parser, and no body at
// all: any body byte is content_length_mismatch (erratum E2, spec §4.3).
func (d *innerDecoder) setContentLength(fields []Field, bodiless bool) {
	if bodiless {
		d.clen, d.hasCLen = 0, true
		return
	}
	if v, ok := Get(fields, "content-length"); ok {
		d.clen, d.hasCLen = parseContentLength(v)
	}
}

// isBodiless says whether a response to a requestMethod request has no
// body whatever its Content-Length says: the answer to HEAD, and a 304
// (erratum E2).
func isBodiless(requestMethod string, status int) bool {
	return requestMethod == "HEAD" || status == 304
}

func (d *innerDecoder) countBody(n int) error {
	d.bodyLen += uint64(n)
	if d.hasCLen && d.bodyLen > d.clen {
		return d.fail(ErrContentLengthMismatch)
	}
	return nil
}

func (d *innerDecoder) fail(e *Error) error {
	d.err = e
	d.buf = nil
	return e
}

// finish checks the end of the stream: complete head, matching length.
func (d *innerDecoder) finish() error {
	if d.err != nil {
		return d.err
	}
	if !d.headDone {
		return ErrMalformedInner
	}
	if d.hasCLen && d.clen != d.bodyLen {
		return ErrContentLengthMismatch
	}
	return nil
}

// DecodeRequest parses a complete inner request from stream plaintext.
func DecodeRequest(plaintext []byte, limits Limits) (*RequestHead, []byte, error) {
	limits = limits.orDefault()
	d := innerDecoder{limits: limits}
	headBytes, body, err := d.receive(plaintext)
	if err != nil {
		return nil, nil, err
	}
	if headBytes == nil {
		return nil, nil, d.finish()
	}
	h, err := ParseRequestHead(headBytes, limits)
	if err != nil {
		return nil, nil, err
	}
	d.setContentLength(h.Fields, false)
	if err := d.countBody(0); err != nil {
		return nil, nil, err
	}
	if err := d.finish(); err != nil {
		return nil, nil, err
	}
	return h, body, nil
}

// DecodeResponse parses a complete inner response to a GET (or any
// method but HEAD) from stream plaintext.
func DecodeResponse(plaintext []byte, limits Limits) (*ResponseHead, []byte, error) {
	return DecodeResponseTo("GET", plaintext, limits)
}

// DecodeResponseTo parses a complete inner response to a requestMethod
// request: the answer to HEAD (and any 304) may declare a Content-Length
// with an empty body, and must have an empty body (erratum E2).
func DecodeResponseTo(requestMethod string, plaintext []byte, limits Limits) (*ResponseHead, []byte, error) {
	limits = limits.orDefault()
	d := innerDecoder{limits: limits}
	headBytes, body, err := d.receive(plaintext)
	if err != nil {
		return nil, nil, err
	}
	if headBytes == nil {
		return nil, nil, d.finish()
	}
	h, err := ParseResponseHead(headBytes, limits)
	if err != nil {
		return nil, nil, err
	}
	d.setContentLength(h.Fields, isBodiless(requestMethod, h.Status))
	if err := d.countBody(0); err != nil {
		return nil, nil, err
	}
	if err := d.finish(); err != nil {
		return nil, nil, err
	}
	return h, body, nil
}
