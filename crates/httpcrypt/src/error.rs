//! The IO side's error type.

/// A boxed error from a body or service.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What can fail while speaking HTTPCrypt over a network.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The peer's bytes broke the protocol (see `spec/httpcrypt.md` §12).
    #[error("protocol: {0} ({code})", code = .0.code())]
    Protocol(#[from] httpcrypt_proto::Error),
    /// The server refused the request in plaintext (unauthenticated: an
    /// on-path attacker can forge this).
    #[error("server refused the request: {status} {type_uri}")]
    Refused {
        /// Outer status.
        status: u16,
        /// Problem type, or empty when the body was not a problem document.
        type_uri: String,
    },
    /// The server refused the request in plaintext without a problem
    /// document (rspamd's controller answers an unknown key so: a
    /// `text/plain` 500). `text` is the first line of the body, printable
    /// characters only. Unauthenticated, like [`Error::Refused`].
    #[error("server refused the request in plaintext: {status} {text:?}")]
    RefusedText {
        /// Outer status.
        status: u16,
        /// First line of the body.
        text: String,
    },
    /// The server closed the connection without a complete response
    /// (rspamd's scan worker does so when it cannot decrypt a request).
    #[error("the server closed the connection without answering")]
    NoAnswer,
    /// The connection or the HTTP layer failed. The message includes the
    /// error's causes (hyper's own reason sits two levels down).
    #[error("transport: {}", Chain(.0.as_ref()))]
    Transport(BoxError),
    /// A header or body did not arrive in time.
    #[error("timed out")]
    Timeout,
    /// Local file or socket error.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// DNS publication or discovery failed (the message says which method
    /// failed and why).
    #[error("dns: {0}")]
    Dns(String),
    /// Authenticated mode without a pinned identity, and no identity
    /// validated with DNSSEC was found (spec §6.4). Holds what discovery
    /// found instead (a timeout, `SERVFAIL`, a record without the AD bit,
    /// …), `None` when it did not run.
    #[error(
        "authenticated mode: no pinned identity and no DNSSEC-validated _httpcrypt-id record{}",
        .0.as_deref().map_or(String::new(), |found| format!(" ({found})"))
    )]
    NoIdentity(Option<String>),
    /// The key store or configuration is unusable.
    #[error("configuration: {0}")]
    Config(String),
}

impl Error {
    /// The protocol error code, if this is a protocol error.
    pub fn code(&self) -> Option<&'static str> {
        match self {
            Error::Protocol(e) => Some(e.code()),
            _ => None,
        }
    }
}

impl From<hyper::Error> for Error {
    fn from(e: hyper::Error) -> Self {
        Error::Transport(Box::new(e))
    }
}

impl From<hyper_util::client::legacy::Error> for Error {
    fn from(e: hyper_util::client::legacy::Error) -> Self {
        Error::Transport(Box::new(e))
    }
}

/// Recovers our error from a boxed body error, if it is one.
pub fn from_box(e: BoxError) -> Error {
    match e.downcast::<Error>() {
        Ok(e) => *e,
        Err(e) => match e.downcast::<httpcrypt_proto::Error>() {
            Ok(p) => Error::Protocol(*p),
            Err(e) => Error::Transport(e),
        },
    }
}

/// Displays an error followed by its sources, `: `-separated.
pub(crate) struct Chain<'a>(pub(crate) &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cur = self.0.source();
        // Bounded: a cyclic chain must not hang an error message.
        for _ in 0..16 {
            let Some(e) = cur else { break };
            write!(f, ": {e}")?;
            cur = e.source();
        }
        Ok(())
    }
}
