//! The answers the layer makes: the service's answer sealed as it streams
//! (or split, spec/split-serving.md §S3), sealed inner problems (spec
//! §4.4), outer problems, and plain answers to failures outside the
//! protocol.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Response, StatusCode};
use http_body::Body;
use http_body_util::BodyExt;
use httpcrypt_proto::answer::AnswerHead;
use httpcrypt_proto::inner::{self, Field, ResponseHead};
use httpcrypt_proto::outer;
use httpcrypt_proto::server as core;
use httpcrypt_proto::split;
use httpcrypt_proto::stream::{ResponseKey, Sealer};
use httpcrypt_proto::Profile;

use super::shared::Shared;
use crate::body::{first_frame_room, full, plain, HcBody, SealBody, DEFAULT_RECORD};
use crate::error::{BoxError, Error};
use crate::split::{ContentStore, SplitSealBody};

/// The answer when a request fails outside the protocol (slow or broken
/// client, failing application) before a sealed answer was possible.
pub(super) fn failure_response(e: &BoxError) -> Response<HcBody> {
    match e.downcast_ref::<Error>() {
        Some(Error::Timeout) => plain(StatusCode::REQUEST_TIMEOUT, "request body timed out\n"),
        Some(Error::Transport(_)) => plain(StatusCode::BAD_REQUEST, "request body failed\n"),
        _ => {
            tracing::warn!(error = %e, "service failed");
            plain(StatusCode::INTERNAL_SERVER_ERROR, "internal error\n")
        }
    }
}

/// An outer (plaintext) problem response.
pub(super) fn outer_problem(err: &httpcrypt_proto::Error, certs: &[String]) -> Response<HcBody> {
    crate::metrics::rejected(err.code());
    let (status, doc) = outer::format_problem(err, certs).unwrap_or((400, String::from("{}")));
    problem_document(status, doc)
}

/// An outer problem answer with the document `doc`.
pub(super) fn problem_document(status: u16, doc: String) -> Response<HcBody> {
    let mut r = Response::new(full(doc));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(outer::PROBLEM_TYPE),
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

pub(super) fn sealed_outer(body: HcBody) -> Response<HcBody> {
    let mut r = Response::new(body);
    outer_fields(r.headers_mut());
    r
}

/// Sets the outer fields of every sealed answer (`outer::RESPONSE_FIELDS`,
/// as constants: no name lookup or value check per answer; the test
/// `outer_fields_are_the_contracts` keeps the two the same).
pub(super) fn outer_fields(h: &mut HeaderMap) {
    const CONTENT_TYPE: HeaderValue = HeaderValue::from_static(outer::OCTET_STREAM);
    const NO_STORE: HeaderValue = HeaderValue::from_static("no-store");
    h.insert(header::CONTENT_TYPE, CONTENT_TYPE);
    h.insert(header::CACHE_CONTROL, NO_STORE);
}

/// A sealed inner error (spec §4.4): only the client holding `k` can read it.
pub(super) fn inner_problem(
    key: ResponseKey,
    err: &httpcrypt_proto::Error,
    now: u64,
) -> Response<HcBody> {
    inner_problem_with(key, err, now, Vec::new())
}

/// [`inner_problem`] in answer to `HEAD`: the problem's head states the
/// document's length and the body stays empty (erratum E2); the status,
/// `Content-Type` and `Date` still say what happened.
pub(super) fn inner_problem_to_head(
    key: ResponseKey,
    err: &httpcrypt_proto::Error,
    now: u64,
) -> Response<HcBody> {
    let (mut head, body) = core::problem_response(err)
        .unwrap_or_else(|| (ResponseHead::new(500, "Internal Server Error"), Vec::new()));
    head.fields.push(Field::new(
        "Content-Length",
        itoa::Buffer::new().format(body.len()),
    ));
    let n0 = crate::nonce::nonce24();
    let mut out = Vec::new();
    match core::seal_response(key, n0, &head, b"", now, DEFAULT_RECORD, &mut out) {
        Ok(()) => sealed_outer(full(out)),
        Err(_) => plain(StatusCode::INTERNAL_SERVER_ERROR, "sealing failed\n"),
    }
}

/// [`inner_problem`] with extra inner fields (a ticket, a token).
pub(super) fn inner_problem_with(
    key: ResponseKey,
    err: &httpcrypt_proto::Error,
    now: u64,
    extra: Vec<Field>,
) -> Response<HcBody> {
    crate::metrics::rejected(err.code());
    let (mut head, body) = core::problem_response(err)
        .unwrap_or_else(|| (ResponseHead::new(500, "Internal Server Error"), Vec::new()));
    head.fields.extend(extra);
    let n0 = crate::nonce::nonce24();
    let mut out = Vec::new();
    match core::seal_response(key, n0, &head, &body, now, DEFAULT_RECORD, &mut out) {
        Ok(()) => sealed_outer(full(out)),
        Err(_) => plain(StatusCode::INTERNAL_SERVER_ERROR, "sealing failed\n"),
    }
}

/// What the layer needs to decide on, and produce, a split answer.
pub(super) struct SplitPlan<'a> {
    pub(super) config: &'a crate::split::SplitConfig,
    pub(super) store: Arc<ContentStore>,
    /// The outer request carried `Httpcrypt-Split` (it came through a split proxy).
    pub(super) asked: bool,
    /// It asked for the short outer head (`Httpcrypt-Split: 2`).
    pub(super) short_head: bool,
    pub(super) method: String,
    /// The inner request target as sent (§S1 normalises its path).
    pub(super) target: String,
    /// The request the service saw carried `Cookie` or `Authorization`.
    pub(super) credentials: bool,
    pub(super) mount: String,
}

