//! `alloc-count`: heap allocations per request on the server's three
//! admission paths (spec §14), counted by a global allocator that forwards
//! to the system allocator. Paths, each after the outer head has been
//! parsed into an `OuterRequest` view:
//!
//! - fresh key: the defence idle, one X25519 (`accept`), then the
//!   whole exchange (open the request, seal the response);
//! - rejected junk: the defence on, a fresh-key request without an echo:
//!   `accept` refuses before the X25519 and the challenge document is
//!   written into a reused buffer; also an unknown kid, and a spent budget;
//! - returning: a session-cache hit and a ticket.
//!
//! Prints one JSON object; `bench/flood/run` copies it into the report.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::RefCell;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use httpcrypt_proto::admission::{self, Admission, AdmissionConfig, Verdict};
use httpcrypt_proto::cache::SessionCache;
use httpcrypt_proto::cert::KeyCert;
use httpcrypt_proto::client::{ClientCredential, PreparedRequest};
use httpcrypt_proto::inner::{Field, RequestHead, ResponseHead};
use httpcrypt_proto::outer::{self, Form, Mount};
use httpcrypt_proto::server::{
    self, Accept, Agreement, CookieFields, OuterRequest, ParsedOuter, ServerKeys,
};
use httpcrypt_proto::ticket::{TicketContents, TicketKey};
use httpcrypt_proto::{IdentityKey, KexSecret, KeyId, Limits};
use rand_core::{OsRng, RngCore};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

#[allow(unsafe_code)]
// SAFETY: every call is forwarded unchanged to `System`, which upholds the
// `GlobalAlloc` contract; the counter has no effect on the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations per call of `f`, over `n` calls (after one warm-up call).
fn per_call(n: u64, mut f: impl FnMut()) -> f64 {
    f();
    let before = ALLOCS.load(Ordering::Relaxed);
    for _ in 0..n {
        f();
    }
    (ALLOCS.load(Ordering::Relaxed) - before) as f64 / n as f64
}

const NOW: u64 = 1_800_000_000;
const HOST: &str = "bench.test";

