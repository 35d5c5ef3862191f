"""TLS for the webhook: the API server only calls admission webhooks over HTTPS with a CA it trusts.

Either the operator gives a serving certificate, key and CA bundle (cert-manager, a Secret), or the
webhook makes a self-signed CA and a serving certificate for the addresses it serves at start; the CA
bundle then goes into the webhook configurations' ``caBundle``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import os
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

log = structlog.get_logger("webhook")

DEFAULT_HOSTS: tuple[str, ...] = ("127.0.0.1", "localhost")


@dataclass(frozen=True)
class ServingCertificate:
    cert_file: Path  # PEM serving certificate (leaf first)
    key_file: Path  # PEM private key
    ca_bundle: bytes  # PEM CA certificate(s) that sign cert_file: goes into caBundle

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_file, self.key_file)
        return context

    def client_context(self) -> ssl.SSLContext:
        """A client context trusting only our CA (tests and `rollbook` talking to the webhook)."""
        return ssl.create_default_context(cadata=self.ca_bundle.decode())

    def files_stamp(self) -> tuple[tuple[int, int, int], ...]:
        """What changes when either file is replaced or rewritten (a Secret volume swaps a symlink)."""
        stats = [os.stat(path) for path in (self.cert_file, self.key_file)]
        return tuple((st.st_ino, st.st_mtime_ns, st.st_size) for st in stats)


# Seconds between looks at the certificate and key files for a new pair (cert-manager's rotation).
RELOAD_SECONDS = 2.0


class ReloadingContext:
    """The server's TLS context, following the certificate files without a restart: every handshake
    switches (``sni_callback``, called for every ClientHello, with or without SNI) to the context of the
    newest pair that loaded whole. A pair that does not load (the key of the old certificate, a file
    half written) is logged and the one in use stays; each later change of the files is tried again.
    Admission and CRD conversion, served by the same server, take the new certificate together."""

    def __init__(self, certificate: ServingCertificate) -> None:
        self.certificate = certificate
        self.current = certificate.server_context()
        self.context = certificate.server_context()  # what the server listens with; it hands over
        self.context.sni_callback = self._handshake
        self._stamp = certificate.files_stamp()
        self.reloads = 0

    def _handshake(self, connection: ssl.SSLObject, _name: str | None, _context: ssl.SSLContext) -> None:
        connection.context = self.current

    def reload_if_changed(self) -> bool:
        """Load the files if they changed since last looked at; True when a new pair is now served."""
        try:
            stamp = self.certificate.files_stamp()
        except OSError as error:
            log.warning("webhook_certificate_unreadable", error=repr(error))
            return False
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            fresh = self.certificate.server_context()
        except (OSError, ssl.SSLError, ValueError) as error:
            log.warning("webhook_certificate_not_reloaded", error=repr(error), kept="the previous pair")
            return False
        self.current = fresh
        self.reloads += 1
        log.info("webhook_certificate_reloaded", cert_file=str(self.certificate.cert_file))
        return True

    async def follow(self, every: float = RELOAD_SECONDS) -> None:
        while True:
            await asyncio.sleep(every)
            self.reload_if_changed()


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _san(hosts: Sequence[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for host in hosts:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            entries.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(entries)


def generate_self_signed(
    directory: Path, hosts: Sequence[str] = DEFAULT_HOSTS, *, valid_days: int = 365
) -> ServingCertificate:
    """Write a new CA and a serving certificate for ``hosts`` into ``directory`` (key: owner only)."""
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    not_after = now + dt.timedelta(days=valid_days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("rollbook-webhook-ca"))
        .issuer_name(_name("rollbook-webhook-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(not_after)
        .add_extension(_san(hosts), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca_pem = ca_cert.public_bytes(serialization.Encoding.PEM)
    cert_file, key_file, ca_file = directory / "tls.crt", directory / "tls.key", directory / "ca.crt"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.touch(mode=0o600)
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    ca_file.write_bytes(ca_pem)
    return ServingCertificate(cert_file=cert_file, key_file=key_file, ca_bundle=ca_pem)


def load_certificate(cert_file: Path, key_file: Path, ca_file: Path | None) -> ServingCertificate:
    """An operator-provided certificate; without a CA file the certificate itself is the bundle."""
    ca_bundle = (ca_file or cert_file).read_bytes()
    return ServingCertificate(cert_file=cert_file, key_file=key_file, ca_bundle=ca_bundle)
