//! Opening a sealed HTTPCrypt answer as its bytes arrive, record by record,
//! and parsing the inner response: the one body sink of both of the
//! generator's HTTPCrypt clients (suite 1 in `hc.rs`, suite 2 in `hcpq.rs`),
//! which differ only in what they keep from the inner head (`on_head`).

use anyhow::{bail, Context, Result};
use httpcrypt_proto::inner::{InnerEvent, ResponseDecoder, ResponseHead};
use httpcrypt_proto::stream::{Event, Opener};
use httpcrypt_proto::Limits;

use crate::http1::BodySink;

/// A sealed answer's opener and inner parser; `on_head` sees the inner head.
pub struct SealedSink<F> {
    opener: Opener,
    decoder: Option<ResponseDecoder>,
    status: Option<u16>,
    /// Sealed body bytes received.
    received: u64,
    body: u64,
    ended: bool,
    on_head: F,
}

impl<F: FnMut(&ResponseHead) -> Result<()>> SealedSink<F> {
    /// A sink for the answer `opener` opens.
    pub fn new(opener: Opener, limits: Limits, on_head: F) -> Self {
        SealedSink {
            opener,
            decoder: Some(ResponseDecoder::new(limits)),
            status: None,
            received: 0,
            body: 0,
            ended: false,
            on_head,
        }
    }

    /// Fails unless the inner status was 200; returns the sealed body's
    /// length.
    pub fn ok_len(&self) -> Result<u64> {
        if self.status != Some(200) {
            bail!("inner status {:?}", self.status);
        }
        Ok(self.received)
    }
}

impl<F: FnMut(&ResponseHead) -> Result<()>> BodySink for SealedSink<F> {
    fn data(&mut self, bytes: &[u8]) -> Result<()> {
        self.received += bytes.len() as u64;
        self.opener.receive(bytes)?;
        let decoder = self.decoder.as_mut().context("data after the end")?;
        while let Some(ev) = self.opener.next_event()? {
            match ev {
                Event::Data { plaintext, .. } => {
                    decoder.receive(plaintext)?;
                    while let Some(iev) = decoder.next_event()? {
                        match iev {
                            InnerEvent::Head(h) => {
                                self.status = Some(h.status);
                                (self.on_head)(&h)?;
                            }
                            InnerEvent::Body(b) => self.body += b.len() as u64,
                        }
                    }
                }
                Event::End => self.ended = true,
            }
        }
        Ok(())
    }

    fn end(&mut self) -> Result<u64> {
        if !self.ended {
            bail!("sealed response ended early");
        }
        if let Some(d) = self.decoder.take() {
            d.finish()?;
        }
        Ok(self.body)
    }
}