fn main() {
    let identity = IdentityKey::generate(&mut OsRng);
    let secret = KexSecret::generate(&mut OsRng);
    let cert = KeyCert::sign(
        &identity,
        1,
        (NOW - 60) as u32,
        (NOW + 7200) as u32,
        *secret.public(),
    );
    let server_public = cert.kex_public;
    let kid = cert.kid();
    let mut keys = ServerKeys::new();
    keys.add_key(secret, cert);
    let tk = TicketKey::new(KeyId([7; 10]), [9; 32]);
    keys.add_ticket_key(TicketKey::new(KeyId([7; 10]), [9; 32]), NOW + 7200);
    let mount = Mount::default();
    let limits = Limits::default();
    let addr: IpAddr = "192.0.2.10".parse().expect("an address");
    let n = 2000;

    // A valid fresh-key request, sealed by a real client.
    let client = KexSecret::generate(&mut OsRng);
    let mut n0 = [0u8; 24];
    OsRng.fill_bytes(&mut n0);
    let prepared =
        PreparedRequest::for_key(&server_public, ClientCredential::Key(&client), n0, "", "")
            .expect("prepared");
    let mut head = RequestHead::new("GET", "/index.html");
    head.fields.push(Field::new("Host", HOST));
    let stream = prepared.seal_message(&head, b"", 16_384).expect("sealed");
    let valid = ParsedOuter::parse(&prepared.encode_outer(Form::Post, &mount, HOST, &stream))
        .expect("parses");
    let valid_view = valid.as_request();

    // Junk: the same shape with a random client key.
    let mut junk_public = [0u8; 32];
    OsRng.fill_bytes(&mut junk_public);
    let junk_cookie = outer::format_cookie(&kid, &junk_public, "", "").expect("cookie");
    let junk_cookies = [junk_cookie.as_bytes()];
    let junk_view = OuterRequest {
        cookies: CookieFields::from_slice(&junk_cookies),
        ..valid_view.clone()
    };
    let unknown_cookie =
        outer::format_cookie(&KeyId([1; 10]), &junk_public, "", "").expect("cookie");
    let unknown_view = OuterRequest {
        cookies: CookieFields::from_slice(&[unknown_cookie.as_bytes()]),
        ..valid_view.clone()
    };

    // A ticket for the valid request's session key.
    let ticket = tk.seal(
        &TicketContents {
            key: prepared.session_key().clone(),
            kid,
            expiry: (NOW + 7200) as u32,
        },
        [3; 24],
    );
    let ticket_cookie = outer::format_cookie(&ticket.tid(), ticket.sealed(), "", "").expect("c");
    let ticket_view = OuterRequest {
        cookies: CookieFields::from_slice(&[ticket_cookie.as_bytes()]),
        ..valid_view.clone()
    };

    // Idle: every call here shares one clock reading, so a threshold any
    // lower would see thousands of requests in one second and switch on.
    let idle_config = AdmissionConfig {
        threshold: u32::MAX,
        ..Default::default()
    };
    let idle = RefCell::new(Admission::new(idle_config, [1; 32], [2; 16], NOW * 1000));
    let on_config = AdmissionConfig {
        threshold: 1,
        prefix_burst: 1,
        prefix_rate: 1,
        ..Default::default()
    };
    let on = RefCell::new(Admission::new(on_config, [1; 32], [2; 16], NOW * 1000));
    for _ in 0..10 {
        on.borrow_mut().judge(NOW * 1000, addr, &[0; 24], None);
    }
    assert!(on.borrow_mut().is_on(NOW * 1000));
    let mut doc = String::with_capacity(256);

    let gated = |view: &OuterRequest<'_>,
                 adm: &RefCell<Admission>,
                 echo: Option<&[u8]>,
                 doc: &mut String|
     -> Option<Accept> {
        let mut gate = Gate {
            admission: adm,
            addr,
            echo,
            refused: None,
        };
        let r = server::accept(&keys, &mount, view, &limits, NOW, &mut gate);
        if let Some(v) = gate.refused {
            admission::format_refusal(&v, doc);
        }
        r.ok()
    };

    let fresh_accept = per_call(n, || {
        let a = gated(&valid_view, &idle, None, &mut doc);
        assert!(matches!(a, Some(Accept::Request(_))));
    });
    let fresh_exchange = per_call(n, || {
        let Some(Accept::Request(a)) = gated(&valid_view, &idle, None, &mut doc) else {
            panic!("accepted");
        };
        let (h, _) = server::open_request(&a, &valid.body, &limits).expect("opens");
        assert_eq!(h.method, "GET");
        let mut out = Vec::new();
        server::seal_response(
            a.into_response_key(),
            [5; 24],
            &ResponseHead::new(200, "OK"),
            b"hello",
            NOW,
            16_384,
            &mut out,
        )
        .expect("sealed");
    });
    let junk_challenged = per_call(n, || {
        assert!(gated(&junk_view, &on, None, &mut doc).is_none());
        assert!(doc.contains("urn:httpcrypt:admission"));
    });
    // A well-formed echo for another address: verified (MAC, two SHA3), refused.
    let foreign = admission::issue_cookie(
        &[1; 32],
        (NOW / 30) as u32,
        0,
        "192.0.2.99".parse().expect("an address"),
    );
    let foreign_echo = admission::format_echo(&foreign, &[0; 8]);
    let junk_bad_echo = per_call(n, || {
        assert!(gated(&junk_view, &on, Some(foreign_echo.as_bytes()), &mut doc).is_none());
    });
    let own = admission::issue_cookie(&[1; 32], (NOW / 30) as u32, 0, addr);
    let own_echo = admission::format_echo(&own, &[0; 8]);
    // The burst of one key agreement goes to this first echo.
    assert!(gated(&junk_view, &on, Some(own_echo.as_bytes()), &mut doc).is_some());
    let busy = per_call(n, || {
        assert!(gated(&junk_view, &on, Some(own_echo.as_bytes()), &mut doc).is_none());
        assert!(doc.contains("urn:httpcrypt:busy"));
    });
    let unknown_kid = per_call(n, || {
        assert!(gated(&unknown_view, &on, None, &mut doc).is_none());
    });
    let mut cache = SessionCache::new(1024, [4; 16]);
    cache.insert(&kid, client.public(), prepared.session_key().clone());
    let cache = RefCell::new(cache);
    let cache_hit = per_call(n, || {
        let r = server::accept(
            &keys,
            &mount,
            &valid_view,
            &limits,
            NOW,
            &mut CacheOnly(&cache),
        );
        assert!(matches!(r, Ok(Accept::Request(_))));
    });
    let ticket_path = per_call(n, || {
        let a = gated(&ticket_view, &on, None, &mut doc);
        assert!(matches!(a, Some(Accept::Request(_))));
    });
    let out = serde_json::json!({
        "definition": "heap allocations per request after the outer head is parsed (httpcrypt-proto, counting global allocator, mean over 2000 calls)",
        "fresh_key_accept": fresh_accept,
        "fresh_key_exchange": fresh_exchange,
        "rejected_junk_challenge": junk_challenged,
        "rejected_junk_bad_echo": junk_bad_echo,
        "rejected_busy": busy,
        "rejected_unknown_kid": unknown_kid,
        "returning_cache_hit": cache_hit,
        "returning_ticket": ticket_path,
    });
    println!("{out}");
}

/// The defence in front of the X25519, as the layer runs it.
struct Gate<'a> {
    admission: &'a RefCell<Admission>,
    addr: IpAddr,
    echo: Option<&'a [u8]>,
    refused: Option<Verdict>,
}

impl Agreement for Gate<'_> {
    fn admit(&mut self, _: &OuterRequest<'_>, n0: &[u8; 24]) -> Result<(), httpcrypt_proto::Error> {
        match self
            .admission
            .borrow_mut()
            .judge(NOW * 1000, self.addr, n0, self.echo)
        {
            Verdict::Admit => Ok(()),
            v => {
                self.refused = Some(v);
                Err(httpcrypt_proto::Error::AdmissionRequired)
            }
        }
    }
}

/// Session keys from the cache alone.
struct CacheOnly<'a>(&'a RefCell<SessionCache>);

impl Agreement for CacheOnly<'_> {
    fn cached(
        &mut self,
        sk: &server::ServerKey,
        peer: &httpcrypt_proto::KexPublic,
    ) -> Option<httpcrypt_proto::SessionKey> {
        self.0.borrow_mut().get(&sk.kid, peer)
    }

    fn agree(
        &mut self,
        _: &server::ServerKey,
        _: &httpcrypt_proto::KexPublic,
    ) -> httpcrypt_proto::Result<httpcrypt_proto::SessionKey> {
        Err(httpcrypt_proto::Error::UnknownKey)
    }
}
