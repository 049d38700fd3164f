//! Streaming bodies: [`SealBody`] turns an inner head and body into a
//! sealed stream as the body's frames arrive; [`OpenBody`] verifies a sealed
//! stream record by record and yields the inner body. Both hold at most one
//! record plus one frame in memory, whatever the body size (spec §3).
//! Also the body type every service of this crate speaks ([`HcBody`]) and
//! the two short answers built from bytes in memory.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderValue};
use http::{Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use httpcrypt_proto::inner::{Decoder, Head, InnerEvent};
use httpcrypt_proto::stream::{sealed_len, Event, Opener, Sealer};
use pin_project_lite::pin_project;

use crate::error::{BoxError, Error};

/// Default record size for streamed bodies.
pub const DEFAULT_RECORD: usize = 16 * 1024;

/// Body type of requests handed to the wrapped service and of responses.
pub type HcBody = UnsyncBoxBody<Bytes, BoxError>;

/// A complete in-memory body.
pub(crate) fn full(b: impl Into<Bytes>) -> HcBody {
    Full::new(b.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// A short plaintext answer.
pub(crate) fn plain(status: StatusCode, body: &'static str) -> Response<HcBody> {
    let mut r = Response::new(full(body));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    r
}

/// Bytes of a body, for small responses in tests and tools.
pub async fn collect(body: HcBody) -> Result<Bytes, BoxError> {
    Ok(body.collect().await?.to_bytes())
}

pin_project! {
    /// A sealed stream built from an inner head and the inner body `B`.
    ///
    /// With an exactly sized inner body the records have a fixed layout
    /// (`record_size` bytes each but the last), so the outer length is known
    /// up front; otherwise every inner frame is sealed as soon as it arrives
    /// and an empty FINAL record closes the stream.
    pub struct SealBody<B> {
        #[pin]
        inner: B,
        sealer: Option<Sealer>,
        // Plaintext not sealed yet: the head first, then the body's bytes.
        pending: Vec<u8>,
        prefix: Option<Vec<u8>>,
        record_size: usize,
        fixed: bool,
        total: Option<u64>,
    }
}

/// The step every sealing body takes before it seals: polls `inner` for
/// its next frame and appends the frame's data to `pending`. Ready with
/// whether the body has ended, or with its error.
pub(crate) fn poll_pending<B>(
    mut inner: Pin<&mut B>,
    cx: &mut Context<'_>,
    pending: &mut impl bytes::BufMut,
) -> Poll<Result<bool, BoxError>>
where
    B: Body,
    B::Data: bytes::Buf,
    B::Error: Into<BoxError>,
{
    Poll::Ready(match ready!(inner.as_mut().poll_frame(cx)) {
        Some(Ok(frame)) => {
            if let Ok(mut data) = frame.into_data() {
                while bytes::Buf::has_remaining(&data) {
                    let chunk = bytes::Buf::chunk(&data);
                    let n = chunk.len();
                    pending.put_slice(chunk);
                    bytes::Buf::advance(&mut data, n);
                }
            }
            Ok(inner.is_end_stream())
        }
        Some(Err(e)) => Err(e.into()),
        None => Ok(true),
    })
}

/// Capacity for the `prefix` buffer of a [`SealBody`] over a head of
/// `head_len` bytes and a body of `exact` bytes: the prefix, and when head
/// and body fit one record (the whole answer is then the first frame), that
/// record too, so the frame goes out in this buffer.
pub fn first_frame_room(
    prefix_len: usize,
    head_len: usize,
    exact: Option<u64>,
    record_size: usize,
) -> usize {
    let record_size = record_size.clamp(1, httpcrypt_proto::limits::RECORD_CEILING);
    let one_record = exact
        .map(|body| head_len as u64 + body)
        .filter(|&plain| plain <= record_size as u64);
    prefix_len + one_record.map_or(0, |plain| sealed_len(plain, record_size) as usize)
}

impl<B: Body> SealBody<B> {
    /// Seals `head` followed by `inner`. `prefix` is written first (the
    /// response nonce; empty for requests).
    pub fn new(
        sealer: Sealer,
        prefix: Vec<u8>,
        head: Vec<u8>,
        inner: B,
        record_size: usize,
    ) -> Self {
        let record_size = record_size.clamp(1, httpcrypt_proto::limits::RECORD_CEILING);
        let exact = inner.size_hint().exact();
        let total = exact
            .map(|body| prefix.len() as u64 + sealed_len(head.len() as u64 + body, record_size));
        let mut pending = head;
        // Room for the first record's worth of a body of known size.
        if let Some(body) = exact {
            pending.reserve(body.min(record_size as u64) as usize);
        }
        SealBody {
            inner,
            sealer: Some(sealer),
            pending,
            prefix: Some(prefix),
            record_size,
            fixed: exact.is_some(),
            total,
        }
    }
}

impl<B> Body for SealBody<B>
where
    B: Body,
    B::Data: bytes::Buf,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        loop {
            if this.sealer.is_none() {
                return Poll::Ready(None);
            }
            let ended = match ready!(crate::body::poll_pending(
                this.inner.as_mut(),
                cx,
                &mut *this.pending
            )) {
                Ok(ended) => ended,
                Err(e) => return Poll::Ready(Some(Err(e))),
            };
            let rs = *this.record_size;
            let len = this.pending.len();
            // Full records only while more may come (fixed layout: the tail
            // waits); every byte as soon as it arrives otherwise.
            let whole = if ended || *this.fixed {
                len.saturating_sub(1) / rs * rs
            } else {
                len
            };
            let prefix = this.prefix.as_ref().map_or(0, Vec::len);
            if whole == 0 && !ended && prefix == 0 {
                continue;
            }
            // Sized for everything this frame puts out, so the frame is
            // handed on without a reallocation.
            let sealed = if ended { len } else { whole };
            // The prefix's buffer may already have the room
            // ([`first_frame_room`]).
            let mut out = this.prefix.take().unwrap_or_default();
            out.reserve_exact(sealed_len(sealed as u64, rs) as usize);
            let sealer = this.sealer.as_mut().expect("checked above");
            let mut at = 0;
            while at < whole {
                let n = rs.min(whole - at);
                sealer.seal(&this.pending[at..at + n], &mut out)?;
                at += n;
            }
            if ended {
                this.sealer
                    .take()
                    .expect("checked above")
                    .finish(&this.pending[at..], &mut out)?;
                at = len;
            }
            this.pending.drain(..at);
            if !out.is_empty() {
                return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.sealer.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match self.total {
            Some(t) if self.sealer.is_some() => SizeHint::with_exact(t),
            _ => SizeHint::default(),
        }
    }
}

/// Where an [`OpenBody`] reports a failure seen after the head was handed
/// on, so the server can answer with a sealed error instead.
pub type FailureSlot = Arc<Mutex<Option<httpcrypt_proto::Error>>>;

/// Verifies a sealed stream and yields the inner message: first the head
/// ([`OpenBody::head`]), then the body as an [`http_body::Body`].
pub struct OpenBody<B, H> {
    outer: Option<Pin<Box<B>>>,
    opener: Option<Opener>,
    decoder: Option<Decoder<H>>,
    ready: BytesMut,
    head: Option<H>,
    failure: Option<FailureSlot>,
    idle: Option<Duration>,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    received: u64,
    max_outer: u64,
    done: bool,
}

impl<B, H> std::fmt::Debug for OpenBody<B, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenBody")
            .field("received", &self.received)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl<B, H> OpenBody<B, H>
where
    B: Body,
    B::Data: bytes::Buf,
    B::Error: Into<BoxError>,
    H: Head,
{
    /// Opens the stream carried by `outer` (or, for the GET form, already
    /// in `initial` with `outer = None`).
    ///
    /// Boxed as it is made: the body is a few hundred bytes (the opener and
    /// the decoder), every caller keeps it behind a pointer, and a body
    /// built on the stack and boxed after was copied three times over.
    pub fn new(
        opener: Opener,
        decoder: Decoder<H>,
        outer: Option<B>,
        initial: Vec<u8>,
    ) -> Result<Box<Self>, Error> {
        let mut this = Box::new(OpenBody {
            outer: outer.map(Box::pin),
            opener: Some(opener),
            decoder: Some(decoder),
            ready: BytesMut::new(),
            head: None,
            failure: None,
            idle: None,
            timer: None,
            received: 0,
            max_outer: u64::MAX,
            done: false,
        });
        if !initial.is_empty() {
            this.push(initial)?;
        }
        Ok(this)
    }

    /// Fails the body when no outer bytes arrive for `idle`.
    pub fn set_idle_timeout(&mut self, idle: Duration) -> &mut Self {
        self.idle = Some(idle);
        self
    }

    /// Refuses outer bodies longer than `max` bytes (`body_too_large`).
    pub fn set_limit(&mut self, max: u64) -> &mut Self {
        self.max_outer = max;
        self
    }

    /// Records body failures in `slot` (if any) as well as returning them.
    pub fn set_failure_slot(&mut self, slot: Option<FailureSlot>) -> &mut Self {
        self.failure = slot;
        self
    }

    /// Feeds outer bytes through the opener (which keeps the vector as its
    /// buffer) and the decoder.
    fn push(&mut self, bytes: Vec<u8>) -> Result<(), httpcrypt_proto::Error> {
        let (Some(opener), Some(decoder)) = (self.opener.as_mut(), self.decoder.as_mut()) else {
            return Ok(());
        };
        opener.receive_vec(bytes)?;
        drain(opener, decoder, &mut self.head, &mut self.ready)
    }

    /// For a stream given whole (`outer = None`, the GET form): judges the
    /// rest of it now, after the head (`truncated`, `trailing_data`, a body
    /// that does not match its `Content-Length`), instead of when the
    /// service reads the body, which it may never do. A stream still
    /// arriving is left to be judged as it arrives.
    pub fn complete_now(&mut self) -> Result<(), Error> {
        if self.outer.is_some() || self.opener.is_none() {
            return Ok(());
        }
        finish_parts(
            &mut self.opener,
            &mut self.decoder,
            &mut self.head,
            &mut self.ready,
        )
        .map_err(Error::from)
    }

    /// Reads until the inner head is complete and returns it.
    pub async fn head(&mut self) -> Result<H, Error> {
        loop {
            if let Some(h) = self.head.take() {
                return Ok(h);
            }
            if self.done {
                // The stream is judged before the inner parse (spec §11.4): a
                // stream cut short is `truncated`, a complete one `malformed_inner`.
                finish_parts(
                    &mut self.opener,
                    &mut self.decoder,
                    &mut self.head,
                    &mut self.ready,
                )?;
                return Err(httpcrypt_proto::Error::MalformedInner.into());
            }
            match std::future::poll_fn(|cx| self.poll_outer(cx)).await {
                Ok(()) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Pulls one outer frame (or the end) and processes it.
    fn poll_outer(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        let Some(outer) = self.outer.as_mut() else {
            self.done = true;
            return Poll::Ready(Ok(()));
        };
        let frame = match outer.as_mut().poll_frame(cx) {
            Poll::Pending => {
                if let Some(idle) = self.idle {
                    let timer = self
                        .timer
                        .get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
                    if timer.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Err(Error::Timeout));
                    }
                }
                return Poll::Pending;
            }
            Poll::Ready(f) => f,
        };
        self.timer = None;
        match frame {
            Some(Ok(frame)) => {
                if let Ok(mut data) = frame.into_data() {
                    let (Some(opener), Some(decoder)) =
                        (self.opener.as_mut(), self.decoder.as_mut())
                    else {
                        return Poll::Ready(Ok(()));
                    };
                    while bytes::Buf::has_remaining(&data) {
                        let chunk = bytes::Buf::chunk(&data);
                        let n = chunk.len();
                        self.received += n as u64;
                        if self.received > self.max_outer {
                            return Poll::Ready(Err(httpcrypt_proto::Error::BodyTooLarge.into()));
                        }
                        opener.receive(chunk)?;
                        bytes::Buf::advance(&mut data, n);
                    }
                    drain(opener, decoder, &mut self.head, &mut self.ready)?;
                }
                Poll::Ready(Ok(()))
            }
            Some(Err(e)) => Poll::Ready(Err(Error::Transport(e.into()))),
            None => {
                self.outer = None;
                self.done = true;
                Poll::Ready(Ok(()))
            }
        }
    }
}

fn drain<H: Head>(
    opener: &mut Opener,
    decoder: &mut Decoder<H>,
    head: &mut Option<H>,
    ready: &mut BytesMut,
) -> Result<(), httpcrypt_proto::Error> {
    while let Some(ev) = opener.next_event()? {
        if let Event::Data { plaintext, .. } = ev {
            decoder.receive(plaintext)?;
            while let Some(iev) = decoder.next_event()? {
                match iev {
                    InnerEvent::Head(h) => *head = Some(h),
                    InnerEvent::Body(b) => ready.extend_from_slice(b),
                }
            }
        }
    }
    Ok(())
}

impl<B, H> Body for OpenBody<B, H>
where
    B: Body,
    B::Data: bytes::Buf,
    B::Error: Into<BoxError>,
    H: Head + Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        loop {
            if !this.ready.is_empty() {
                return Poll::Ready(Some(Ok(Frame::data(this.ready.split().freeze()))));
            }
            if this.opener.is_none() {
                return Poll::Ready(None);
            }
            let r = if this.done {
                finish_parts(
                    &mut this.opener,
                    &mut this.decoder,
                    &mut this.head,
                    &mut this.ready,
                )
                .map_err(Error::from)
            } else {
                match ready!(this.poll_outer(cx)) {
                    Ok(()) => continue,
                    Err(e) => Err(e),
                }
            };
            if let Err(e) = r {
                if let (Some(slot), Error::Protocol(p)) = (this.failure.as_ref(), &e) {
                    if let Ok(mut s) = slot.lock() {
                        *s = Some(p.clone());
                    }
                }
                this.opener = None;
                this.ready.clear();
                return Poll::Ready(Some(Err(Box::new(e))));
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.opener.is_none() && self.ready.is_empty()
    }
}

/// Ends the stream: the plaintext still buffered, then the opener's and
/// the decoder's verdicts (a stream cut short, a body that does not match
/// its length). Both are gone afterwards, whatever the verdict; they are
/// judged and dropped where they lie rather than moved out first.
fn finish_parts<H: Head>(
    opener: &mut Option<Opener>,
    decoder: &mut Option<Decoder<H>>,
    head: &mut Option<H>,
    ready: &mut BytesMut,
) -> Result<(), httpcrypt_proto::Error> {
    let verdict = (|| {
        if let (Some(o), Some(d)) = (opener.as_mut(), decoder.as_mut()) {
            drain(o, d, head, ready)?;
        }
        if let Some(o) = opener.as_ref() {
            o.check_finished()?;
        }
        match decoder.as_ref() {
            Some(d) => d.check_finished(),
            None => Ok(()),
        }
    })();
    *opener = None;
    *decoder = None;
    verdict
}

#[cfg(test)]
mod tests;
