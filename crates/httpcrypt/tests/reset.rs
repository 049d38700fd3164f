//! A keep-alive connection the server dropped while it sat in the client's
//! pool: the next request written on it meets a reset. The client resends
//! an idempotent request once on a new connection, and never a POST.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use httpcrypt::{Client, ClientConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

mod common;

async fn server() -> (SocketAddr, httpcrypt::proto::IdentityPublic) {
    let srv = common::serve_one_key(9, 3600).await;
    (srv.addr, srv.identity.public())
}

/// A relay in front of `upstream`. On the first client connection it
/// passes one request and its answer, then resets the connection (linger
/// zero) when the next request arrives, without forwarding it. Later
/// connections are relayed untouched. Counts the requests it forwarded.
async fn resetting_relay(upstream: SocketAddr) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let forwarded = Arc::new(AtomicUsize::new(0));
    let count = forwarded.clone();
    tokio::spawn(async move {
        let mut first = true;
        loop {
            let (client, _) = listener.accept().await.unwrap();
            let count = count.clone();
            let reset_second = std::mem::take(&mut first);
            tokio::spawn(relay(client, upstream, reset_second, count));
        }
    });
    (addr, forwarded)
}

async fn relay(
    client: TcpStream,
    upstream: SocketAddr,
    reset_second: bool,
    count: Arc<AtomicUsize>,
) {
    let server = TcpStream::connect(upstream).await.unwrap();
    if reset_second {
        // Closing this socket sends a reset.
        client.set_zero_linger().unwrap();
    }
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    // Set when the server has answered since the client last wrote: the
    // client's next bytes start a new request.
    let answered = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let flag = answered.clone();
    let back = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match sr.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if cw.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                    flag.store(true, Ordering::SeqCst);
                }
            }
        }
        cw
    });
    let mut buf = vec![0u8; 64 * 1024];
    let mut requests = 0;
    loop {
        let n = match cr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if answered.swap(false, Ordering::SeqCst) {
            requests += 1;
            if reset_second && requests == 2 {
                back.abort();
                let _ = back.await;
                return;
            }
            count.fetch_add(1, Ordering::SeqCst);
        }
        if sw.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = sw.shutdown().await;
}

fn client_for(identity: httpcrypt::proto::IdentityPublic) -> Client {
    Client::new(ClientConfig {
        identity: Some(identity),
        ..Default::default()
    })
}

#[tokio::test]
async fn idempotent_request_is_resent_after_a_reset_on_a_pooled_connection() {
    let (upstream, identity) = server().await;
    let (addr, forwarded) = resetting_relay(upstream).await;
    let client = client_for(identity);
    // Discovery (OPTIONS) is the first request of the first connection;
    // the GET that follows on it meets the reset.
    let rsp = client
        .send(
            http::Request::get(format!("http://{addr}/Cargo.toml"))
                .body(Bytes::new())
                .unwrap(),
        )
        .await
        .expect("resent on a new connection");
    assert_eq!(rsp.status(), 200);
    let body = http_body_util::BodyExt::collect(rsp.into_body())
        .await
        .unwrap()
        .to_bytes();
    assert!(body.starts_with(b"[package]"));
    // OPTIONS on the first connection, the GET on the second.
    assert_eq!(forwarded.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn post_is_not_resent_after_a_reset() {
    let (upstream, identity) = server().await;
    let (addr, forwarded) = resetting_relay(upstream).await;
    let client = client_for(identity);
    let r = client
        .send(
            http::Request::post(format!("http://{addr}/Cargo.toml"))
                .body(Bytes::from_static(b"x"))
                .unwrap(),
        )
        .await;
    let e = r.expect_err("a POST met by a reset is an error, not a resend");
    assert!(e.to_string().starts_with("transport"), "{e}");
    assert_eq!(forwarded.load(Ordering::SeqCst), 1, "only the discovery");
}
