//! The axum example, exercised: encrypted requests under the mount reach the
//! router with the `Encrypted` extension; plaintext outside passes through.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../examples/axum.rs"]
mod example;

use bytes::Bytes;
use http_body_util::BodyExt;
use httpcrypt::proto::outer::Mount;
use httpcrypt::{Client, ClientConfig};

#[tokio::test]
async fn axum_app_behind_the_layer() {
    let dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let identity = example::serve(listener, dir.path()).await.unwrap();
    let client = Client::new(ClientConfig {
        mount: Mount::new("/hc").unwrap(),
        identity: Some(httpcrypt::proto::IdentityPublic::from_b64(&identity).unwrap()),
        ..Default::default()
    });
    let rsp = client
        .send(
            http::Request::get(format!("http://{addr}/hello"))
                .body(Bytes::new())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(rsp.status(), 200);
    let body = rsp.into_body().collect().await.unwrap().to_bytes();
    assert!(
        String::from_utf8_lossy(&body).starts_with("hello over HTTPCrypt"),
        "{body:?}"
    );

    let payload = Bytes::from(vec![7u8; 100_000]);
    let rsp = client
        .send(
            http::Request::post(format!("http://{addr}/echo"))
                .body(payload.clone())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(rsp.status(), 200);
    assert_eq!(rsp.into_body().collect().await.unwrap().to_bytes(), payload);

    // The second request came back with a ticket: resumed.
    let rsp = client
        .send(
            http::Request::get(format!("http://{addr}/hello"))
                .body(Bytes::new())
                .unwrap(),
        )
        .await
        .unwrap();
    let body = rsp.into_body().collect().await.unwrap().to_bytes();
    assert!(
        String::from_utf8_lossy(&body).contains("resumed: true"),
        "{body:?}"
    );

    // The client's future can run on its own task (it is Send + 'static).
    let c2 = client.clone();
    let spawned = tokio::spawn(async move {
        c2.send(
            http::Request::get(format!("http://{addr}/hello"))
                .body(Bytes::new())
                .unwrap(),
        )
        .await
    });
    assert_eq!(spawned.await.unwrap().unwrap().status(), 200);

    // An unknown inner route is the router's 404, sealed.
    let rsp = client
        .send(
            http::Request::get(format!("http://{addr}/nope"))
                .body(Bytes::new())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(rsp.status(), 404);

    // Plaintext outside the mount passes through untouched.
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = http::Request::get("/health")
        .header("host", addr.to_string())
        .body(http_body_util::Empty::<Bytes>::new())
        .unwrap();
    let rsp = send.send_request(req).await.unwrap();
    assert_eq!(rsp.status(), 200);
    assert_eq!(rsp.into_body().collect().await.unwrap().to_bytes(), "ok\n");
}
