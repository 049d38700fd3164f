//! The `rspamadm keypair` text form (profile "Keys and text encoding"): a
//! UCL block with `pubkey`, `privkey`, `id`, `encoding`, `algorithm`, `type`.
//!
//! [`format()`] writes what rspamadm 3.4 prints (its field order varies from
//! run to run; ours is fixed). [`parse()`] reads a small, tolerant subset of
//! UCL: `#`, `//` and `/* */` comments; an optional `keypair { }` wrapper and
//! optional outer braces (so `rspamadm keypair -j` JSON reads too); quoted or
//! bare values; `=`, `:` or nothing between key and value; `;`, `,` or a
//! newline after it. It is strict on what the values say:
//! - `privkey` and `pubkey` (or rspamd's aliases `private`, `private_key`,
//!   `secret`, `secret_key`, `public`, `public_key`) are required, 52-char
//!   base32 (or the 51-char form rspamd accepts), and must belong together;
//! - `id`, if present, must be `base32(BLAKE2b-512(pubkey))`;
//! - `encoding`, `algorithm` and `type`, if present, must be `base32`,
//!   `curve25519` and `kex` (ASCII case ignored, as rspamd does). rspamd
//!   defaults missing ones to exactly these, and so do we. rspamd also reads
//!   `encoding = "hex"`, which rspamadm never writes; we refuse it.
//!
//! Other fields are ignored, as rspamd ignores them; a repeated field is an
//! error. Every failure is [`Error::BadKeypair`].

use zeroize::Zeroizing;

use super::base32;
use super::keys::{public_from_base32, KeyId};
use crate::error::{Error, Result};
use crate::keys::KexSecret;

/// The UCL block `rspamadm keypair` prints for `secret` (the secret key is
/// written clamped, as rspamd stores it).
pub fn format(secret: &KexSecret) -> Zeroizing<String> {
    let mut sk = secret.to_bytes();
    sk[0] &= 248;
    sk[31] = (sk[31] & 127) | 64;
    let public = secret.public();
    let mut out = Zeroizing::new(String::with_capacity(400));
    out.push_str("keypair {\n    pubkey = \"");
    base32::encode_to(&public.0, &mut out);
    out.push_str("\";\n    privkey = \"");
    base32::encode_to(&sk[..], &mut out);
    out.push_str("\";\n    id = \"");
    out.push_str(&KeyId::of(public).to_base32());
    out.push_str(
        "\";\n    encoding = \"base32\";\n    algorithm = \"curve25519\";\n    type = \"kex\";\n}\n",
    );
    out
}

/// Reads a key-exchange key pair from the `rspamadm keypair` form.
pub fn parse(text: &str) -> Result<KexSecret> {
    let tokens = tokenize(text)?;
    let mut p = Parser {
        tokens: &tokens,
        at: 0,
    };
    let braced = p.eat(&Tok::Open);
    let mut top = p.members(0)?;
    if braced && !p.eat(&Tok::Close) {
        return Err(Error::BadKeypair);
    }
    if p.at != tokens.len() {
        return Err(Error::BadKeypair);
    }
    let fields = match take(&mut top, &["keypair"])? {
        Some(Value::Object(inner)) => inner,
        Some(Value::Str(_)) => return Err(Error::BadKeypair),
        None => top,
    };
    keypair_from(fields)
}

