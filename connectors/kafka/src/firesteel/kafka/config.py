"""librdkafka client configuration: ``kafka.*`` options in, redacted text out.

Every ``kafka.<key>`` option is handed to librdkafka as ``<key>`` unchanged
(SASL, SSL, timeouts, compression...). Secrets among them (passwords, keys,
JAAS configs, tokens) must never reach a log, an exception or query progress,
so everything firesteel prints about a client goes through :func:`redact` or
:func:`safe_error`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from firesteel.core.options import is_secret

PREFIX = "kafka."

_EXTRA_SECRET_MARKERS = ("ssl.key", "ssl_key", "keystore", "credential", "oauthbearer.config")
REDACTED = "<redacted>"


def is_secret_key(key: str) -> bool:
    """Whether the value of librdkafka property ``key`` must never be shown."""
    lowered = key.lower()
    return is_secret(lowered) or any(marker in lowered for marker in _EXTRA_SECRET_MARKERS)


def client_config(passthrough: Mapping[str, str], **overrides: Any) -> dict[str, Any]:
    """librdkafka properties from the ``kafka.*`` options, then ``overrides``.

    ``overrides`` use librdkafka spelling with ``_`` for ``.``; they are the
    settings a role depends on for correctness (isolation level, idempotence),
    so they win over what the user passed.
    """
    config: dict[str, Any] = {
        key[len(PREFIX) :]: value
        for key, value in passthrough.items()
        if key.lower().startswith(PREFIX)
    }
    for key, value in overrides.items():
        config[key.replace("_", ".")] = value
    return config


def secrets_of(config: Mapping[str, Any]) -> list[str]:
    """The secret values in a client configuration (to scrub them from error texts)."""
    return [str(v) for k, v in config.items() if is_secret_key(k) and str(v)]


def redact(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``config`` safe to log: secret values replaced by ``<redacted>``."""
    return {k: (REDACTED if is_secret_key(k) else v) for k, v in config.items()}


def scrub(text: str, secrets: list[str]) -> str:
    """``text`` with every secret value replaced by ``<redacted>``."""
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= 3:
            text = text.replace(secret, REDACTED)
    return text


def safe_error(exc: BaseException, config: Mapping[str, Any]) -> str:
    """The message of a client error with the configuration's secrets scrubbed out."""
    return scrub(str(exc), secrets_of(config))
