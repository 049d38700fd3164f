//! Socket options for TCP Fast Open (RFC 7413) and the TCP state, through
//! nix's safe `setsockopt`/`getsockopt`. nix has `TCP_FASTOPEN_CONNECT`
//! built in; the listener's `TCP_FASTOPEN`, `TCP_FASTOPEN_NO_COOKIE` and
//! `TCP_INFO` are declared with nix's own `sockopt_impl!`, so the unsafe
//! FFI stays inside nix.

use std::os::fd::AsFd;

use nix::sys::socket::{getsockopt, setsockopt, sockopt::TcpFastOpenConnect};

mod opts {
    use nix::{getsockopt_impl, setsockopt_impl, sockopt_impl};
    sockopt_impl!(
        /// `TCP_FASTOPEN`: the listener's queue of connections accepted
        /// with SYN data whose handshake has not completed.
        TcpFastOpen,
        Both,
        libc::IPPROTO_TCP,
        libc::TCP_FASTOPEN,
        libc::c_int
    );
    sockopt_impl!(
        /// `TCP_FASTOPEN_NO_COOKIE`: accept (listener) or send (client)
        /// SYN data without a cookie.
        TcpFastOpenNoCookie,
        Both,
        libc::IPPROTO_TCP,
        libc::TCP_FASTOPEN_NO_COOKIE,
        libc::c_int
    );
    sockopt_impl!(
        /// `TCP_INFO`.
        TcpInfo,
        GetOnly,
        libc::IPPROTO_TCP,
        libc::TCP_INFO,
        libc::tcp_info
    );
}

/// `tcpi_state` of a socket whose handshake is complete.
pub const TCP_ESTABLISHED: u8 = 1;
/// `tcpi_state` of a socket accepted with SYN data before the client's
/// ACK arrived (a Fast Open child).
pub const TCP_SYN_RECV: u8 = 3;
/// `tcpi_options` bit: the SYN carried data that the peer acknowledged.
const TCPI_OPT_SYN_DATA: u8 = 32;

fn io(e: nix::Error) -> std::io::Error {
    std::io::Error::from(e)
}

/// Turns Fast Open on for a listening socket: up to `queue` connections
/// may wait with SYN data before their handshake completes; `no_cookie`
/// accepts SYN data without a Fast Open cookie (the server then checks
/// provenance itself, see `asap::gate`). The namespace's
/// `net.ipv4.tcp_fastopen` must have the server bit (2) set.
pub fn listen_fastopen(listener: &impl AsFd, queue: u32, no_cookie: bool) -> std::io::Result<()> {
    let q = libc::c_int::try_from(queue).unwrap_or(libc::c_int::MAX);
    setsockopt(listener, opts::TcpFastOpen, &q).map_err(io)?;
    if no_cookie {
        setsockopt(listener, opts::TcpFastOpenNoCookie, &1).map_err(io)?;
    }
    Ok(())
}

/// Makes a client socket send its first write in the SYN
/// (`TCP_FASTOPEN_CONNECT`), without waiting for a cookie if `no_cookie`.
pub fn connect_fastopen(socket: &impl AsFd, no_cookie: bool) -> std::io::Result<()> {
    setsockopt(socket, TcpFastOpenConnect, &true).map_err(io)?;
    if no_cookie {
        setsockopt(socket, opts::TcpFastOpenNoCookie, &1).map_err(io)?;
    }
    Ok(())
}

/// The socket's TCP state (`tcpi_state`).
pub fn tcp_state(socket: &impl AsFd) -> std::io::Result<u8> {
    Ok(getsockopt(socket, opts::TcpInfo).map_err(io)?.tcpi_state)
}

/// Whether data sent in this connection's SYN was acknowledged (client), or
/// this connection was accepted with data in its SYN (server: the kernel
/// sets `syn_data_acked` when it adds the SYN's data to a Fast Open child).
pub fn syn_data(socket: &impl AsFd) -> std::io::Result<bool> {
    Ok(getsockopt(socket, opts::TcpInfo).map_err(io)?.tcpi_options & TCPI_OPT_SYN_DATA != 0)
}
