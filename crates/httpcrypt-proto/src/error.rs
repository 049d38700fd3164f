//! The crate's one error type and its mapping to the problem types and
//! statuses of spec §4.4 / §11.
//!
//! Every variant has a stable snake_case code ([`Error::code`]); the same
//! codes appear as `expect` in `vectors/` and in every client implementation.

use thiserror::Error;

/// Everything that can go wrong while handling HTTPCrypt bytes.
///
/// Integrity failures deliberately carry no detail.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum Error {
    /// Base64url text with padding, a foreign character or non-zero trailing bits.
    #[error("invalid base64url")]
    BadBase64,
    /// rspamd base32 text with a character outside its alphabet.
    #[error("invalid rspamd base32")]
    BadBase32,
    /// The outer request has no usable `Host` field.
    #[error("missing or invalid Host")]
    BadHost,
    /// The outer path is not `{mount}/` followed by 32 base64url characters.
    #[error("invalid nonce path")]
    BadNoncePath,
    /// A GET-form request without a query, with a query that is not one base64url stream, or with a body.
    #[error("invalid GET-form query")]
    BadQuery,
    /// No cookie pair has the HTTPCrypt shape.
    #[error("no HTTPCrypt cookie")]
    NoCookie,
    /// The cookie pair naming a known key or ticket is not well formed.
    #[error("malformed HTTPCrypt cookie")]
    BadCookie,
    /// The key or ticket ID is not (or no longer) known to the server,
    /// or a ticket failed to open or has expired.
    #[error("unknown or expired key")]
    UnknownKey,
    /// The X25519 output is all zero (small-order peer key).
    #[error("small-order public key")]
    SmallOrder,
    /// The outer body exceeds the server's limit.
    #[error("body too large")]
    BodyTooLarge,
    /// A record's length exceeds the receiver's maximum.
    #[error("record too large")]
    RecordTooLarge,
    /// A record failed to verify.
    #[error("integrity check failed")]
    Integrity,
    /// A request stream contains a CLEAR record.
    #[error("CLEAR record in a request")]
    ClearInRequest,
    /// The stream ended before its FINAL record (includes an empty stream).
    #[error("stream truncated")]
    Truncated,
    /// Bytes follow the FINAL record.
    #[error("trailing data after the final record")]
    TrailingData,
    /// More than 2^32 records in one stream.
    #[error("too many records")]
    TooManyRecords,
    /// The inner HTTP message does not parse, or breaks a rule of spec §4.3.
    #[error("malformed inner message")]
    MalformedInner,
    /// The inner head exceeds its size or field-count limit.
    #[error("inner head too large")]
    InnerHeadTooLarge,
    /// The inner message carries a header that must not appear inside (spec §4.3).
    #[error("forbidden inner header")]
    ForbiddenHeader,
    /// The inner Content-Length is invalid or differs from the body length.
    #[error("inner Content-Length mismatch")]
    ContentLengthMismatch,
    /// The inner `Date` field does not parse as an HTTP-date.
    #[error("invalid inner Date")]
    BadDate,
    /// The inner `Date` is missing or outside the freshness window.
    #[error("stale request")]
    Stale,
    /// The request was seen before.
    #[error("replayed request")]
    Replay,
    /// A side-effecting request without a valid `Random` token, on a server
    /// that demands one (spec §8, RFC 8470 semantics).
    #[error("token required")]
    TokenRequired,
    /// The strike register is full; the request cannot be checked now.
    #[error("replay register full")]
    Overloaded,
    /// A key certificate has the wrong length, version or suite.
    #[error("malformed certificate")]
    BadCertificate,
    /// A signature does not verify, or names another signer.
    #[error("bad signature")]
    BadSignature,
    /// No certificate is valid at the given time.
    #[error("certificate not valid now")]
    NotValid,
    /// A DNS record (TXT or AAAA set) does not follow spec §6.
    #[error("malformed DNS record")]
    BadRecord,
    /// An rspamd `Key` header is malformed.
    #[error("malformed rspamd Key header")]
    BadKeyHeader,
    /// A key file (rspamd keypair, fleet ratchet state) is malformed.
    #[error("malformed keypair file")]
    BadKeypair,
    /// The `Random` token does not verify.
    #[error("bad token")]
    BadToken,
    /// A split-stream frame or content batch breaks spec/split-serving.md §S4/§S5.
    #[error("malformed split stream")]
    MalformedSplit,
    /// A payload's length or BLAKE3-256 differs from its stub.
    #[error("content does not match its stub")]
    ContentMismatch,
    /// Under load the server wants an admission cookie echoed (with its
    /// puzzle solved) before it runs a key agreement (spec §14).
    #[error("admission cookie required")]
    AdmissionRequired,
    /// The source prefix's key-agreement budget is spent for now (spec §14).
    #[error("key agreement budget spent")]
    Busy,
    /// An admission echo or challenge that does not parse or verify (spec §14.3).
    #[error("bad admission cookie")]
    BadAdmission,
    /// A provenance certificate names another client address (spec/asap.md §3).
    #[error("provenance certificate for another address")]
    WrongAddress,
    /// A provenance certificate names another server (spec/asap.md §3).
    #[error("provenance certificate for another server")]
    WrongServer,
    /// A hybrid request's body (or decoded query) is shorter than the
    /// ML-KEM ciphertext (spec/hybrid.md H3).
    #[error("missing or short ML-KEM ciphertext")]
    BadCiphertext,
    /// A classical fresh-key request to a server that takes hybrid
    /// requests only (spec/hybrid.md H4).
    #[error("this server requires the hybrid key agreement")]
    HybridRequired,
    /// An ML-KEM encapsulation key whose SHA3-256 is not the hash its
    /// certificate signs (spec/hybrid.md H2).
    #[error("encapsulation key does not match its certificate")]
    KemMismatch,
    /// The origin is pinned to (or configured to require) the hybrid suite
    /// and discovery offered none (spec/hybrid.md H5).
    #[error("hybrid key agreement required for this origin but not offered")]
    HybridDowngrade,
}

