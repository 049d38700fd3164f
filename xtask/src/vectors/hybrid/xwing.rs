//! The X-Wing draft's own vectors (`xwing-kat-*`): seed expansion,
//! decapsulation and deterministic encapsulation.

use httpcrypt_proto::hybrid::{self, Encapsulation, CIPHERTEXT_LEN};
use httpcrypt_proto::{KexPublic, KexSecret};
use serde_json::{json, Value};

use crate::vectors::{hx, Case};

/// The X-Wing draft's test vectors (draft-connolly-cfrg-xwing-kem-06,
/// as shipped with RustCrypto's `x-wing` 0.1.1): data only.
const XWING_DRAFT: &str = include_str!("../../../data/xwing-draft-vectors.json");

pub(super) fn xwing_cases() -> Vec<Case> {
    let all: Vec<Value> = serde_json::from_str(XWING_DRAFT).expect("the draft's vectors parse");
    all.iter()
        .enumerate()
        .map(|(n, v)| {
            let h = |k: &str| hex::decode(v[k].as_str().expect("hex")).expect("hex");
            let seed: [u8; 32] = h("seed").try_into().expect("32-byte seed");
            let eseed = h("eseed");
            let (kem, kex) = hybrid::xwing_expand_seed(&seed);
            let pk = [&kem.public().as_bytes()[..], &kex.public().0].concat();
            assert_eq!(pk, h("pk"), "xwing-kat-{n}: key expansion");
            let ct = h("ct");
            let ct_x = KexPublic(ct[CIPHERTEXT_LEN..].try_into().expect("32 bytes"));
            let k = hybrid::decapsulate(&kex, &kem, &ct_x, &ct[..CIPHERTEXT_LEN]).unwrap();
            assert_eq!(k.as_bytes().to_vec(), h("ss"), "xwing-kat-{n}: decapsulation");
            let m: [u8; 32] = eseed[..32].try_into().expect("32 bytes");
            let eph = KexSecret::from_bytes(eseed[32..].try_into().expect("32 bytes"));
            let (ct_m, ss_m) = kem.public().encapsulate_with(&m);
            let e = Encapsulation::from_parts(kex.public(), &eph, ct_m, &ss_m).unwrap();
            assert_eq!(
                [&e.ct_m[..], &e.ct_x.0].concat(),
                ct,
                "xwing-kat-{n}: encapsulation"
            );
            Case::ok(
                "xwing",
                &format!("xwing-kat-{n}"),
                "X-Wing draft test vector: SHAKE-256 seed expansion, decapsulation, deterministic encapsulation",
                json!({"seed": hx(seed), "eseed": hx(&eseed)}),
                json!({"pk": hx(&pk), "ct": hx(&ct), "ss": hx(k.as_bytes())}),
            )
        })
        .collect()
}
