//! The inner HTTP/1.1 message carried by a sealed stream (spec §4.3):
//! encode, incremental parse (httparse) under the inner limits, and the
//! request a server hands to its service, built from the inner message
//! alone (erratum E1).
//!
//! Where each part lives: [`Field`] and the heads with their encoding in
//! `head.rs`; parsing a complete head under the limits ([`Head`]) in
//! `parse.rs`, and the [`PackedRequestHead`] a server keeps as bytes in
//! `packed.rs`; the incremental [`Decoder`] with the HEAD/304 rule
//! ([`is_bodiless_answer`], erratum E2) in `decoder.rs`; what the service
//! sees ([`service_fields`], [`service_host`]) in `service.rs`.

mod decoder;
mod head;
mod packed;
mod parse;
mod service;

pub use decoder::{
    decode_all, decode_response, is_bodiless_answer, Decoder, InnerEvent, RequestDecoder,
    ResponseDecoder,
};
pub(crate) use head::{encode_field, encode_status_line};
pub use head::{field, Field, RequestHead, ResponseHead, ResponseHeadWriter};
pub use packed::PackedRequestHead;
pub use parse::{Head, FORBIDDEN};
pub use service::{
    connection_token_iter, is_service_field, is_service_field_name, is_service_response_field,
    service_fields, service_host, DEFAULT_OUTER_PREFIX, PROTOCOL_FIELDS, PROTOCOL_RESPONSE_FIELDS,
};

#[cfg(test)]
mod tests;
