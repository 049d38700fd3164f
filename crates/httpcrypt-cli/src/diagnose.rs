//! How a failed `httpcrypt fetch` ends: the diagnosis code every client
//! shares (spec §12, "client diagnoses") and curl's exit code
//! ([`EXIT_CODES`]).

use crate::request::FetchArgs;

/// `--help` text: the exit codes, as curl's.
pub const EXIT_CODES: &str = "\
Exit codes (curl's numbers):
  0   success (with -f: an inner status below 400)
  1   any other failure (a protocol failure the server reported, say)
  3   malformed URL
  6   the host name did not resolve (connect_failed)
  7   cannot connect (connect_failed)
  22  -f and an inner status of 400 or more
  23  cannot write the output
  26  cannot read a local file (-d @FILE, --data-file)
  28  timed out (--connect-timeout, --max-time) (timeout)
  35  not an HTTPCrypt server, or no endpoint at --mount (not_httpcrypt, no_endpoint);
      --pq require, or an origin pinned to suite 2, and no suite 2 offered (hybrid_downgrade);
      a server that takes suite 2 only, asked in v1 (hybrid_required)
  47  more redirects than --max-redirs
  60  the certificates are not signed by the pinned identity (bad_signature)
Errors name their diagnosis code (spec §12, client diagnoses), e.g.
  httpcrypt: connect_failed: cannot connect to 127.0.0.1:8080: Connection refused";

/// A failed fetch: its exit code, its diagnosis code (spec §12) if any,
/// and the message.
#[derive(Debug)]
pub struct Failure {
    pub exit: i32,
    pub code: Option<&'static str>,
    pub message: String,
}

impl Failure {
    pub(crate) fn new(exit: i32, code: Option<&'static str>, message: impl Into<String>) -> Self {
        Failure {
            exit,
            code,
            message: message.into(),
        }
    }
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Failure::new(1, None, format!("{e:#}"))
    }
}

pub(crate) fn secs(d: f64) -> String {
    if d.fract() == 0.0 {
        format!("{d:.0}")
    } else {
        format!("{d}")
    }
}

/// The host and port of an `http://` URL (port 80 by default).
fn host_port(url: &http::Uri) -> String {
    let host = url.host().unwrap_or_default();
    format!("{host}:{}", url.port_u16().unwrap_or(80))
}

/// Names a failure (spec §12, client diagnoses); `options`: of the
/// `OPTIONS` request for the certificates (only its refusal says that the
/// server is not an HTTPCrypt server or that the mount is wrong).
pub(crate) fn diagnose(
    e: httpcrypt::Error,
    a: &FetchArgs,
    url: &http::Uri,
    options: bool,
) -> Failure {
    let hp = host_port(url);
    // OPTIONS goes to `{mount}/`; the mount is named as the user gave it.
    let options_path = format!("{}/", a.mount.trim_end_matches('/'));
    let mount = if a.mount.is_empty() {
        "/"
    } else {
        a.mount.as_str()
    };
    match &e {
        httpcrypt::Error::Refused {
            status: 404,
            type_uri,
        } if options && type_uri.is_empty() => Failure::new(
            35,
            Some("no_endpoint"),
            format!("no HTTPCrypt endpoint at {mount} on {hp}: wrong --mount?"),
        ),
        httpcrypt::Error::Refused { status, type_uri } if options && type_uri.is_empty() => {
            Failure::new(
                35,
                Some("not_httpcrypt"),
                format!(
                    "{hp} is not an HTTPCrypt server (OPTIONS {options_path} answered {status})"
                ),
            )
        }
        httpcrypt::Error::RefusedText { status, .. } if options => Failure::new(
            35,
            Some("not_httpcrypt"),
            format!("{hp} is not an HTTPCrypt server (OPTIONS {options_path} answered {status})"),
        ),
        httpcrypt::Error::Protocol(p) if p.code() == "hybrid_downgrade" => Failure::new(
            35,
            Some("hybrid_downgrade"),
            format!(
                "{hp} offered no suite-2 (hybrid) key, but suite 2 is required or pinned for it (--pq {})",
                httpcrypt::client::Pq::from(a.pq).as_str()
            ),
        ),
        httpcrypt::Error::Refused { type_uri, .. }
            if type_uri == httpcrypt::proto::error::problem_type::HYBRID_REQUIRED =>
        {
            Failure::new(
                35,
                Some("hybrid_required"),
                format!("{hp} takes hybrid (suite 2) requests only: use --pq prefer or --pq require"),
            )
        }
        httpcrypt::Error::Protocol(p) if p.code() == "bad_signature" => Failure::new(
            60,
            Some("bad_signature"),
            "the certificates are not signed by the pinned identity",
        ),
        httpcrypt::Error::Transport(t) => {
            // The connect error sits a few sources down.
            let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(t.as_ref());
            let mut text = Vec::new();
            let mut io_kind = None;
            for _ in 0..16 {
                let Some(c) = cause else { break };
                text.push(c.to_string());
                if let Some(io) = c.downcast_ref::<std::io::Error>() {
                    io_kind = Some((io.kind(), io.to_string()));
                }
                cause = c.source();
            }
            let joined = text.join(": ");
            if joined.contains("dns error") {
                let reason = text.last().cloned().unwrap_or_default();
                return Failure::new(
                    6,
                    Some("connect_failed"),
                    format!(
                        "cannot connect to {hp}: cannot resolve {}: {reason}",
                        url.host().unwrap_or_default()
                    ),
                );
            }
            match io_kind {
                Some((std::io::ErrorKind::TimedOut, _)) if joined.contains("connect") => {
                    Failure::new(
                        28,
                        Some("timeout"),
                        format!(
                            "timed out after {} s while connecting to {hp}",
                            secs(a.connect_timeout)
                        ),
                    )
                }
                Some((_, reason)) if joined.contains("tcp connect") => Failure::new(
                    7,
                    Some("connect_failed"),
                    format!("cannot connect to {hp}: {reason}"),
                ),
                _ => Failure::new(1, None, e.to_string()),
            }
        }
        httpcrypt::Error::Protocol(_) if a.identity.is_none() => {
            // A 200 to OPTIONS without a certificate list.
            Failure::new(1, None, e.to_string())
        }
        _ => Failure::new(1, None, e.to_string()),
    }
}
