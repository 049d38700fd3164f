//! Seeds of split serving: split streams and content batches.

use httpcrypt_fuzz::{self as fx, SeedWriter};

use super::Seeds;

pub(super) fn split_seeds(s: &mut Seeds) {
    use httpcrypt_proto::split;
    use httpcrypt_proto::stream::{ResponseKey, Sealer};
    let body: Vec<u8> = (0..100u8).collect();
    let mut out = Vec::new();
    let sealer = Sealer::response(
        ResponseKey::new(fx::session_key(), fx::REQUEST_N0),
        [7; 24],
        &mut out,
    );
    split::seal_split(sealer, b"HTTP/1.1 200 OK\r\n\r\n", &body, 32, &mut out).expect("seals");
    for (name, mode, plan) in [
        ("whole", 0u8, 0u32),
        ("bytewise", 2, 1),
        ("random", 0, 0x0102_0307),
    ] {
        let seed = SeedWriter::new().u8(mode).u16(16384).u32(plan).bytes(&out);
        s.put("split_stream", name, &seed.finish());
    }
    let seed = SeedWriter::new().u8(4).u16(31).u32(0).bytes(&body);
    s.put("split_stream", "seal", &seed.finish());
    let mut batch = Vec::new();
    split::encode_batch_entry(Some(b"abc"), &mut batch);
    split::encode_batch_entry(None, &mut batch);
    let seed = SeedWriter::new().u8(1).u16(1).u32(1).bytes(&batch);
    s.put("split_stream", "batch", &seed.finish());
}
