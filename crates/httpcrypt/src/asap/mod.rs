//! ASAP mode (spec/asap.md): the first encrypted request travels in the TCP
//! SYN, and the round trip that proves the client's address is taken by
//! the DNS lookup the client makes anyway.
//!
//! - [`sockopt`]: TCP Fast Open on listeners and client sockets, and the
//!   socket's TCP state, through nix's safe socket-option interface;
//! - [`gate`]: the server's admission check for connections whose first
//!   data arrived with the SYN: a valid provenance certificate, or the
//!   completed handshake, before any HTTPCrypt work;
//! - [`issuer`]: the DNS side: `_hcpc.{host}` TXT answers carrying a
//!   certificate for the querying address;
//! - [`discovery`]: the client side: keys, certificate and address in one
//!   round trip, and the certificate for the first request;
//! - [`connect_tfo`]: a client connection whose first write rides in the SYN.

pub mod discovery;
pub mod gate;
pub mod issuer;
pub mod sockopt;

use std::net::SocketAddr;

use tokio::net::{TcpSocket, TcpStream};

pub use discovery::AsapDiscovery;
pub use gate::{Admission, EarlyBudget, Gate, GateStats};
pub use issuer::ProvenanceAuthority;

/// TCP Fast Open use on the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Tfo {
    /// An ordinary three-way handshake.
    #[default]
    Off,
    /// `TCP_FASTOPEN_CONNECT`: data rides in the SYN once the kernel holds
    /// a cookie from an earlier connection to the server; the first
    /// connection fetches one.
    Cookie,
    /// As `Cookie`, plus `TCP_FASTOPEN_NO_COOKIE`: data rides in the SYN
    /// without a cookie, for servers that check provenance themselves.
    NoCookie,
}

/// Where the client finds the provenance certificate to present on the
/// first request to an authority (the outer `Httpcrypt-Provenance` field).
pub trait ProvenanceSource: Send + Sync + std::fmt::Debug {
    /// A certificate (text form) still valid at `now` for `authority`, if any.
    fn certificate(&self, authority: &str, now: u64) -> Option<String>;
}

/// Connects to `addr` with TCP Fast Open as `tfo` says. With a cookie
/// (or `NoCookie`), `connect` returns at once and the first write sends the
/// SYN with the data; without one the kernel falls back to an ordinary
/// handshake (asking for a cookie), so the caller never sees a difference
/// except in timing. If the SYN's data is dropped or ignored, the kernel
/// sends it again after the handshake.
pub async fn connect_tfo(addr: SocketAddr, tfo: Tfo) -> std::io::Result<TcpStream> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    if tfo != Tfo::Off {
        sockopt::connect_fastopen(&socket, tfo == Tfo::NoCookie)?;
    }
    let stream = socket.connect(addr).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}