/// Where a problem is reported (spec §4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Plaintext `application/problem+json` on the outer response.
    Outer,
    /// Inside the sealed response, under the session key.
    Inner,
}

/// An HTTP problem as the server reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Problem {
    /// HTTP status code.
    pub status: u16,
    /// The problem `type` URI.
    pub type_uri: &'static str,
    /// Outer (plaintext) or inner (sealed).
    pub scope: Scope,
}

/// Problem type URIs of spec §4.4.
pub mod problem_type {
    /// Unparseable outer request or inner message.
    pub const MALFORMED: &str = "urn:httpcrypt:malformed";
    /// Unknown or expired key or ticket ID.
    pub const UNKNOWN_KEY: &str = "urn:httpcrypt:unknown-key";
    /// A body or record exceeds a limit.
    pub const TOO_LARGE: &str = "urn:httpcrypt:too-large";
    /// Verification failure, truncation or trailing bytes.
    pub const INTEGRITY: &str = "urn:httpcrypt:integrity";
    /// Replayed request.
    pub const REPLAY: &str = "urn:httpcrypt:replay";
    /// Missing or out-of-window `Date`.
    pub const STALE: &str = "urn:httpcrypt:stale";
    /// A side-effecting request needs a `Random` token first (project addition, spec/httpcrypt.md §8).
    pub const TOKEN_REQUIRED: &str = "urn:httpcrypt:token-required";
    /// The server cannot check freshness now (project addition, spec/httpcrypt.md §8).
    pub const OVERLOADED: &str = "urn:httpcrypt:overloaded";
    /// Echo the admission cookie (project addition, spec §14).
    pub const ADMISSION: &str = "urn:httpcrypt:admission";
    /// Source budget spent, retry later (project addition, spec §14).
    pub const BUSY: &str = "urn:httpcrypt:busy";
    /// Only hybrid requests are taken (project addition, spec/hybrid.md H4).
    pub const HYBRID_REQUIRED: &str = "urn:httpcrypt:hybrid-required";
}

