"""NATS over TLS (settings nats_tls_ca / nats_tls_cert / nats_tls_key): with them, the embedded
nats-server requires TLS and a client certificate signed by the CA; a client without one, or with one of
another CA, is refused, and rollbook's services connect."""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

import nats
import nats.errors
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from services.infra.bus import Bus
from services.infra.nats_auth import AUDITOR, EXECUTOR, connect_options, tls_context
from services.infra.settings import Settings
from tests.security.bus_server import auth_nats

pytestmark = pytest.mark.servers


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_pki(directory: Path, name: str) -> tuple[Path, Path, Path]:
    """A CA and a certificate for 127.0.0.1, valid for servers and clients: (ca, cert, key) files."""
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name(f"{name}-ca"))
        .issuer_name(_name(f"{name}-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
        )
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    files = directory / "ca.crt", directory / "tls.crt", directory / "tls.key"
    files[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files[2].touch(mode=0o600)
    files[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return files


async def test_nats_over_tls_admits_only_certificates_of_its_ca(server_data_dir: Path) -> None:
    ca, cert, key = make_pki(server_data_dir / "pki", "rollbook-nats")
    _, other_cert, other_key = make_pki(server_data_dir / "other", "intruder")
    tls = {"nats_tls_ca": str(ca), "nats_tls_cert": str(cert), "nats_tls_key": str(key)}
    async with auth_nats(server_data_dir / "data", **tls) as settings:
        auditor = await Bus.connect(settings, name="rollbook-auditor", identity=AUDITOR)
        executor = await Bus.connect(settings, name="rollbook-executor", identity=EXECUTOR)
        try:
            await auditor.ensure_stream()
            await executor.ensure_stream()
            assert executor.nc.is_connected  # over TLS: the server admits nothing else (below)
        finally:
            await executor.close()
            await auditor.close()

        password = connect_options(settings, EXECUTOR)
        # The right password, but no TLS: refused.
        no_tls = {k: v for k, v in password.items() if k != "tls"}
        with pytest.raises((nats.errors.Error, OSError)):
            client = await nats.connect(settings.nats_url, allow_reconnect=False, connect_timeout=3, **no_tls)
            await client.close()
        # TLS, the right password, a client certificate of another CA: refused.
        stranger = tls_context(
            Settings(nats_tls_ca=str(ca), nats_tls_cert=str(other_cert), nats_tls_key=str(other_key))
        )
        with pytest.raises((nats.errors.Error, OSError)):
            client = await nats.connect(
                settings.nats_url, allow_reconnect=False, connect_timeout=3, **{**no_tls, "tls": stranger}
            )
            await client.close()
