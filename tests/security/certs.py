"""A throwaway certificate authority for the TLS tests: a CA, a server certificate for
127.0.0.1 and localhost, and client certificates, as PEM files (the `cryptography` library,
through the builder that makes a cluster run's own credentials: agents/run_tls.py)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from fwbench.collector.agents.run_tls import (
    certificate_builder,
    certificate_pem,
    common_name,
    key_pem,
    self_signed_authority,
)

DAYS = 1


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Authority:
    """A CA's certificate file, and the key that signs what it issues."""

    cert: Path
    name: x509.Name
    key: ec.EllipticCurvePrivateKey

    def issue(self, folder: Path, stem: str, *, server: bool) -> Pair:
        """A certificate for a server (SAN 127.0.0.1 and localhost) or a client."""
        key = ec.generate_private_key(ec.SECP256R1())
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = certificate_builder(common_name(stem), self.name, key, DAYS).add_extension(
            x509.ExtendedKeyUsage([usage]), critical=False
        )
        if server:
            names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return _write(folder, stem, builder.sign(self.key, hashes.SHA256()), key)


def _write(
    folder: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> Pair:
    pair = Pair(folder / f"{stem}.pem", folder / f"{stem}.key")
    pair.cert.write_bytes(certificate_pem(cert))
    pair.key.write_bytes(key_pem(key))
    return pair


def authority(folder: Path, stem: str = "ca") -> Authority:
    """A new self-signed CA whose certificate is written to folder/STEM.pem."""
    cert, key = self_signed_authority(common_name(f"fwbench test {stem}"), DAYS)
    return Authority(_write(folder, stem, cert, key).cert, cert.subject, key)