fn keypair_from(mut fields: Vec<(&str, Value<'_>)>) -> Result<KexSecret> {
    let privkey = take_str(
        &mut fields,
        &["privkey", "private", "private_key", "secret", "secret_key"],
    )?;
    let pubkey = take_str(&mut fields, &["pubkey", "public", "public_key"])?;
    let id = take_str(&mut fields, &["id"])?;
    for (names, want) in [
        (["encoding"], "base32"),
        (["algorithm"], "curve25519"),
        (["type"], "kex"),
    ] {
        if let Some(v) = take_str(&mut fields, &names)? {
            if !v.eq_ignore_ascii_case(want) {
                return Err(Error::BadKeypair);
            }
        }
    }
    let (Some(privkey), Some(pubkey)) = (privkey, pubkey) else {
        return Err(Error::BadKeypair);
    };
    let sk = Zeroizing::new(base32::decode_key(privkey.as_bytes()).map_err(|_| Error::BadKeypair)?);
    let secret = KexSecret::from_bytes(*sk);
    let public = public_from_base32(pubkey.as_bytes()).map_err(|_| Error::BadKeypair)?;
    if *secret.public() != public {
        return Err(Error::BadKeypair);
    }
    if let Some(id) = id {
        if KeyId::from_base32(id.as_bytes()).ok() != Some(KeyId::of(&public)) {
            return Err(Error::BadKeypair);
        }
    }
    Ok(secret)
}

/// Removes the one field named by any of `names`; two of them is an error.
fn take<'a>(fields: &mut Vec<(&str, Value<'a>)>, names: &[&str]) -> Result<Option<Value<'a>>> {
    let mut found = None;
    let mut i = 0;
    while i < fields.len() {
        if names.contains(&fields[i].0) {
            if found.is_some() {
                return Err(Error::BadKeypair);
            }
            found = Some(fields.remove(i).1);
        } else {
            i += 1;
        }
    }
    Ok(found)
}

fn take_str<'a>(fields: &mut Vec<(&str, Value<'a>)>, names: &[&str]) -> Result<Option<&'a str>> {
    match take(fields, names)? {
        Some(Value::Str(s)) => Ok(Some(s)),
        Some(Value::Object(_)) => Err(Error::BadKeypair),
        None => Ok(None),
    }
}

#[derive(Debug, PartialEq)]
enum Tok<'a> {
    /// A bare word or the contents of a quoted string.
    Str(&'a str),
    Open,
    Close,
    Assign,
    Sep,
}

enum Value<'a> {
    Str(&'a str),
    Object(Vec<(&'a str, Value<'a>)>),
}

fn tokenize(text: &str) -> Result<Vec<Tok<'_>>> {
    let b = text.as_bytes();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        match b[i] {
            b' ' | b'\t' | b'\r' | b'\n' => i += 1,
            b'#' => i += line_len(rest),
            b'/' if rest.starts_with(b"//") => i += line_len(rest),
            b'/' if rest.starts_with(b"/*") => {
                let end = rest
                    .windows(2)
                    .position(|w| w == b"*/")
                    .ok_or(Error::BadKeypair)?;
                i += end + 2;
            }
            c @ (b'{' | b'}' | b'=' | b':' | b';' | b',') => {
                toks.push(match c {
                    b'{' => Tok::Open,
                    b'}' => Tok::Close,
                    b'=' | b':' => Tok::Assign,
                    _ => Tok::Sep,
                });
                i += 1;
            }
            q @ (b'"' | b'\'') => {
                // Keys and values of this form never need escapes or newlines.
                let len = rest[1..]
                    .iter()
                    .position(|&c| c == q)
                    .ok_or(Error::BadKeypair)?;
                let s = &text[i + 1..i + 1 + len];
                if s.contains(['\\', '\n', '\r']) {
                    return Err(Error::BadKeypair);
                }
                toks.push(Tok::Str(s));
                i += len + 2;
            }
            _ => {
                let len = (0..rest.len())
                    .find(|&k| {
                        b" \t\r\n#{}=:;,\"'".contains(&rest[k])
                            || rest[k..].starts_with(b"//")
                            || rest[k..].starts_with(b"/*")
                    })
                    .unwrap_or(rest.len());
                toks.push(Tok::Str(&text[i..i + len]));
                i += len;
            }
        }
    }
    Ok(toks)
}

fn line_len(rest: &[u8]) -> usize {
    rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len())
}

struct Parser<'t, 'a> {
    tokens: &'t [Tok<'a>],
    at: usize,
}

