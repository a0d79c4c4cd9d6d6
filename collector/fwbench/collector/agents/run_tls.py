"""A run's own TLS for the agents it starts on a cluster (`--launcher slurm`, `--launcher
kubernetes`), where they listen on their nodes' or pods' addresses: a certificate authority
made for the run alone, and one server certificate it signs, which every agent of the run
serves. The collector trusts that CA and nothing else, and checks the name SERVER_NAME (an
agent's address is not known when its certificate is made: a node Slurm picks, a pod's IP), so
only an agent holding the run's key can answer it, and the run's token never crosses the
network in plaintext (docs/security.md). The CA's key is never written: nothing else can be
signed by it once the run's credentials are made.

The same builder serves the TLS tests' throwaway authorities (tests/security/certs.py)."""

from __future__ import annotations

import datetime
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from fwbench.collector.agents.security import ChannelSecurity

SERVER_NAME = "agent.fwbench.invalid"  # the name every run certificate carries (RFC 2606)
VALID_DAYS = 30  # a run resumed later makes new credentials (a launcher makes its own)


def common_name(text: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])


def certificate_builder(
    subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey, days: float
) -> x509.CertificateBuilder:
    """A certificate for `key`'s public half, valid from five minutes ago (clocks of a cluster
    differ a little) for `days`."""
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
    )


def certificate_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def self_signed_authority(
    name: x509.Name, days: float
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        certificate_builder(name, name, key, days)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert, key


@dataclass(frozen=True)
class RunCredentials:
    """A run's token, its CA's certificate, and the server pair its agents serve (PEM)."""

    token: str
    ca: bytes
    cert: bytes
    key: bytes

    @classmethod
    def make(cls, run_id: str) -> RunCredentials:
        authority, signer = self_signed_authority(common_name(f"fwbench run {run_id}"), VALID_DAYS)
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            certificate_builder(common_name(SERVER_NAME), authority.subject, key, VALID_DAYS)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(SERVER_NAME)]), False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), True)
            .sign(signer, hashes.SHA256())
        )
        return cls(
            secrets.token_urlsafe(32),
            certificate_pem(authority),
            certificate_pem(cert),
            key_pem(key),
        )

    def channel(self) -> ChannelSecurity:
        """How the collector calls the run's agents: the token, over TLS, trusting the run's
        CA alone and checking SERVER_NAME."""
        return ChannelSecurity(token=self.token, ca=self.ca, server_name=SERVER_NAME)

    def write(self, folder: Path) -> RunFiles:
        """The token and the server pair as files only this user can read (the folder is
        one of this user's, on the filesystem the nodes share)."""
        files = RunFiles(folder / "token", folder / "agent.pem", folder / "agent.key")
        for path, data in (
            (files.token, f"{self.token}\n".encode()),
            (files.cert, self.cert),
            (files.key, self.key),
        ):
            path.touch(mode=0o600)
            path.write_bytes(data)
        return files


@dataclass(frozen=True)
class RunFiles:
    """Where an agent of the run reads its token and its TLS pair."""

    token: Path
    cert: Path
    key: Path
