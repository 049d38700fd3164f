//! What middleboxes see (spec §4.1, §4.2, §4.4, §11): the mount and nonce
//! path, the GET-form query, the key cookie, the fixed outer heads, and the
//! plaintext problem documents.

use rand_core::CryptoRngCore;

use crate::b64;
use crate::error::{Error, Result};
use crate::keys::{KexPublic, KeyId, KID_LEN};
use crate::profile::{Profile, COMPACT_MARK};
use crate::suite::NONCE_LEN;
use crate::ticket::{SEALED_TICKET_LEN, SHORT_H_LEN};

/// Characters of a base64url nonce in the path.
pub const NONCE_B64_LEN: usize = b64::encoded_len(NONCE_LEN);
/// Characters of a base64url key or ticket ID.
pub const ID_B64_LEN: usize = b64::encoded_len(KID_LEN);
/// Characters of a base64url X25519 public key.
pub const PUBLIC_B64_LEN: usize = b64::encoded_len(32);
/// Characters of a base64url sealed ticket (the cookie value of §7.2).
pub const TICKET_B64_LEN: usize = b64::encoded_len(SEALED_TICKET_LEN);
/// Characters of a base64url short ticket's `h` (the cookie value of §7.3).
pub const SHORT_B64_LEN: usize = b64::encoded_len(SHORT_H_LEN);
/// Most padding characters after a cookie name or value.
pub const MAX_PAD: usize = 16;

/// Which credential a cookie value carries, told by its length alone
/// (spec §7.3): a short ticket's `h` (22–38 characters with its pad), a
/// public key (43–59) or a v1 ticket (115–131); the ranges do not overlap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CookieForm {
    /// A short ticket (spec §7.3).
    ShortTicket,
    /// A client public key.
    Key,
    /// A v1 ticket (spec §7.2).
    Ticket,
}

impl CookieForm {
    /// The form of a cookie value of this length (a value between two
    /// ranges is named after the shorter form, whose parse then refuses it).
    pub fn of(value: &[u8]) -> Self {
        if value.len() < PUBLIC_B64_LEN {
            CookieForm::ShortTicket
        } else if value.len() < TICKET_B64_LEN {
            CookieForm::Key
        } else {
            CookieForm::Ticket
        }
    }

    /// The form of the first pair's value of a `Cookie` field a client
    /// sent (its credential comes first); `None` when that pair has no `=`.
    pub fn of_field(field: &[u8]) -> Option<Self> {
        let pair = Pairs(Some(field)).next()?;
        let eq = memchr::memchr(b'=', pair)?;
        Some(CookieForm::of(trim_ows(&pair[eq + 1..])))
    }
}
/// Most padding characters a profile-2 client draws (spec §4.5).
pub const MAX_PAD_COMPACT: usize = 7;
/// Clients use the GET form only while the request line stays below this.
pub const GET_FORM_LIMIT: usize = 2000;

/// The path prefix under which a server answers HTTPCrypt (spec §4.1):
/// empty, or `/`-led without a trailing `/`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Mount(String);

impl Mount {
    /// Normalises `path`: `""` and `"/"` are the root; otherwise a leading
    /// `/` is added and trailing ones removed. Refuses `?`, `#`, `%`, spaces,
    /// control characters and non-ASCII bytes.
    pub fn new(path: &str) -> Result<Self> {
        if path
            .bytes()
            .any(|b| matches!(b, b'?' | b'#' | b'%') || b <= b' ' || b >= 0x7f)
        {
            return Err(Error::BadNoncePath);
        }
        let trimmed = path.trim_end_matches('/');
        if trimmed.is_empty() {
            return Ok(Mount(String::new()));
        }
        if trimmed.starts_with('/') {
            Ok(Mount(trimmed.to_string()))
        } else {
            Ok(Mount(format!("/{trimmed}")))
        }
    }

