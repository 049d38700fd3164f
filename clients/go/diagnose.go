package httpcrypt

// Client diagnoses (spec §12): a failure before any HTTPCrypt answer is
// named with the host and port, the mount and the phase it happened in,
// in the same words as the other clients.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http/httptrace"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Phases of one outer exchange, as a timeout names them.
const (
	phaseConnecting = "connecting"
	phaseSending    = "sending the request"
	phaseWaiting    = "waiting for the answer"
	phaseReading    = "reading the answer"
)

// BadSignatureDetail is the wording of bad_signature when the server's
// certificates do not verify under the pinned identity.
const BadSignatureDetail = "the certificates are not signed by the pinned identity"

// hostPort is the authority with the port made explicit (80 for http).
func hostPort(authority string) string {
	if _, _, err := net.SplitHostPort(authority); err == nil {
		return authority
	}
	return net.JoinHostPort(authority, "80")
}

// phaseTracker follows an outer request through the base transport's
// trace hooks (a base that calls none stays "connecting").
type phaseTracker struct{ at atomic.Int32 }

func (p *phaseTracker) phase() string {
	return [...]string{phaseConnecting, phaseSending, phaseWaiting}[p.at.Load()]
}

// traced returns ctx with hooks that move p along the exchange.
func (p *phaseTracker) traced(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn:      func(httptrace.GotConnInfo) { p.at.Store(1) },
		WroteRequest: func(httptrace.WroteRequestInfo) { p.at.Store(2) },
	})
}

// diagnose turns an error of the base transport into the package's
// error: a timeout (the call's deadline, or a network timeout), a failed
// connection, or else a plain transport error. start is when the call
// began: a timeout reports the call's whole budget when the context has
// a deadline, the time spent otherwise.
func diagnose(ctx context.Context, err error, authority, phase string, start time.Time) error {
	var he *Error
	if errors.As(err, &he) {
		if he.Code != CodeTransport || he.Err == nil {
			return he // a sealing error from the body reader, a limit
		}
		err = he.Err
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		d := time.Since(start)
		if dl, ok := ctx.Deadline(); ok {
			d = dl.Sub(start)
		}
		secs := strconv.FormatFloat(math.Max(math.Round(d.Seconds()*10)/10, 0), 'f', -1, 64)
		return &Error{Code: CodeTimeout, Err: err, Detail: fmt.Sprintf("timed out after %s s while %s", secs, phase)}
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		reason := op.Err.Error()
		var errno syscall.Errno
		if errors.As(op.Err, &errno) {
			reason = errno.Error()
		}
		return &Error{Code: CodeConnectFailed, Err: err, Detail: fmt.Sprintf("cannot connect to %s: %s", hostPort(authority), reason)}
	}
	return &Error{Code: CodeTransport, Err: err}
}

// earlyAnswerConn lets a server's early answer through. A server that
// refuses a request body before reading it (an outer 413) answers and
// closes; the client's next write then fails, and net/http drops the
// answer already received in favour of that write error. Like curl, this
// connection takes a failed write as the end of the upload instead: the
// writer waits until the connection is closed (after the answer was
// read, or when the read failed as the write did) and only then fails.
type earlyAnswerConn struct {
	net.Conn
	writeFailed atomic.Bool
	closeOnce   sync.Once
	closed      chan struct{}
}

func dialEarlyAnswer(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &earlyAnswerConn{Conn: c, closed: make(chan struct{})}, nil
}

func (c *earlyAnswerConn) Write(p []byte) (int, error) {
	if !c.writeFailed.Load() {
		n, err := c.Conn.Write(p)
		if err == nil || !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
			return n, err
		}
		c.writeFailed.Store(true)
	}
	<-c.closed
	return 0, net.ErrClosed
}

func (c *earlyAnswerConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}
