//! The socket as the load generator sees it: a TCP stream that counts the
//! bytes it reads and writes (TCP payload, so TLS records and HTTPCrypt
//! framing are included) and the round trips the client waited for.
//!
//! A round trip ("flight") is counted when a read returns data after the
//! client wrote something since the previous read: the client sent, then
//! had to wait for the peer. The TCP handshake counts as the first one. For
//! a request/response exchange this is the structural number of round trips
//! before the first response byte: plain HTTP 2, TLS 1.3 3, TLS 1.2 4 (full
//! handshake) or 3 (resumed), HTTPCrypt 2.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Byte and round-trip counters of one connection.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counters {
    /// Bytes written to the socket.
    pub written: u64,
    /// Bytes read from the socket.
    pub read: u64,
    /// Round trips waited for, the TCP handshake included.
    pub flights: u32,
}

impl Counters {
    pub fn total(&self) -> u64 {
        self.written + self.read
    }

    pub fn minus(&self, earlier: &Counters) -> Counters {
        Counters {
            written: self.written - earlier.written,
            read: self.read - earlier.read,
            flights: self.flights - earlier.flights,
        }
    }
}

/// A TCP stream with [`Counters`].
#[derive(Debug)]
pub struct Counting {
    inner: TcpStream,
    counters: Counters,
    wrote_since_read: bool,
}

impl Counting {
    /// Wraps a freshly connected stream: the handshake was one round trip.
    pub fn new(inner: TcpStream) -> Self {
        Counting {
            inner,
            counters: Counters {
                flights: 1,
                ..Default::default()
            },
            wrote_since_read: false,
        }
    }

    pub fn counters(&self) -> Counters {
        self.counters
    }
}

impl AsyncRead for Counting {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = r {
            let n = (buf.filled().len() - before) as u64;
            if n > 0 {
                this.counters.read += n;
                if this.wrote_since_read {
                    this.counters.flights += 1;
                    this.wrote_since_read = false;
                }
            }
        }
        r
    }
}

impl AsyncWrite for Counting {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            if n > 0 {
                this.counters.written += n as u64;
                this.wrote_since_read = true;
            }
        }
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = r {
            if n > 0 {
                this.counters.written += n as u64;
                this.wrote_since_read = true;
            }
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
