//! The DNS side of ASAP (spec/asap.md §3): the embedded authoritative server
//! answers `TXT _hcpc.{host}` with a provenance certificate for the address
//! the query came from, and everything else as [`Authority`] does.
//!
//! The certificate names the querying address, so it is only useful when
//! the client asks the authoritative server itself (or a resolver on the
//! same address). A recursive resolver in between makes the certificate
//! name the resolver; the HTTP server then refuses it and the client pays
//! the ordinary handshake round trip, nothing more. The answer has TTL 0
//! so that resolvers do not hand one client's certificate to another.

use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Header, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::TXT;
use hickory_proto::rr::{LowerName, Name, RData, Record, RecordType};
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::ServerFuture;
use httpcrypt_proto::provenance::{self, ProvenanceKey, ServerId};
use tokio::net::{TcpListener, UdpSocket};

use crate::clock::unix_now;
use crate::dns::Authority;
use crate::error::Error;

/// An [`Authority`] that also issues provenance certificates.
#[derive(Debug, Clone)]
pub struct ProvenanceAuthority {
    inner: Authority,
    name: LowerName,
    key: Arc<ProvenanceKey>,
    server: ServerId,
    lifetime: u32,
}

impl ProvenanceAuthority {
    /// Issues at `_hcpc.{host}` certificates for `server` under `key`,
    /// valid `lifetime` seconds; all other names go to `inner`.
    pub fn new(
        inner: Authority,
        host: &Name,
        key: ProvenanceKey,
        server: ServerId,
        lifetime: u32,
    ) -> Result<Self, Error> {
        let name = Name::from_ascii(provenance::DNS_LABEL)
            .and_then(|l| l.append_domain(host))
            .map_err(|e| Error::Dns(format!("certificate name under {host}: {e}")))?;
        Ok(ProvenanceAuthority {
            inner,
            name: LowerName::from(name),
            key: Arc::new(key),
            server,
            lifetime,
        })
    }
}

#[async_trait::async_trait]
impl RequestHandler for ProvenanceAuthority {
    async fn handle_request<R: ResponseHandler>(
        &self,
        request: &Request,
        response: R,
    ) -> ResponseInfo {
        let ours = request.op_code() == OpCode::Query
            && request.request_info().is_ok_and(|info| {
                info.query.name() == &self.name && info.query.query_type() == RecordType::TXT
            });
        if !ours {
            return self.inner.handle_request(request, response).await;
        }
        let text = provenance::issue_text(
            &self.key,
            request.src().ip(),
            self.server,
            unix_now(),
            self.lifetime,
        );
        let record = Record::from_rdata(
            Name::from(self.name.clone()),
            0,
            RData::TXT(TXT::new(vec![text])),
        );
        let mut header = Header::response_from_request(request.header());
        header.set_message_type(MessageType::Response);
        header.set_response_code(ResponseCode::NoError);
        header.set_authoritative(true);
        header.set_recursion_available(false);
        // Size and rate limits as for every other answer of the zone.
        self.inner
            .respond(request, response, header, &[record], &[])
            .await
    }
}

/// Serves `authority` on `udp` and `tcp`.
pub fn serve(
    authority: ProvenanceAuthority,
    udp: UdpSocket,
    tcp: TcpListener,
) -> ServerFuture<ProvenanceAuthority> {
    let mut server = ServerFuture::new(authority);
    server.register_socket(udp);
    server.register_listener(tcp, Duration::from_secs(10));
    server
}
