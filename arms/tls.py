"""One verified TLS context for the process's short-lived HTTP clients.

httpx builds a new SSL context for every client, loading the certificate bundle each
time: about 20 ms of CPU, where the client itself costs a twentieth of a millisecond. A
campaign makes such clients per server start, per probe run (its telemetry) and per
identity check, so they share this one, verified as httpx verifies by default (certifi's
bundle, or `SSL_CERT_FILE` / `SSL_CERT_DIR`). A context may serve many connections and
threads at once.
"""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def verified() -> ssl.SSLContext:
    """The process's TLS context for `httpx.Client(verify=...)`."""
    return httpx.create_ssl_context()
