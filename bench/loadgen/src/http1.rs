//! The one HTTP/1.1 client code path of the generator, used unchanged for
//! plain HTTP, TLS and HTTPCrypt: write a request, read the response head
//! (httparse), stream the body (Content-Length or chunked) into a sink. The
//! sink is where protocols differ: plain and TLS count bytes, HTTPCrypt
//! opens records.

use std::time::Instant;

use anyhow::{bail, Context, Result};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Reads body bytes of one response.
pub trait BodySink {
    /// The next body bytes (after transfer decoding).
    fn data(&mut self, bytes: &[u8]) -> Result<()>;
    /// The body ended; returns the application payload length.
    fn end(&mut self) -> Result<u64>;
}

/// Counts body bytes: plain HTTP and TLS.
#[derive(Debug, Default)]
pub struct CountSink(pub u64);

impl BodySink for CountSink {
    fn data(&mut self, bytes: &[u8]) -> Result<()> {
        self.0 += bytes.len() as u64;
        Ok(())
    }
    fn end(&mut self) -> Result<u64> {
        Ok(self.0)
    }
}

/// What came back.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    /// The server will close the connection.
    pub close: bool,
    /// Payload length as the sink judged it.
    pub payload: u64,
    /// When the first response byte arrived (after any TLS handshake).
    pub first_byte: Instant,
    /// When the last body byte arrived (before any wait for the close).
    pub done: Instant,
}

/// Reusable buffers of one connection.
#[derive(Debug)]
pub struct Buffers {
    head: Vec<u8>,
    chunk: Vec<u8>,
}

impl Default for Buffers {
    fn default() -> Self {
        Buffers {
            head: Vec::with_capacity(16 * 1024),
            chunk: vec![0; 64 * 1024],
        }
    }
}

/// Writes `request` and reads one response into `sink`.
pub async fn exchange<S, K>(
    io: &mut S,
    request: &[u8],
    bufs: &mut Buffers,
    sink: &mut K,
) -> Result<Reply>
where
    S: AsyncRead + AsyncWrite + Unpin,
    K: BodySink,
{
    io.write_all(request).await?;
    io.flush().await?;
    let head = &mut bufs.head;
    head.clear();
    let mut first_byte = None;
    let (status, close, framing, consumed) = loop {
        let start = head.len();
        head.resize(start + 16 * 1024, 0);
        let n = io.read(&mut head[start..]).await?;
        head.truncate(start + n);
        if n == 0 {
            bail!("connection closed before a complete response head");
        }
        first_byte.get_or_insert_with(Instant::now);
        let mut fields = [httparse::EMPTY_HEADER; 48];
        let mut rsp = httparse::Response::new(&mut fields);
        match rsp.parse(head).context("response head")? {
            httparse::Status::Partial => {
                if head.len() > 256 * 1024 {
                    bail!("response head too large");
                }
                continue;
            }
            httparse::Status::Complete(end) => {
                let status = rsp.code.unwrap_or(0);
                let mut close = false;
                let mut framing = Framing::UntilClose;
                for f in rsp.headers.iter() {
                    if f.name.eq_ignore_ascii_case("content-length") {
                        let text = std::str::from_utf8(f.value).context("content-length")?;
                        framing = Framing::Length(text.trim().parse().context("content-length")?);
                    } else if f.name.eq_ignore_ascii_case("transfer-encoding") {
                        framing = Framing::Chunked(Chunked::default());
                    } else if f.name.eq_ignore_ascii_case("connection") {
                        close |= f.value.eq_ignore_ascii_case(b"close");
                    }
                }
                break (status, close, framing, end);
            }
        }
    };
    let first_byte = first_byte.unwrap_or_else(Instant::now);
    let mut framing = framing;
    let rest = head.split_off(consumed);
    let mut done = framing.feed(&rest, sink)?;
    while !done {
        let n = io.read(&mut bufs.chunk).await?;
        if n == 0 {
            if matches!(framing, Framing::UntilClose) {
                break;
            }
            bail!("connection closed inside a response body");
        }
        done = framing.feed(&bufs.chunk[..n], sink)?;
    }
    let done = Instant::now();
    let payload = sink.end()?;
    Ok(Reply {
        done,
        status,
        close: close || matches!(framing, Framing::UntilClose),
        payload,
        first_byte,
    })
}

