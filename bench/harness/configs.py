"""The configurations under test, shared by the harness modules."""

# name -> (server, address key, loadgen arguments)
CONFIGS = {
    "nginx-plain": ("nginx", "plain", ["--proto", "plain"]),
    "nginx-tls12": ("nginx", "tls12", ["--proto", "tls"]),
    "nginx-tls12-tickets": ("nginx", "tls12t", ["--proto", "tls", "--tls-resume"]),
    "nginx-tls13": ("nginx", "tls13", ["--proto", "tls"]),
    "rustls-tls13": ("rustls", "tls13", ["--proto", "tls"]),
    "rustls-tls13-pq": ("rustlspq", "tls13", ["--proto", "tls", "--tls-pq"]),
    "hc-plain": ("hc", "http", ["--proto", "plain"]),
    "hc-fresh": ("hc", "http", ["--proto", "hc", "--keys", "fresh"]),
    "hc-cached": ("hc", "http", ["--proto", "hc", "--keys", "reuse"]),
    "hc-ticket": ("hct", "http", ["--proto", "hc", "--keys", "ticket"]),
    "hc2-fresh": ("hc2", "http", ["--proto", "hc", "--keys", "fresh"]),
    "hc2-ticket": ("hc2t", "http", ["--proto", "hc", "--keys", "ticket"]),
    "hcpq-fresh": ("hcpq", "http", ["--proto", "hc", "--keys", "hybrid"]),
}

# The plain-HTTP configuration of the same server code, for overhead bytes.
PLAIN_OF = {
    "nginx-plain": "nginx-plain", "nginx-tls12": "nginx-plain", "nginx-tls12-tickets": "nginx-plain",
    "nginx-tls13": "nginx-plain", "rustls-tls13": "hc-plain", "hc-plain": "hc-plain",
    "hc-fresh": "hc-plain", "hc-cached": "hc-plain", "hc-ticket": "hc-plain",
    "hc2-fresh": "hc-plain", "hc2-ticket": "hc-plain",
    "rustls-tls13-pq": "hc-plain", "hcpq-fresh": "hc-plain",
}

DESCRIPTIONS = {
    "nginx-plain": "nginx, plain HTTP",
    "nginx-tls12": "nginx + OpenSSL, TLS 1.2 ECDHE-ECDSA-AES256-GCM-SHA384 P-256, no cache, no tickets (paper)",
    "nginx-tls12-tickets": "nginx + OpenSSL, TLS 1.2 as above with session tickets (client resumes)",
    "nginx-tls13": "nginx + OpenSSL, TLS 1.3 X25519, full handshakes",
    "rustls-tls13": "rustls TLS 1.3 X25519 server of the harness (tokio + hyper + same static files), full handshakes",
    "rustls-tls13-pq": "the same rustls server taking only the X25519MLKEM768 hybrid group (client offers it first, "
                       "then X25519 and P-256, as rustls' default does), full handshakes",
    "hc-plain": "`httpcrypt serve`, plaintext GET outside the mount (null baseline: same listener and files, no crypto)",
    "hc-fresh": "`httpcrypt serve`, fresh client key per request (one X25519 on the server), no tickets",
    "hc-cached": "`httpcrypt serve`, one client key reused (session-cache hit, no X25519), no tickets",
    "hc-ticket": "`httpcrypt serve` with tickets; the client asks for short tickets (spec §7.3) and presents the one it holds, asking again every 16th request (default client and server)",
    "hc2-fresh": "`httpcrypt serve --compact` (request profile 2, spec §4.5), fresh client key per request, no tickets",
    "hc2-ticket": "`httpcrypt serve --compact` with tickets, profile 2, short tickets as in hc-ticket",
    "hcpq-fresh": "`httpcrypt serve --compact --pq on`, suite 2 (X25519 + ML-KEM-768, spec/hybrid.md): fresh X25519 "
                  "key and fresh ML-KEM encapsulation per request, request profile 2, POST form (1,088-byte "
                  "ciphertext first in the body), no tickets",
}

SCALING_CONFIGS = ["nginx-plain", "nginx-tls12", "rustls-tls13", "hc-plain", "hc-fresh"]
