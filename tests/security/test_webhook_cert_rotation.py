"""cert-manager rotates the webhook's serving certificate by rewriting the files of its Secret volume. The
API server then trusts only the new CA: a webhook still serving the old pair would fail every admission
and CRD conversion until restarted. The new pair must be served within seconds, by the running server;
a half-rotated pair (new certificate, old key) must not break what is served."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cryptography import x509

from services.webhook.cache import NamespaceLabels, SidecarSetCache
from services.webhook.recorder import InjectionRecorder, LogSink
from services.webhook.server import RunningServer, WebhookState, start_server
from services.webhook.tls import generate_self_signed

pytestmark = pytest.mark.asyncio


async def served_serial(server: RunningServer) -> int:
    """The serial number of the certificate a new TLS connection to the server is shown."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    _, writer = await asyncio.open_connection("127.0.0.1", server.port, ssl=context)
    try:
        ssl_object = writer.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True)
        return x509.load_der_x509_certificate(der).serial_number
    finally:
        writer.close()
        await writer.wait_closed()


async def until_served(server: RunningServer, serial: int, within: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < within:
        if await served_serial(server) == serial:
            return time.monotonic() - started
        await asyncio.sleep(0.05)
    raise AssertionError(f"serial {serial} not served within {within}s")


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[tuple[RunningServer, Path]]:
    certificate = generate_self_signed(tmp_path / "tls")
    recorder = InjectionRecorder(LogSink())
    recorder.start()
    state = WebhookState(sidecarsets=SidecarSetCache(), namespaces=NamespaceLabels(), recorder=recorder)
    server = await start_server(state, certificate, reload_seconds=0.2)
    try:
        yield server, tmp_path / "tls"
    finally:
        await server.stop()
        await recorder.stop(wait_seconds=0.1)


def serial_of(path: Path) -> int:
    return x509.load_pem_x509_certificate(path.read_bytes()).serial_number


async def test_a_rotated_certificate_is_served_within_seconds(running: tuple[RunningServer, Path]) -> None:
    server, directory = running
    first = serial_of(directory / "tls.crt")
    assert await served_serial(server) == first
    generate_self_signed(directory)  # the rotation: a new CA, certificate and key in the same files
    second = serial_of(directory / "tls.crt")
    assert second != first
    await until_served(server, second, within=10.0)


async def test_a_half_rotated_pair_keeps_the_old_one_served(
    running: tuple[RunningServer, Path], tmp_path: Path
) -> None:
    server, directory = running
    first = serial_of(directory / "tls.crt")
    other = generate_self_signed(tmp_path / "other")
    (directory / "tls.crt").write_bytes(other.cert_file.read_bytes())  # its key not yet written
    assert server.tls is not None
    assert not server.tls.reload_if_changed()  # refused: the key does not match
    assert await served_serial(server) == first
    (directory / "tls.key").write_bytes(other.key_file.read_bytes())
    await until_served(server, serial_of(other.cert_file), within=10.0)