    /// The prefix as text (empty for the root).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// What follows `{mount}/` in `path`; `None` when `path` lies outside
    /// the mount (the mount itself without its `/` included).
    pub fn strip<'a>(&self, path: &'a str) -> Option<&'a str> {
        path.strip_prefix(self.as_str())?.strip_prefix('/')
    }

    /// `{mount}/` — where `OPTIONS` is answered.
    pub fn options_path(&self) -> String {
        format!("{}/", self.0)
    }

    /// `{mount}/{b64u(n0)}` (spec §4.1).
    pub fn nonce_path(&self, n0: &[u8; NONCE_LEN]) -> String {
        self.nonce_path_for(Profile::V1, n0)
    }

    /// `{mount}/{b64u(n0)}?{b64u(stream)}`: the GET form's target.
    pub fn get_target(&self, n0: &[u8; NONCE_LEN], stream: &[u8]) -> String {
        self.get_target_for(Profile::V1, n0, stream)
    }

    /// The nonce path in `profile`: `{mount}/{b64u(n0)}`, or
    /// `{mount}/2{b64u(n0)}` for profile 2 (spec §4.5).
    pub fn nonce_path_for(&self, profile: Profile, n0: &[u8; NONCE_LEN]) -> String {
        let mut s = String::with_capacity(self.0.len() + 2 + NONCE_B64_LEN);
        s.push_str(&self.0);
        s.push('/');
        if profile == Profile::Compact {
            s.push(COMPACT_MARK as char);
        }
        b64::encode_to(n0, &mut s);
        s
    }

    /// The GET form's target in `profile`.
    pub fn get_target_for(&self, profile: Profile, n0: &[u8; NONCE_LEN], stream: &[u8]) -> String {
        let mut s = self.nonce_path_for(profile, n0);
        s.reserve(1 + b64::encoded_len(stream.len()));
        s.push('?');
        b64::encode_to(stream, &mut s);
        s
    }
}

/// How the server routes an outer request (spec §11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route<'a> {
    /// Not under the mount: ordinary handling (typically 404 or pass-through).
    Outside,
    /// `OPTIONS {mount}/`: answer with certificates.
    Options,
    /// Under the mount with another method: 405.
    MethodNotAllowed,
    /// Under the mount but no HTTPCrypt resource there (e.g. `OPTIONS` elsewhere): 404.
    NotFound,
    /// A POST-form request; the body is the stream.
    Post {
        /// The request's stream nonce.
        n0: [u8; NONCE_LEN],
        /// The request profile its nonce segment shows.
        profile: Profile,
    },
    /// A GET-form request; the query is the stream (still base64url).
    Get {
        /// The request's stream nonce.
        n0: [u8; NONCE_LEN],
        /// The raw query text.
        query: &'a str,
        /// The request profile its nonce segment shows.
        profile: Profile,
    },
}

/// Routes `method` and `target` (origin form, exactly as received: no
/// percent-decoding) against `mount`. Errors are outer 400s; when a GET
/// query is malformed the nonce path is still judged first (spec §11 order).
pub fn route<'a>(method: &str, target: &'a str, mount: &Mount) -> Result<Route<'a>> {
    let (path, query) = match target.find('?') {
        Some(i) => (&target[..i], Some(&target[i + 1..])),
        None => (target, None),
    };
    let Some(rest) = mount.strip(path) else {
        return Ok(Route::Outside);
    };
    match method {
        "OPTIONS" if rest.is_empty() => Ok(Route::Options),
        "OPTIONS" => Ok(Route::NotFound),
        "POST" | "GET" => {
            let (n0, profile) = parse_nonce_segment(rest)?;
            if method == "POST" {
                return Ok(Route::Post { n0, profile });
            }
            match query {
                Some(q) => Ok(Route::Get {
                    n0,
                    query: q,
                    profile,
                }),
                None => Err(Error::BadQuery),
            }
        }
        _ => Ok(Route::MethodNotAllowed),
    }
}

/// The nonce segment of the path: 32 base64url characters (v1), or `2`
/// followed by them (profile 2, spec §4.5).
pub fn parse_nonce_segment(text: &str) -> Result<([u8; NONCE_LEN], Profile)> {
    match text.as_bytes().first() {
        Some(&COMPACT_MARK) if text.len() == NONCE_B64_LEN + 1 => {
            Ok((parse_nonce(&text[1..])?, Profile::Compact))
        }
        _ => Ok((parse_nonce(text)?, Profile::V1)),
    }
}

/// Exactly 32 base64url characters naming a 24-byte nonce.
pub fn parse_nonce(text: &str) -> Result<[u8; NONCE_LEN]> {
    if text.len() != NONCE_B64_LEN {
        return Err(Error::BadNoncePath);
    }
    b64::decode_array::<NONCE_LEN>(text.as_bytes()).map_err(|_| Error::BadNoncePath)
}