/// Inner response fields that must not travel inside (spec §4.3).
pub(super) const HOP: &[HeaderName] = &[
    header::CONNECTION,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Seals the service's answer `rsp` (to a `HEAD` request when the flag says
/// so) as the outer response.
pub(super) fn seal_response<RB>(
    record_size: usize,
    key: ResponseKey,
    rsp: Response<RB>,
    answers_head: bool,
    extra: Vec<Field>,
    now: u64,
    split: Option<SplitPlan<'_>>,
) -> Response<HcBody>
where
    RB: Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    let (mut parts, body) = rsp.into_parts();
    // The answer to HEAD, and a 304, carry no body (erratum E2, spec §4.3):
    // whatever body the service gave is dropped.
    let bodiless = inner::is_bodiless_answer(
        if answers_head { "HEAD" } else { "" },
        parts.status.as_u16(),
    );
    let body = if bodiless {
        http_body_util::Either::Left(http_body_util::Empty::<Bytes>::new())
    } else {
        http_body_util::Either::Right(body)
    };
    // A split stream starts with a 24-byte response nonce (§S3), so only v1
    // answers are split; a profile-2 answer goes out whole.
    let v1 = key.profile() == Profile::V1;
    let split = split.filter(|p| {
        v1 && p.asked
            && crate::split::is_public(
                &p.method,
                &p.target,
                p.credentials,
                parts.status,
                &parts.headers,
                &p.config.public,
            )
    });
    let status = parts.status;
    let exact = body.size_hint().exact();
    // A streamed body (a file, say) still has the length the application
    // declared; the client checks it against what arrives (spec §4.3).
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    // The inner head, encoded straight from the response's header map; the
    // length and date rules are proto's (`AnswerHead`). Room for the head
    // and, when it is small, the body that follows it into the first record
    // (SealBody appends it to this buffer).
    let room = 512 + exact.map_or(0, |e| e.min(record_size as u64) as usize);
    let mut head = AnswerHead::new(
        key.profile(),
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        bodiless,
        exact,
        declared,
        room,
    );
    for (n, v) in parts.headers.iter() {
        if HOP.contains(n)
            || n.as_str() == "keep-alive"
            || n == header::CONTENT_LENGTH
            || n.as_str() == split::PUBLIC_FIELD
            || !inner::is_service_response_field(n.as_str())
        {
            continue;
        }
        head.service_field(n.as_str(), v.as_bytes());
    }
    head.end_service_fields(now);
    for f in &extra {
        head.field(&f.name, &f.value);
    }
    let head_bytes = head.finish(record_size);
    let n0 = crate::nonce::nonce24();
    // The nonce starts the first frame SealBody puts out, in this buffer.
    let mut prefix = Vec::with_capacity(first_frame_room(
        key.profile().response_prefix_len(),
        head_bytes.len(),
        exact,
        record_size,
    ));
    let sealer = Sealer::response(key, n0, &mut prefix);
    if let Some(plan) = split {
        return match SplitSealBody::new(
            sealer,
            prefix,
            &head_bytes,
            body,
            plan.config.public_record,
            plan.store,
        ) {
            Ok(b) => split_outer(b.boxed_unsync(), &plan.mount, plan.short_head),
            Err(_) => plain(StatusCode::INTERNAL_SERVER_ERROR, "sealing failed\n"),
        };
    }
    let sealed = SealBody::new(sealer, prefix, head_bytes, body, record_size);
    // The service's answer becomes the outer one: its header map (cleared)
    // is reused, nothing else of it goes out.
    parts.status = StatusCode::OK;
    parts.version = http::Version::HTTP_11;
    parts.headers.clear();
    parts.extensions.clear();
    let mut r = Response::from_parts(parts, sealed.boxed_unsync());
    outer_fields(r.headers_mut());
    r
}

/// The outer layout of a split answer (§S3); `short`: without
/// `Cache-Control` and `Httpcrypt-Content`, which the proxy that asked for
/// it does not need (the request's path names the content endpoint, and no
/// cache can reuse an answer to a target with a fresh nonce).
pub(super) fn split_outer(body: HcBody, mount: &str, short: bool) -> Response<HcBody> {
    let mut r = Response::new(body);
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(split::SPLIT_TYPE),
    );
    if short {
        return r;
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Ok(v) = HeaderValue::from_str(&format!("{mount}{}", split::CONTENT_DIR)) {
        h.insert(split::CONTENT_FIELD, v);
    }
    r
}

/// A `200 application/httpcrypt-certs` answer with `list`, cacheable until
/// the next rotation (`OPTIONS {mount}/`, and `{mount}/pq`).
pub(super) fn cert_list_response(shared: &Shared, list: String, now: u64) -> Response<HcBody> {
    let mut r = Response::new(full(list));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(outer::CERTS_TYPE),
    );
    let max_age = shared.keys.seconds_to_rotation(now);
    // Digits only: always a valid field value.
    if let Ok(v) = HeaderValue::from_str(&format!("max-age={max_age}")) {
        r.headers_mut().insert(header::CACHE_CONTROL, v);
    }
    r
}

#[cfg(test)]
mod tests {
    #[test]
    fn outer_fields_are_the_contracts() {
        let mut h = http::HeaderMap::new();
        super::outer_fields(&mut h);
        let got: Vec<(String, String)> = h
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_string()))
            .collect();
        let want: Vec<(String, String)> = httpcrypt_proto::outer::RESPONSE_FIELDS
            .iter()
            .map(|(n, v)| (n.to_ascii_lowercase(), v.to_string()))
            .collect();
        assert_eq!(got, want);
    }
}
