"""httpcrypt: opportunistic encryption for plain HTTP (HTTPCrypt v1), Python client."""

from typing import TYPE_CHECKING

from .client import ClientConfig, Engine, ExchangeInfo
from .errors import (
    ConfigError,
    EndpointError,
    HTTPCryptError,
    InnerProblem,
    IntegrityError,
    ProtocolError,
    RefusedError,
    ReplayError,
    ServerIntegrityError,
    StaleError,
    TokenRequiredError,
    TransportError,
)
from .exchange import PreparedRequest

if TYPE_CHECKING:
    from .httpx_transport import AsyncHTTPCryptTransport, HTTPCryptTransport
    from .requests_adapter import HTTPCryptAdapter

__all__ = [
    "AsyncHTTPCryptTransport", "HTTPCryptAdapter", "HTTPCryptTransport",
    "ClientConfig", "ConfigError", "EndpointError", "Engine", "ExchangeInfo", "HTTPCryptError",
    "InnerProblem", "IntegrityError", "PreparedRequest", "ProtocolError", "RefusedError",
    "ReplayError", "ServerIntegrityError", "StaleError", "TokenRequiredError", "TransportError",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # The drivers import httpx / requests: load them on first use only.
    if name in ("HTTPCryptTransport", "AsyncHTTPCryptTransport"):
        from . import httpx_transport

        return getattr(httpx_transport, name)
    if name == "HTTPCryptAdapter":
        from .requests_adapter import HTTPCryptAdapter

        return HTTPCryptAdapter
    raise AttributeError(f"module 'httpcrypt' has no attribute {name!r}")