impl Error {
    /// The stable snake_case code used in vectors and by every implementation.
    pub fn code(&self) -> &'static str {
        match self {
            Error::BadBase64 => "bad_base64",
            Error::BadBase32 => "bad_base32",
            Error::BadHost => "bad_host",
            Error::BadNoncePath => "bad_nonce_path",
            Error::BadQuery => "bad_query",
            Error::NoCookie => "no_cookie",
            Error::BadCookie => "bad_cookie",
            Error::UnknownKey => "unknown_key",
            Error::SmallOrder => "small_order",
            Error::BodyTooLarge => "body_too_large",
            Error::RecordTooLarge => "record_too_large",
            Error::Integrity => "integrity",
            Error::ClearInRequest => "clear_in_request",
            Error::Truncated => "truncated",
            Error::TrailingData => "trailing_data",
            Error::TooManyRecords => "too_many_records",
            Error::MalformedInner => "malformed_inner",
            Error::InnerHeadTooLarge => "inner_head_too_large",
            Error::ForbiddenHeader => "forbidden_header",
            Error::ContentLengthMismatch => "content_length_mismatch",
            Error::BadDate => "bad_date",
            Error::Stale => "stale",
            Error::Replay => "replay",
            Error::TokenRequired => "token_required",
            Error::Overloaded => "overloaded",
            Error::BadCertificate => "bad_certificate",
            Error::BadSignature => "bad_signature",
            Error::NotValid => "not_valid",
            Error::BadRecord => "bad_record",
            Error::BadKeyHeader => "bad_key_header",
            Error::BadKeypair => "bad_keypair",
            Error::BadToken => "bad_token",
            Error::MalformedSplit => "malformed_split",
            Error::ContentMismatch => "content_mismatch",
            Error::AdmissionRequired => "admission_required",
            Error::Busy => "busy",
            Error::BadAdmission => "bad_admission",
            Error::WrongAddress => "wrong_address",
            Error::WrongServer => "wrong_server",
            Error::BadCiphertext => "bad_ciphertext",
            Error::HybridRequired => "hybrid_required",
            Error::KemMismatch => "kem_mismatch",
            Error::HybridDowngrade => "hybrid_downgrade",
        }
    }

    /// How a server reports this error to the client, if it is a request error.
    ///
    /// Outer errors are sent in plaintext before a session key exists; inner
    /// errors are sealed under the session key so an on-path injector cannot
    /// forge them (spec §4.4).
    pub fn problem(&self) -> Option<Problem> {
        use problem_type as t;
        let (status, type_uri, scope) = match self {
            Error::BadBase64
            | Error::BadHost
            | Error::BadNoncePath
            | Error::BadQuery
            | Error::NoCookie
            | Error::BadCookie
            | Error::SmallOrder
            | Error::BadCiphertext => (400, t::MALFORMED, Scope::Outer),
            Error::HybridRequired => (400, t::HYBRID_REQUIRED, Scope::Outer),
            Error::UnknownKey => (400, t::UNKNOWN_KEY, Scope::Outer),
            Error::BodyTooLarge => (413, t::TOO_LARGE, Scope::Outer),
            Error::RecordTooLarge => (413, t::TOO_LARGE, Scope::Inner),
            Error::Integrity
            | Error::ClearInRequest
            | Error::Truncated
            | Error::TrailingData
            | Error::TooManyRecords => (500, t::INTEGRITY, Scope::Inner),
            Error::MalformedInner
            | Error::InnerHeadTooLarge
            | Error::ForbiddenHeader
            | Error::ContentLengthMismatch
            | Error::BadDate => (400, t::MALFORMED, Scope::Inner),
            Error::Stale => (425, t::STALE, Scope::Inner),
            Error::Replay => (425, t::REPLAY, Scope::Inner),
            Error::TokenRequired => (425, t::TOKEN_REQUIRED, Scope::Inner),
            Error::Overloaded => (503, t::OVERLOADED, Scope::Inner),
            Error::AdmissionRequired => (429, t::ADMISSION, Scope::Outer),
            Error::Busy => (429, t::BUSY, Scope::Outer),
            Error::BadBase32
            | Error::BadCertificate
            | Error::BadSignature
            | Error::NotValid
            | Error::BadRecord
            | Error::BadKeyHeader
            | Error::BadKeypair
            | Error::BadToken
            | Error::MalformedSplit
            | Error::ContentMismatch
            | Error::BadAdmission
            | Error::WrongAddress
            | Error::WrongServer
            | Error::KemMismatch
            | Error::HybridDowngrade => return None,
        };
        Some(Problem {
            status,
            type_uri,
            scope,
        })
    }

    /// Every variant, for exhaustive tests and documentation.
    pub const ALL: &'static [Error] = &[
        Error::BadBase64,
        Error::BadBase32,
        Error::BadHost,
        Error::BadNoncePath,
        Error::BadQuery,
        Error::NoCookie,
        Error::BadCookie,
        Error::UnknownKey,
        Error::SmallOrder,
        Error::BodyTooLarge,
        Error::RecordTooLarge,
        Error::Integrity,
        Error::ClearInRequest,
        Error::Truncated,
        Error::TrailingData,
        Error::TooManyRecords,
        Error::MalformedInner,
        Error::InnerHeadTooLarge,
        Error::ForbiddenHeader,
        Error::ContentLengthMismatch,
        Error::BadDate,
        Error::Stale,
        Error::Replay,
        Error::TokenRequired,
        Error::Overloaded,
        Error::BadCertificate,
        Error::BadSignature,
        Error::NotValid,
        Error::BadRecord,
        Error::BadKeyHeader,
        Error::BadKeypair,
        Error::BadToken,
        Error::MalformedSplit,
        Error::ContentMismatch,
        Error::AdmissionRequired,
        Error::Busy,
        Error::BadAdmission,
        Error::WrongAddress,
        Error::WrongServer,
        Error::BadCiphertext,
        Error::HybridRequired,
        Error::KemMismatch,
        Error::HybridDowngrade,
    ];

    /// Looks an error up by its code.
    pub fn from_code(code: &str) -> Option<Error> {
        Error::ALL.iter().find(|e| e.code() == code).cloned()
    }
}

/// Result alias for this crate.
pub type Result<T, E = Error> = core::result::Result<T, E>;