/// Reads until the peer closes (after `Connection: close`), so that every
/// byte the server sends, TLS alerts included, is counted. Errors (a TLS
/// peer closing without close_notify) end it too.
pub async fn drain_to_close<S: AsyncRead + Unpin>(io: &mut S, bufs: &mut Buffers) {
    while let Ok(n) = io.read(&mut bufs.chunk).await {
        if n == 0 {
            break;
        }
    }
}

enum Framing {
    Length(u64),
    Chunked(Chunked),
    UntilClose,
}

impl Framing {
    /// Feeds raw body bytes; true once the body is complete.
    fn feed<K: BodySink>(&mut self, mut bytes: &[u8], sink: &mut K) -> Result<bool> {
        match self {
            Framing::Length(left) => {
                let n = (*left).min(bytes.len() as u64) as usize;
                if n > 0 {
                    sink.data(&bytes[..n])?;
                }
                *left -= n as u64;
                Ok(*left == 0)
            }
            Framing::UntilClose => {
                if !bytes.is_empty() {
                    sink.data(bytes)?;
                }
                Ok(false)
            }
            Framing::Chunked(c) => {
                while !bytes.is_empty() {
                    let (used, data) = c.step(bytes)?;
                    if let Some(d) = data {
                        sink.data(d)?;
                    }
                    bytes = &bytes[used..];
                    if c.state == ChunkState::Done {
                        return Ok(true);
                    }
                }
                Ok(c.state == ChunkState::Done)
            }
        }
    }
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    #[default]
    Size,
    /// Extension or CR after the size, up to LF.
    SizeLine,
    Data,
    /// CRLF after the data.
    DataEnd,
    /// Trailer lines after the last chunk; `blank` counts bytes on the line.
    Trailer,
    Done,
}

/// A chunked-coding decoder (RFC 9112 §7.1), lenient about extensions.
#[derive(Debug, Default)]
struct Chunked {
    state: ChunkState,
    size: u64,
    line_len: usize,
}

impl Chunked {
    /// Consumes a prefix of `b`; returns the bytes used and any data.
    fn step<'a>(&mut self, b: &'a [u8]) -> Result<(usize, Option<&'a [u8]>)> {
        match self.state {
            ChunkState::Size => {
                let c = b[0];
                if let Some(d) = (c as char).to_digit(16) {
                    self.size = self.size.checked_mul(16).context("chunk size")? + u64::from(d);
                } else {
                    self.state = ChunkState::SizeLine;
                    return self.step(b);
                }
                Ok((1, None))
            }
            ChunkState::SizeLine => {
                if b[0] == b'\n' {
                    if self.size == 0 {
                        self.state = ChunkState::Trailer;
                        self.line_len = 0;
                    } else {
                        self.state = ChunkState::Data;
                    }
                }
                Ok((1, None))
            }
            ChunkState::Data => {
                let n = self.size.min(b.len() as u64) as usize;
                self.size -= n as u64;
                if self.size == 0 {
                    self.state = ChunkState::DataEnd;
                }
                Ok((n, Some(&b[..n])))
            }
            ChunkState::DataEnd => {
                if b[0] == b'\n' {
                    self.state = ChunkState::Size;
                }
                Ok((1, None))
            }
            ChunkState::Trailer => {
                match b[0] {
                    b'\n' if self.line_len == 0 => self.state = ChunkState::Done,
                    b'\n' => self.line_len = 0,
                    b'\r' => {}
                    _ => self.line_len += 1,
                }
                Ok((1, None))
            }
            ChunkState::Done => bail!("bytes after the last chunk"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_any_split() {
        let wire = b"5;x=1\r\nhello\r\n3\r\nabc\r\n0\r\nT: 1\r\n\r\n";
        for split in 0..wire.len() {
            let mut f = Framing::Chunked(Chunked::default());
            let mut sink = CountSink::default();
            let a = f.feed(&wire[..split], &mut sink).expect("first part");
            let b = f.feed(&wire[split..], &mut sink).expect("second part");
            assert!(!a || split == wire.len());
            assert!(b, "split {split}");
            assert_eq!(sink.0, 8);
        }
    }
}
