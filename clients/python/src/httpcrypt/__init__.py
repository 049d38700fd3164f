"""httpcrypt: opportunistic encryption for plain HTTP (HTTPCrypt v1), Python client."""

from .client import ClientConfig, Engine, ExchangeInfo, PreparedRequest
from .errors import (
    ConfigError,
    HTTPCryptError,
    InnerProblem,
    IntegrityError,
    ProtocolError,
    RefusedError,
    ReplayError,
    ServerIntegrityError,
    StaleError,
    TokenRequiredError,
)

__all__ = [
    "ClientConfig", "ConfigError", "Engine", "ExchangeInfo", "HTTPCryptError", "InnerProblem",
    "IntegrityError", "PreparedRequest", "ProtocolError", "RefusedError", "ReplayError",
    "ServerIntegrityError", "StaleError", "TokenRequiredError",
]
__version__ = "0.1.0"
