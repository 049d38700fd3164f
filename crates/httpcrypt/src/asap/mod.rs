//! ASAP mode (spec/asap.md): the first encrypted request travels in the TCP
//! SYN, and the round trip that proves the client's address is taken by
//! the DNS lookup the client makes anyway.
//!
//! - [`gate`]: the server's admission check for connections whose first
//!   data arrived with the SYN: a valid provenance certificate, or the
//!   completed handshake, before any HTTPCrypt work;
//! - [`issuer`]: the DNS side: `_hcpc.{host}` TXT answers carrying a
//!   certificate for the querying address;
//! - [`discovery`]: the client side: keys, certificate and address in one
//!   round trip, and the certificate for the first request.
//!
//! The socket options they use are [`crate::sockopt`]; a client connection
//! whose first write rides in the SYN is [`crate::connect::connect_tfo`].

pub mod discovery;
pub mod gate;
pub mod issuer;

pub use discovery::AsapDiscovery;
pub use gate::{Admission, EarlyBudget, Gate, GateStats};
pub use issuer::ProvenanceAuthority;