impl<'a> Parser<'_, 'a> {
    fn eat(&mut self, t: &Tok<'_>) -> bool {
        let hit = self.tokens.get(self.at) == Some(t);
        if hit {
            self.at += 1;
        }
        hit
    }

    /// `(key assign? (string | '{' members '}') sep*)*`, up to a `}` or the end.
    fn members(&mut self, depth: usize) -> Result<Vec<(&'a str, Value<'a>)>> {
        if depth > 2 {
            return Err(Error::BadKeypair);
        }
        let mut out = Vec::new();
        while self.eat(&Tok::Sep) {}
        while let Some(&Tok::Str(key)) = self.tokens.get(self.at) {
            self.at += 1;
            self.eat(&Tok::Assign);
            let value = match self.tokens.get(self.at) {
                Some(&Tok::Str(s)) => {
                    self.at += 1;
                    Value::Str(s)
                }
                Some(Tok::Open) => {
                    self.at += 1;
                    let inner = self.members(depth + 1)?;
                    if !self.eat(&Tok::Close) {
                        return Err(Error::BadKeypair);
                    }
                    Value::Object(inner)
                }
                _ => return Err(Error::BadKeypair),
            };
            out.push((key, value));
            while self.eat(&Tok::Sep) {}
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::rspamd::keys::public_to_base32;
    use crate::rspamd::testdata::{ID, PRIVKEY, PUBKEY, SERVER_KEYPAIR as RSPAMADM};

    /// Printed by `rspamadm keypair -j`.
    const RSPAMADM_JSON: &str = r#"{
    "keypair": {
        "pubkey": "hu9ensfk4a17snb7uhkd7g44bcd5qdgqu1jg88psi4yp5q15i6cy",
        "algorithm": "curve25519",
        "privkey": "emmm8frbfx8jagts9ot7ykg3e4iyqt8hdo41fer48tqpytn34gzy",
        "type": "kex",
        "id": "ndzizau54n5r1gpjpr3pow8u74htq66ynexxc1ufbwbuzerwr6fkm6haohk38bpgwrw4r5oqdkpn61n9r3kzw8bqpnnee55n1b3ubmy",
        "encoding": "base32"
    }
}"#;

    /// Printed by `rspamadm keypair -s` (a signing key pair).
    const RSPAMADM_SIGN: &str = r#"keypair {
    id = "pexoe7usai44buueqbgitrnrzb4efonj3b3j83ii1gimo14t4i1igm6jet35nmwp765fid1qxtdi813rzykb1jpyp5eu7gozwm3u5xd";
    pubkey = "xaoet9x6ebhx86mqao11zajtt58at71tpepbbn7psyytp8gau87y";
    encoding = "base32";
    type = "sign";
    algorithm = "curve25519";
    privkey = "6iycummcn89k5curkgi9a4tbx11iusyqwyo4cpuigne1zf5jwxn9obtn99htna9qhzhobffxtundzxod5fd5o4nnr45cbyn5qco8x4b";
}"#;

    fn sorted_lines(s: &str) -> Vec<&str> {
        let mut v: Vec<&str> = s.lines().collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn reads_real_rspamadm_output() {
        // The strongest check on base32, BLAKE2b key IDs and public-from-secret:
        // all three must agree with rspamd for this to parse.
        let k = parse(RSPAMADM).unwrap();
        assert_eq!(public_to_base32(k.public()), PUBKEY);
        assert_eq!(KeyId::of(k.public()).to_base32(), ID);
        let j = parse(RSPAMADM_JSON).unwrap();
        assert_eq!(
            public_to_base32(j.public()),
            "hu9ensfk4a17snb7uhkd7g44bcd5qdgqu1jg88psi4yp5q15i6cy"
        );
    }

    #[test]
    fn writes_what_rspamadm_writes() {
        let k = parse(RSPAMADM).unwrap();
        let out = format(&k);
        // Same lines; rspamadm's order varies from run to run.
        assert_eq!(sorted_lines(&out), sorted_lines(RSPAMADM));
        assert!(out.starts_with("keypair {\n    pubkey = \""));
        assert!(out.ends_with("    type = \"kex\";\n}\n"));
        assert_eq!(parse(&out).unwrap().public(), k.public());
        // An unclamped secret is written clamped; it is the same key.
        let raw = KexSecret::from_bytes([0xff; 32]);
        let again = parse(&format(&raw)).unwrap();
        assert_eq!(again.public(), raw.public());
        assert_eq!(again.to_bytes()[0] & 7, 0);
        assert!(!std::format!("{k:?}").contains(PRIVKEY));
    }

    #[test]
    fn tolerant_syntax() {
        let forms = [
            std::format!("pubkey = \"{PUBKEY}\";\nprivkey = \"{PRIVKEY}\";\n"),
            std::format!("# a comment\nkeypair{{privkey={PRIVKEY} pubkey={PUBKEY}}}"),
            std::format!("keypair {{ /* c */ privkey: '{PRIVKEY}', // x\n pubkey '{PUBKEY}' }} # end"),
            std::format!("{{ keypair = {{\n\tprivkey = \"{PRIVKEY}\"\n\tpubkey = \"{PUBKEY}\"\n}} }}"),
            std::format!("keypair {{\r\n privkey = \"{PRIVKEY}\";;\r\n pubkey = \"{PUBKEY}\"; comment = \"x\";\r\n}}"),
            std::format!("keypair {{ secret_key = \"{PRIVKEY}\"; public = \"{PUBKEY}\"; type = KEX; }}"),
            std::format!("keypair {{ privkey = \"{PRIVKEY}\"; pubkey = \"{}\"; }}", &PUBKEY[..51]),
            std::format!("privkey = \"{PRIVKEY}\"; pubkey = \"{PUBKEY}\"; id = \"{ID}\""),
        ];
        for f in forms {
            assert_eq!(public_to_base32(parse(&f).unwrap().public()), PUBKEY, "{f}");
        }
    }

    #[test]
    fn strict_values() {
        let other = "hu9ensfk4a17snb7uhkd7g44bcd5qdgqu1jg88psi4yp5q15i6cy";
        let bad_id = ID.replacen('r', "y", 1);
        let cases = [
            RSPAMADM.replace(PUBKEY, other),
            RSPAMADM.replace(ID, &bad_id),
            RSPAMADM.replace(ID, &ID[..102]),
            RSPAMADM.replace(PRIVKEY, &PRIVKEY.to_uppercase()),
            RSPAMADM.replace(PRIVKEY, &std::format!("{PRIVKEY}y")),
            RSPAMADM.replace(PRIVKEY, &PRIVKEY[..50]),
            RSPAMADM.replace(PUBKEY, &PUBKEY[..50]),
            RSPAMADM.replace(PRIVKEY, &PRIVKEY.replace('y', "0")),
            RSPAMADM.replace("\"base32\"", "\"hex\""),
            RSPAMADM.replace("curve25519", "nistp256"),
            RSPAMADM.replace("\"kex\"", "\"sign\""),
            RSPAMADM.replace("\"kex\"", "{ }"),
            RSPAMADM.replace(&std::format!("    privkey = \"{PRIVKEY}\";\n"), ""),
            RSPAMADM.replace(&std::format!("    pubkey = \"{PUBKEY}\";\n"), ""),
            RSPAMADM.replace("type = \"kex\";", "type = \"kex\"; type = \"kex\";"),
            RSPAMADM.replace("pubkey", "public = \"x\"; pubkey"),
            RSPAMADM_SIGN.to_string(),
            String::new(),
            "keypair".to_string(),
            "keypair = \"x\"".to_string(),
        ];
        for c in cases {
            assert_eq!(parse(&c).err(), Some(Error::BadKeypair), "{c}");
        }
    }

    #[test]
    fn malformed_syntax() {
        let cases = [
            RSPAMADM.replace('}', ""),
            std::format!("{RSPAMADM}}}"),
            std::format!("{{{RSPAMADM}"),
            std::format!("{RSPAMADM} extra"),
            std::format!("{RSPAMADM} /* unterminated"),
            RSPAMADM.replacen('"', "", 1),
            RSPAMADM.replace("\"base32\"", "\"base\\u0033\""),
            RSPAMADM.replace("\"kex\"", "\"ke\nx\""),
            RSPAMADM.replace("type =", "= type ="),
            RSPAMADM.replace("keypair {", "a { b { c { keypair {") + "}}}",
        ];
        for c in cases {
            assert_eq!(parse(&c).err(), Some(Error::BadKeypair), "{c}");
        }
        // Non-ASCII text and every prefix of a real block fail cleanly (no panic).
        assert!(parse("keypair { \u{e9}t\u{e9} = \"\u{fc}\" \u{2603} }").is_err());
        assert!(parse(&RSPAMADM.replace("kex", "k\u{e9}x")).is_err());
        for cut in 0..RSPAMADM.len() {
            let _ = parse(&RSPAMADM[..cut]);
        }
    }
}
