//! [`PackedRequestHead`]: an inner request head kept as the bytes it was
//! parsed from, for a server that hands its parts on as views.

use crate::error::{Error, Result};
use crate::limits::Limits;

use super::parse::parse_request;
use super::{Field, Head, RequestHead};

/// Where a part of a [`PackedRequestHead`] lies in its bytes.
type Span = (u32, u32);

/// An inner request head kept as the bytes it was parsed from, with where
/// its method, target and fields lie in them: one allocation for the whole
/// head instead of one per string, and values a server hands on as views
/// of those bytes. Parsed and checked exactly as [`RequestHead`] is.
#[derive(Debug, Clone)]
pub struct PackedRequestHead {
    bytes: bytes::Bytes,
    method: Span,
    target: Span,
    fields: smallvec::SmallVec<[(Span, Span); 6]>,
}

impl PackedRequestHead {
    fn at(&self, (a, b): Span) -> &[u8] {
        &self.bytes[a as usize..b as usize]
    }

    fn str_at(&self, span: Span) -> &str {
        // Spans of names, method and target come from httparse's `&str`s.
        std::str::from_utf8(self.at(span)).unwrap_or_default()
    }

    /// The method token.
    pub fn method(&self) -> &str {
        self.str_at(self.method)
    }

    /// The request target.
    pub fn target(&self) -> &str {
        self.str_at(self.target)
    }

    /// The request target as a view of the head's bytes.
    pub fn target_bytes(&self) -> bytes::Bytes {
        self.bytes
            .slice(self.target.0 as usize..self.target.1 as usize)
    }

    /// The fields in order, names as sent.
    pub fn fields(&self) -> impl Iterator<Item = (&str, &[u8])> + '_ {
        self.fields
            .iter()
            .map(|&(n, v)| (self.str_at(n), self.at(v)))
    }

    /// The fields in order, names as bytes and values as views of the
    /// head's bytes.
    pub fn shared_fields(&self) -> impl Iterator<Item = (&[u8], bytes::Bytes)> + '_ {
        self.fields
            .iter()
            .map(|&(n, (a, b))| (self.at(n), self.bytes.slice(a as usize..b as usize)))
    }

    /// How many fields the head has.
    pub fn field_count(&self) -> usize {
        self.fields.len()
    }

    /// Whether some field is named `name` (ASCII case-insensitive).
    pub fn has_field(&self, name: &str) -> bool {
        Head::field(self, name).is_some()
    }

    /// The same head with owned parts.
    pub fn to_head(&self) -> RequestHead {
        RequestHead {
            method: self.method().to_string(),
            target: self.target().to_string(),
            fields: self.fields().map(|(n, v)| Field::new(n, v)).collect(),
        }
    }
}

impl Head for PackedRequestHead {
    const OWNS_BYTES: bool = true;

    fn parse(head: &[u8], limits: &Limits) -> Result<Self> {
        Self::parse_owned(bytes::Bytes::copy_from_slice(head), limits)
    }

    fn parse_owned(bytes: bytes::Bytes, limits: &Limits) -> Result<Self> {
        let head = &bytes[..];
        let base = head.as_ptr() as usize;
        // Offsets of httparse's slices, which borrow from `head` (an empty
        // one may point anywhere); a head longer than 4 GiB is refused.
        let span = |part: &[u8]| -> Result<Span> {
            let a = (part.as_ptr() as usize)
                .checked_sub(base)
                .filter(|a| a + part.len() <= head.len());
            let Some(a) = a else {
                return if part.is_empty() {
                    Ok((0, 0))
                } else {
                    Err(Error::MalformedInner)
                };
            };
            let b = a + part.len();
            Ok((
                u32::try_from(a).map_err(|_| Error::InnerHeadTooLarge)?,
                u32::try_from(b).map_err(|_| Error::InnerHeadTooLarge)?,
            ))
        };
        let (method, target, fields) = parse_request(head, limits, |method, target, raw| {
            let mut fields = smallvec::SmallVec::with_capacity(raw.len());
            for h in raw {
                fields.push((span(h.name.as_bytes())?, span(h.value)?));
            }
            Ok((span(method.as_bytes())?, span(target.as_bytes())?, fields))
        })?;
        Ok(PackedRequestHead {
            method,
            target,
            fields,
            bytes,
        })
    }

    fn field(&self, name: &str) -> Option<&[u8]> {
        self.fields
            .iter()
            .find(|&&(n, _)| self.at(n).eq_ignore_ascii_case(name.as_bytes()))
            .map(|&(_, v)| self.at(v))
    }
}