/// Decodes a GET-form query into stream bytes; anything but canonical
/// base64url (extra parameters included) is `bad_query`.
pub fn decode_query(query: &str, max_body: usize) -> Result<Vec<u8>> {
    if query.len() / 4 * 3 > max_body {
        return Err(Error::BodyTooLarge);
    }
    b64::decode(query.as_bytes()).map_err(|_| Error::BadQuery)
}

/// The checks of [`decode_query`] without decoding (and so without
/// allocating): the size bound, then canonical base64url.
pub fn check_query(query: &str, max_body: usize) -> Result<()> {
    if query.len() / 4 * 3 > max_body {
        return Err(Error::BodyTooLarge);
    }
    if query.len() % 4 == 1 || !b64::all_alphabet(query.as_bytes()) {
        return Err(Error::BadQuery);
    }
    // Unused low bits of the last character must be zero (spec §1.2).
    let last = query.bytes().last().map_or(0, |c| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'-' => 62,
        _ => 63,
    });
    let unused_mask = match query.len() % 4 {
        2 => 0x0f,
        3 => 0x03,
        _ => 0,
    };
    if last & unused_mask != 0 {
        return Err(Error::BadQuery);
    }
    Ok(())
}

/// Padding drawn from the caller's RNG: 0–16 base64url characters.
pub fn random_pad(rng: &mut impl CryptoRngCore) -> String {
    random_pad_for(Profile::V1, rng)
}

/// Padding for `profile`: 0–16 characters for v1, 0–7 for profile 2.
pub fn random_pad_for(profile: Profile, rng: &mut impl CryptoRngCore) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let max = match profile {
        Profile::V1 => MAX_PAD,
        Profile::Compact => MAX_PAD_COMPACT,
    };
    let mut b = [0u8; MAX_PAD + 1];
    rng.fill_bytes(&mut b);
    let n = (b[0] as usize) % (max + 1);
    b[1..=n]
        .iter()
        .map(|x| ALPHABET[(*x & 63) as usize] as char)
        .collect()
}

/// The cookie pair `{b64u(id)}{name_pad}={b64u(value)}{value_pad}` (spec §4.1, §7.2).
/// Pads must be 0–16 base64url characters.
pub fn format_cookie(id: &KeyId, value: &[u8], name_pad: &str, value_pad: &str) -> Result<String> {
    for pad in [name_pad, value_pad] {
        if pad.len() > MAX_PAD || !b64::all_alphabet(pad.as_bytes()) {
            return Err(Error::BadCookie);
        }
    }
    let mut s = String::with_capacity(ID_B64_LEN + 2 * MAX_PAD + 1 + b64::encoded_len(value.len()));
    b64::encode_to(&id.0, &mut s);
    s.push_str(name_pad);
    s.push('=');
    b64::encode_to(value, &mut s);
    s.push_str(value_pad);
    Ok(s)
}

/// What a known cookie carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// A client public key under a known kex key ID.
    Key {
        /// The server key ID.
        kid: KeyId,
        /// The client's X25519 public key.
        client_public: KexPublic,
    },
    /// A ticket under a known ticket-key ID.
    Ticket {
        /// The ticket-key ID.
        tid: KeyId,
        /// `ticket[10..]`: nonce, ciphertext, tag.
        sealed: [u8; SEALED_TICKET_LEN],
    },
    /// A short ticket under a known ticket-key ID (spec §7.3).
    ShortTicket {
        /// The ticket-key ID.
        tid: KeyId,
        /// The ticket's random part `h`.
        h: [u8; SHORT_H_LEN],
    },
}

impl Credential {
    /// Whether the cookie carried a ticket of either form (a resumed session).
    pub fn is_ticket(&self) -> bool {
        matches!(
            self,
            Credential::Ticket { .. } | Credential::ShortTicket { .. }
        )
    }
}

/// What an ID names on this server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdKind {
    /// A current kex key.
    Key,
    /// A current ticket key.
    Ticket,
}

