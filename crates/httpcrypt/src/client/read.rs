//! Reading a whole small body (a certificate list, a problem document)
//! under a limit.

use bytes::Bytes;
use http_body::Body;
use http_body_util::BodyExt;

use crate::error::{from_box, BoxError, Error};

/// Reads a whole body of at most `limit` bytes. (A hand-written loop: the
/// `Limited` + `collect` combinators make the caller's future unusable
/// with `tokio::spawn` through a higher-ranked `From` bound.)
pub(crate) async fn read_limited<B>(mut body: B, limit: usize) -> Result<Bytes, Error>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| from_box(e.into()))?;
        if let Ok(data) = frame.into_data() {
            if out.len() + data.len() > limit {
                return Err(httpcrypt_proto::Error::BodyTooLarge.into());
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(Bytes::from(out))
}
