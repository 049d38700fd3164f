//! The client's use of a key discovery (spec §6.4, §6.4.1): an identity
//! validated with DNSSEC on one lookup binds every later one, also when a
//! later `_httpcrypt-id` query fails; the discovery's cached answer is
//! dropped when the server answers `unknown-key`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use httpcrypt::client::{BoxFuture, Discovered, Discovery, KeySource};
use httpcrypt::clock::unix_now;
use httpcrypt::proto::{DiscoveredKey, IdentityKey, IdentityPublic, KexSecret, KeyCert};
use httpcrypt::{Client, ClientConfig, Error};

mod common;

fn cert(identity: &IdentityKey, serial: u32, key_seed: u8) -> KeyCert {
    let now = unix_now();
    KeyCert::sign(
        identity,
        serial,
        (now - 10) as u32,
        (now + 3600) as u32,
        *KexSecret::from_bytes([key_seed; 32]).public(),
    )
}

/// A discovery as DNS would answer it: its certificates, checked as the
/// trait asks (under `pinned`, else under the identity it validated, else
/// not at all), as TXT records. `validated` is the identity its
/// `_httpcrypt-id` query yields; `None` models that query failing.
#[derive(Debug)]
struct Records {
    certs: Mutex<Vec<KeyCert>>,
    validated: Mutex<Option<IdentityPublic>>,
    /// The `pinned` argument of every lookup.
    pins: Mutex<Vec<Option<IdentityPublic>>>,
    forgotten: AtomicUsize,
}

impl Records {
    fn new(certs: Vec<KeyCert>, validated: Option<IdentityPublic>) -> Arc<Records> {
        Arc::new(Records {
            certs: Mutex::new(certs),
            validated: Mutex::new(validated),
            pins: Mutex::new(Vec::new()),
            forgotten: AtomicUsize::new(0),
        })
    }
}

impl Discovery for Records {
    fn discover<'a>(
        &'a self,
        _authority: &'a str,
        pinned: Option<&'a IdentityPublic>,
    ) -> BoxFuture<'a, Result<Discovered, Error>> {
        Box::pin(async move {
            self.pins.lock().unwrap().push(pinned.copied());
            let identity = pinned.copied().or(*self.validated.lock().unwrap());
            let certs = self.certs.lock().unwrap().clone();
            let good: Vec<DiscoveredKey> = certs
                .iter()
                .filter(|c| identity.is_none_or(|id| c.verify(&id).is_ok()))
                .map(DiscoveredKey::from)
                .collect();
            Ok(if good.is_empty() {
                Discovered {
                    identity,
                    detail: "dns-txt: bad_signature".into(),
                    ..Default::default()
                }
            } else {
                Discovered {
                    keys: good,
                    source: Some(KeySource::DnsTxt),
                    ttl: 60,
                    identity,
                    detail: String::new(),
                }
            })
        })
    }

    fn forget(&self, _authority: &str) {
        self.forgotten.fetch_add(1, Ordering::SeqCst);
    }
}

/// Spec §6.4: the first lookup validates identity A; the second
/// one's `_httpcrypt-id` query fails and the records hold keys signed by
/// someone else. The client passes A to the second lookup, which refuses
/// them (`bad_signature`), and keeps A's keys.
#[tokio::test]
async fn an_identity_learnt_once_binds_a_lookup_whose_identity_query_fails() {
    let a = IdentityKey::from_seed([31; 32]);
    let foreign = IdentityKey::from_seed([32; 32]);
    // Made once: two calls a second boundary apart would differ in their
    // validity times.
    let a_cert = cert(&a, 1, 41);
    let records = Records::new(vec![a_cert.clone()], Some(a.public()));
    let client = Client::new(ClientConfig {
        discovery: Some(records.clone()),
        options_fallback: false,
        ..Default::default()
    });
    let authority = "origin.test:8080";
    let (keys, source) = client.refresh_keys("http", authority).await.unwrap();
    assert_eq!(source, KeySource::DnsTxt);
    assert_eq!(keys, vec![DiscoveredKey::from(&a_cert)]);

    *records.validated.lock().unwrap() = None;
    *records.certs.lock().unwrap() = vec![cert(&foreign, 2, 42)];
    let err = client.refresh_keys("http", authority).await.unwrap_err();
    assert!(err.to_string().contains("bad_signature"), "{err}");
    assert_eq!(
        *records.pins.lock().unwrap(),
        vec![None, Some(a.public())],
        "the learnt identity is the second lookup's pin"
    );
    assert_eq!(
        client.cached_keys(authority),
        vec![DiscoveredKey::from(&a_cert)],
        "the foreign key was not taken"
    );
}

/// A discovery that reports another identity than the one in force is not
/// believed: its keys are refused.
#[tokio::test]
async fn keys_under_another_identity_than_the_one_in_force_are_refused() {
    #[derive(Debug)]
    struct Liar {
        cert: KeyCert,
        identity: IdentityPublic,
    }
    impl Discovery for Liar {
        fn discover<'a>(
            &'a self,
            _authority: &'a str,
            _pinned: Option<&'a IdentityPublic>,
        ) -> BoxFuture<'a, Result<Discovered, Error>> {
            Box::pin(async move {
                Ok(Discovered {
                    keys: vec![DiscoveredKey::from(&self.cert)],
                    source: Some(KeySource::DnsTxt),
                    ttl: 60,
                    identity: Some(self.identity),
                    detail: String::new(),
                })
            })
        }
    }
    let pinned = IdentityKey::from_seed([33; 32]);
    let other = IdentityKey::from_seed([34; 32]);
    let client = Client::new(ClientConfig {
        identity: Some(pinned.public()),
        discovery: Some(Arc::new(Liar {
            cert: cert(&other, 1, 43),
            identity: other.public(),
        })),
        options_fallback: false,
        ..Default::default()
    });
    assert!(client.refresh_keys("http", "origin.test").await.is_err());
    assert!(client.cached_keys("origin.test").is_empty());
}

/// Spec §6.4.1: the discovery's answer named a key the server no longer
/// holds; on `unknown-key` the client drops it (and the retry succeeds
/// with the certificates the server listed).
#[tokio::test]
async fn unknown_key_drops_the_discovery_cache() {
    let srv = common::serve_one_key(35, 3600).await;
    // Signed by the server's identity, for a key it does not hold.
    let stale = cert(&srv.identity, 0, 99);
    let records = Records::new(vec![stale], Some(srv.identity.public()));
    let client = Client::new(ClientConfig {
        discovery: Some(records.clone()),
        ..Default::default()
    });
    let rsp = client
        .send(
            http::Request::get(format!("http://{}/Cargo.toml", srv.addr))
                .body(Bytes::new())
                .unwrap(),
        )
        .await
        .expect("the retry after unknown-key succeeds");
    assert_eq!(rsp.status(), 200);
    assert_eq!(records.forgotten.load(Ordering::SeqCst), 1);
    assert_eq!(
        client.key_source(&srv.addr.to_string()),
        Some(KeySource::UnknownKey)
    );
}
