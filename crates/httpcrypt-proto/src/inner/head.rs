//! The inner message's heads and their encoding: [`Field`], [`RequestHead`],
//! [`ResponseHead`] and the [`ResponseHeadWriter`] for callers that hold the
//! fields in a store of their own.

/// One header field. Names keep their case; comparisons ignore it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// Field name.
    pub name: String,
    /// Field value (bytes: HTTP allows obs-text).
    pub value: Vec<u8>,
}

impl Field {
    /// A field from a name and value.
    pub fn new(name: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        Field {
            name: name.into(),
            value: value.into(),
        }
    }

    /// Whether this field is named `name` (ASCII case-insensitive).
    pub fn is(&self, name: &str) -> bool {
        self.name.eq_ignore_ascii_case(name)
    }
}

/// The value of the first field named `name`.
pub fn field<'a>(fields: &'a [Field], name: &str) -> Option<&'a [u8]> {
    fields
        .iter()
        .find(|f| f.is(name))
        .map(|f| f.value.as_slice())
}

/// The head of an inner request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// Method token.
    pub method: String,
    /// Request target (origin form, or whatever the client sent).
    pub target: String,
    /// Header fields in order.
    pub fields: Vec<Field>,
}

/// The head of an inner response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    /// Status code (200–999; informational codes are refused).
    pub status: u16,
    /// Reason phrase.
    pub reason: String,
    /// Header fields in order.
    pub fields: Vec<Field>,
}

fn encode_fields(fields: &[Field], out: &mut Vec<u8>) {
    for f in fields {
        encode_field(&f.name, &f.value, out);
    }
    out.extend_from_slice(b"\r\n");
}

pub(crate) fn encode_field(name: &str, value: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

pub(crate) fn encode_status_line(status: u16, reason: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(itoa::Buffer::new().format(status).as_bytes());
    out.push(b' ');
    out.extend_from_slice(reason.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Encodes a response head field by field, for callers that hold the fields
/// in a store of their own (a server's header map) and would otherwise copy
/// them into a [`ResponseHead`] first. The bytes equal
/// [`ResponseHead::encode`] of the same status, reason and fields.
#[derive(Debug)]
pub struct ResponseHeadWriter {
    out: Vec<u8>,
}

impl ResponseHeadWriter {
    /// Starts with the status line.
    pub fn new(status: u16, reason: &str) -> Self {
        Self::with_capacity(status, reason, 256)
    }

    /// [`ResponseHeadWriter::new`] with room for `capacity` bytes, so that a
    /// caller can append the body after the head without a reallocation.
    pub fn with_capacity(status: u16, reason: &str, capacity: usize) -> Self {
        let mut out = Vec::with_capacity(capacity);
        encode_status_line(status, reason, &mut out);
        ResponseHeadWriter { out }
    }

    /// Appends the field `name: value`.
    pub fn field(&mut self, name: &str, value: &[u8]) {
        encode_field(name, value, &mut self.out);
    }

    /// Bytes the head will have when finished now (its empty line included).
    pub fn finished_len(&self) -> usize {
        self.out.len() + 2
    }

    /// The head, ended by its empty line.
    pub fn finish(mut self) -> Vec<u8> {
        self.out.extend_from_slice(b"\r\n");
        self.out
    }
}

impl RequestHead {
    /// A head with no fields.
    pub fn new(method: impl Into<String>, target: impl Into<String>) -> Self {
        RequestHead {
            method: method.into(),
            target: target.into(),
            fields: Vec::new(),
        }
    }

    /// Appends `METHOD SP target SP HTTP/1.1 CRLF fields CRLF` to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.method.as_bytes());
        out.push(b' ');
        out.extend_from_slice(self.target.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\n");
        encode_fields(&self.fields, out);
    }
}

impl ResponseHead {
    /// A head with no fields.
    pub fn new(status: u16, reason: impl Into<String>) -> Self {
        ResponseHead {
            status,
            reason: reason.into(),
            fields: Vec::new(),
        }
    }

    /// Appends `HTTP/1.1 SP status SP reason CRLF fields CRLF` to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        encode_status_line(self.status, &self.reason, out);
        encode_fields(&self.fields, out);
    }
}
