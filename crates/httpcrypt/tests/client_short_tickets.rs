//! The client's short tickets (spec/httpcrypt.md §7.3): it asks on its
//! first request, presents the ticket on the next ones, and asks for a new
//! one on the ticket's last use under its policy.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use httpcrypt::client::OuterExchange;
use httpcrypt::proto::client::ShortPolicy;
use httpcrypt::{Client, ClientConfig};

mod common;

/// The cookie value each request carried, without its pad: 22 characters
/// for a short ticket, 43 for a public key.
async fn cookie_values(client: &Client, addr: std::net::SocketAddr, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    for _ in 0..n {
        let rsp = client
            .send(
                http::Request::get(format!("http://{addr}/Cargo.toml"))
                    .body(Bytes::new())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(rsp.status(), 200);
        let x = rsp.extensions().get::<OuterExchange>().unwrap().clone();
        let cookie = x.request_headers.get(http::header::COOKIE).unwrap();
        let value = cookie.to_str().unwrap().split('=').nth(1).unwrap();
        // Pads are at most 7 characters in profile 2, 16 in v1.
        let len = if value.len() <= 22 + 16 { 22 } else { 43 };
        out.push(value[..len].to_string());
    }
    out
}

#[tokio::test]
async fn the_client_reuses_a_short_ticket_up_to_its_policy_then_asks_again() {
    let srv = common::serve_one_key(11, 3600).await;
    let client = Client::new(ClientConfig {
        identity: Some(srv.identity.public()),
        short_tickets: Some(ShortPolicy {
            reuse: 3,
            max_age: 600,
        }),
        ..Default::default()
    });
    let v = cookie_values(&client, srv.addr, 8).await;
    assert_eq!(v[0].len(), 43, "the first request has no ticket");
    // Uses 1–3 of the first ticket (the third asks), then the second ...
    assert!(v[1..4].iter().all(|x| x.len() == 22 && *x == v[1]), "{v:?}");
    assert!(v[4..7].iter().all(|x| *x == v[4]), "{v:?}");
    assert_ne!(v[4], v[1]);
    // ... and a third.
    assert_eq!(v[7].len(), 22);
    assert_ne!(v[7], v[4]);
}

#[tokio::test]
async fn a_client_with_reuse_one_presents_every_short_ticket_once() {
    let srv = common::serve_one_key(12, 3600).await;
    let client = Client::new(ClientConfig {
        identity: Some(srv.identity.public()),
        short_tickets: Some(ShortPolicy {
            reuse: 1,
            max_age: 600,
        }),
        ..Default::default()
    });
    let v = cookie_values(&client, srv.addr, 4).await;
    assert!(v[1..].iter().all(|x| x.len() == 22), "{v:?}");
    assert!(v[1] != v[2] && v[2] != v[3] && v[1] != v[3], "{v:?}");
}

#[tokio::test]
async fn a_client_without_short_tickets_takes_v1_ones() {
    let srv = common::serve_one_key(13, 3600).await;
    let client = Client::new(ClientConfig {
        identity: Some(srv.identity.public()),
        short_tickets: None,
        ..Default::default()
    });
    let rsp = client
        .send(
            http::Request::get(format!("http://{}/Cargo.toml", srv.addr))
                .body(Bytes::new())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(rsp.status(), 200);
    let rsp = client
        .send(
            http::Request::get(format!("http://{}/Cargo.toml", srv.addr))
                .body(Bytes::new())
                .unwrap(),
        )
        .await
        .unwrap();
    let x = rsp.extensions().get::<OuterExchange>().unwrap();
    let cookie = x.request_headers.get(http::header::COOKIE).unwrap();
    let value = cookie.to_str().unwrap().split('=').nth(1).unwrap();
    assert!(value.len() >= 115, "a v1 ticket: {value}");
}

/// A short ticket whose ticket key the server no longer holds gets
/// `no_cookie` (its 22 characters are not the contract's HTTPCrypt shape,
/// spec §7.3, §11.3): the client drops it and the call goes on with a key.
#[tokio::test]
async fn a_short_ticket_under_a_dropped_ticket_key_is_replaced_by_a_key() {
    let srv = common::serve_one_key(14, 3).await;
    let client = Client::new(ClientConfig {
        identity: Some(srv.identity.public()),
        ..Default::default()
    });
    let v = cookie_values(&client, srv.addr, 2).await;
    assert_eq!((v[0].len(), v[1].len()), (43, 22), "{v:?}");
    // The next epoch, then the first one expires and is dropped, ticket
    // key and all.
    srv.live.add(common::epoch(
        &srv.identity,
        2,
        200,
        3600,
        httpcrypt::proto::KeyId([2; 10]),
    ));
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    srv.live.remove_expired(httpcrypt::clock::unix_now());
    let rsp = client
        .send(
            http::Request::get(format!("http://{}/Cargo.toml", srv.addr))
                .body(Bytes::new())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(rsp.status(), 200);
    let x = rsp.extensions().get::<OuterExchange>().unwrap();
    let cookie = x.request_headers.get(http::header::COOKIE).unwrap();
    let value = cookie.to_str().unwrap().split('=').nth(1).unwrap();
    assert!(value.len() >= 43, "the last attempt sent a key: {value}");
    assert_eq!(x.attempts, 2, "the short ticket, then a key");
}

/// A server that demands a token for unsafe methods (spec §8.4) answers the
/// first POST with 425, a `Random` and a short ticket; the token is bound
/// to the short ticket's key, so the client's one retry, which presents
/// that ticket, carries a valid token (the static files then answer 405,
/// past the token check). Later POSTs present the ticket and the token at
/// once. The same holds with v1 tickets.
#[tokio::test]
async fn a_token_demand_is_met_by_one_retry_under_a_short_ticket() {
    for short in [true, false] {
        let srv = common::serve_one_key_with(
            14,
            3600,
            httpcrypt::ServerConfig {
                require_token: true,
                ..Default::default()
            },
        )
        .await;
        let client = Client::new(ClientConfig {
            identity: Some(srv.identity.public()),
            short_tickets: short.then(ShortPolicy::default),
            ..Default::default()
        });
        for i in 0..3 {
            let rsp = client
                .send(
                    http::Request::post(format!("http://{}/Cargo.toml", srv.addr))
                        .body(Bytes::from_static(b"x"))
                        .unwrap(),
                )
                .await
                .unwrap_or_else(|e| panic!("short {short}, POST {i}: {e}"));
            assert_eq!(rsp.status(), 405, "short {short}, POST {i}");
            let x = rsp.extensions().get::<OuterExchange>().unwrap();
            let cookie = x.request_headers.get(http::header::COOKIE).unwrap();
            let value = cookie.to_str().unwrap().split('=').nth(1).unwrap();
            let expected = if short { 22..=38 } else { 115..=131 };
            assert!(
                expected.contains(&value.len()),
                "short {short}, POST {i}: {cookie:?}"
            );
        }
    }
}

#[tokio::test]
async fn a_one_shot_client_declines_tickets_and_so_holds_none() {
    let srv = common::serve_one_key(12, 3600).await;
    // Short tickets (the default) and v1 tickets alike: every request
    // declines, so none comes back and each presents the key again.
    for short_tickets in [Some(ShortPolicy::default()), None] {
        let client = Client::new(ClientConfig {
            identity: Some(srv.identity.public()),
            key_policy: httpcrypt::KeyPolicy::ReusePerHost,
            short_tickets,
            one_shot: true,
            ..Default::default()
        });
        let v = cookie_values(&client, srv.addr, 3).await;
        assert!(v.iter().all(|x| x.len() == 43 && *x == v[0]), "{v:?}");
    }
    // The same client without one_shot takes a ticket after its first
    // request (the test's counterpart).
    let client = Client::new(ClientConfig {
        identity: Some(srv.identity.public()),
        key_policy: httpcrypt::KeyPolicy::ReusePerHost,
        ..Default::default()
    });
    let v = cookie_values(&client, srv.addr, 2).await;
    assert_eq!(v[1].len(), 22, "{v:?}");
}