fn trim_ows(s: &[u8]) -> &[u8] {
    let start = s
        .iter()
        .position(|b| *b != b' ' && *b != b'\t')
        .unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|b| *b != b' ' && *b != b'\t')
        .map_or(start, |i| i + 1);
    &s[start..end]
}

fn is_b64(s: &[u8]) -> bool {
    b64::all_alphabet(s)
}

/// Whether a pair looks like an HTTPCrypt cookie (known to this server or not).
fn has_shape(name: &[u8], value: &[u8]) -> bool {
    let name_ok = (ID_B64_LEN..=ID_B64_LEN + MAX_PAD).contains(&name.len()) && is_b64(name);
    // A short ticket's 22–38 characters are not in the shape (§7.3): the
    // contract's `no_cookie` for other cookies of that length stays as it is.
    let value_ok = ((PUBLIC_B64_LEN..=PUBLIC_B64_LEN + MAX_PAD).contains(&value.len())
        || (TICKET_B64_LEN..=TICKET_B64_LEN + MAX_PAD).contains(&value.len()))
        && is_b64(value);
    name_ok && value_ok
}

/// Parses `text` as `{b64u(N bytes)}{0..16 pad}`.
fn strip_pad<const N: usize>(text: &[u8]) -> Result<[u8; N]> {
    let len = b64::encoded_len(N);
    if text.len() < len || text.len() > len + MAX_PAD || !is_b64(&text[len..]) {
        return Err(Error::BadCookie);
    }
    b64::decode_array::<N>(&text[..len]).map_err(|_| Error::BadCookie)
}

/// The `;`-separated pairs of one `Cookie` field, untrimmed: what
/// `split(|b| *b == b';')` yields, found with `memchr`.
struct Pairs<'a>(Option<&'a [u8]>);

impl<'a> Iterator for Pairs<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        let rest = self.0?;
        match memchr::memchr(b';', rest) {
            Some(i) => {
                self.0 = Some(&rest[i + 1..]);
                Some(&rest[..i])
            }
            None => {
                self.0 = None;
                Some(rest)
            }
        }
    }
}

/// Scans every `Cookie` field for the first pair whose 14-character name
/// prefix is an ID `lookup` knows (spec §4.1, §11). That pair must then be
/// well formed. Without one: `unknown_key` if some pair has the HTTPCrypt
/// shape, else `no_cookie`.
pub fn scan_cookies<'a>(
    fields: impl IntoIterator<Item = &'a [u8]>,
    lookup: impl Fn(&KeyId) -> Option<IdKind>,
) -> Result<Credential> {
    let mut shaped = false;
    for field in fields {
        for pair in Pairs(Some(field)) {
            let pair = trim_ows(pair);
            let Some(eq) = memchr::memchr(b'=', pair) else {
                continue;
            };
            let (name, value) = (trim_ows(&pair[..eq]), trim_ows(&pair[eq + 1..]));
            let known = name
                .get(..ID_B64_LEN)
                .and_then(|prefix| b64::decode_array::<KID_LEN>(prefix).ok())
                .map(KeyId)
                .and_then(|id| Some((id, lookup(&id)?)));
            let Some((id, kind)) = known else {
                // The shape matters only for the error when nothing matches.
                shaped |= has_shape(name, value);
                continue;
            };
            let name_pad = &name[ID_B64_LEN..];
            if name_pad.len() > MAX_PAD || !is_b64(name_pad) {
                return Err(Error::BadCookie);
            }
            return Ok(match kind {
                IdKind::Key => Credential::Key {
                    kid: id,
                    client_public: KexPublic(strip_pad::<32>(value)?),
                },
                IdKind::Ticket if CookieForm::of(value) == CookieForm::ShortTicket => {
                    Credential::ShortTicket {
                        tid: id,
                        h: strip_pad::<SHORT_H_LEN>(value)?,
                    }
                }
                IdKind::Ticket => Credential::Ticket {
                    tid: id,
                    sealed: strip_pad::<SEALED_TICKET_LEN>(value)?,
                },
            });
        }
    }
    Err(if shaped {
        Error::UnknownKey
    } else {
        Error::NoCookie
    })
}

/// Content type of outer HTTPCrypt bodies.
pub const OCTET_STREAM: &str = "application/octet-stream";
/// Content type of the certificate list answered to `OPTIONS`.
pub const CERTS_TYPE: &str = "application/httpcrypt-certs";
/// Content type of outer problem documents.
pub const PROBLEM_TYPE: &str = "application/problem+json";

/// Which outer request form a client sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// `POST {mount}/{n0}` with the stream as body.
    Post,
    /// `GET {mount}/{n0}?{b64u(stream)}`, no body.
    Get,
}

/// Encodes a complete outer request head (spec §4.1) in the project's
/// canonical field order. `target` is `Mount::nonce_path` (POST) or
/// `Mount::get_target` (GET); `body_len` is ignored for GET.
pub fn encode_request_head(
    form: Form,
    target: &str,
    host: &str,
    cookie: &str,
    body_len: usize,
    out: &mut Vec<u8>,
) {
    let method = match form {
        Form::Post => "POST",
        Form::Get => "GET",
    };
    out.extend_from_slice(
        format!("{method} {target} HTTP/1.1\r\nHost: {host}\r\nCookie: {cookie}\r\n").as_bytes(),
    );
    if form == Form::Post {
        out.extend_from_slice(format!("Content-Type: {OCTET_STREAM}\r\n").as_bytes());
    }
    if form == Form::Post {
        out.extend_from_slice(format!("Content-Length: {body_len}\r\n").as_bytes());
    }
    out.extend_from_slice(b"\r\n");
}

/// Fields of the outer response (spec §4.2), without the framing field.
pub const RESPONSE_FIELDS: &[(&str, &str)] = &[
    ("Content-Type", OCTET_STREAM),
    ("Cache-Control", "no-store"),
];

/// Encodes the outer response head with a `Content-Length` (spec §4.2).
pub fn encode_response_head(body_len: usize, out: &mut Vec<u8>) {
    out.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
    for (n, v) in RESPONSE_FIELDS {
        out.extend_from_slice(format!("{n}: {v}\r\n").as_bytes());
    }
    out.extend_from_slice(format!("Content-Length: {body_len}\r\n\r\n").as_bytes());
}

/// An RFC 9457 problem document (outer or inner).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProblemDoc {
    /// The `type` URI.
    pub type_uri: String,
    /// HTTP status.
    pub status: u16,
    /// Certificate lines (`unknown-key` only).
    pub certs: Vec<String>,
}

/// Formats the problem document for `err`; `certs` are included for `unknown_key`.
/// Returns `None` for errors that are not request problems.
pub fn format_problem(err: &Error, certs: &[String]) -> Option<(u16, String)> {
    let p = err.problem()?;
    let mut doc = serde_json::json!({
        "type": p.type_uri,
        "title": err.to_string(),
        "status": p.status,
    });
    if *err == Error::UnknownKey {
        doc["certs"] = serde_json::json!(certs);
    }
    Some((p.status, doc.to_string()))
}

/// Parses a problem document; unknown members are ignored.
pub fn parse_problem(body: &[u8]) -> Result<ProblemDoc> {
    let v: serde_json::Value = serde_json::from_slice(body).map_err(|_| Error::MalformedInner)?;
    let type_uri = v
        .get("type")
        .and_then(|t| t.as_str())
        .ok_or(Error::MalformedInner)?;
    let status = v
        .get("status")
        .and_then(|s| s.as_u64())
        .and_then(|s| u16::try_from(s).ok())
        .unwrap_or(0);
    let certs = v
        .get("certs")
        .and_then(|c| c.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    Ok(ProblemDoc {
        type_uri: type_uri.to_string(),
        status,
        certs,
    })
}

/// Whether a request line with this target stays within the GET-form limit.
pub fn fits_get_form(mount: &Mount, stream_len: usize) -> bool {
    fits_get_form_for(Profile::V1, mount, stream_len)
}

/// [`fits_get_form`] for a request in `profile` (profile 2's nonce segment
/// is one character longer).
pub fn fits_get_form_for(profile: Profile, mount: &Mount, stream_len: usize) -> bool {
    // "GET " + path + "?" + query + " HTTP/1.1"
    let line = 4
        + mount.as_str().len()
        + 1
        + usize::from(profile == Profile::Compact)
        + NONCE_B64_LEN
        + 1
        + crate::b64::encoded_len(stream_len)
        + 9;
    line < GET_FORM_LIMIT
}

#[cfg(test)]
mod tests;
