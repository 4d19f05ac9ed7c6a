"""TLS for Ray: a certificate authority per cluster, a certificate and key per node.

Ray (2.x) encrypts its gRPC traffic (GCS, raylets, object managers, core workers, the
dashboard agent's gRPC, the Ray Client server) when ``RAY_USE_TLS=1``; every process,
server and client alike, then presents ``RAY_TLS_SERVER_CERT``/``RAY_TLS_SERVER_KEY``
and accepts only peers whose certificate ``RAY_TLS_CA_CERT`` signed (gRPC's
``require_client_auth``: mutual TLS). gRPC checks the address it dials against the
certificate's subject alternative names, so a node's certificate names every address
Ray may dial it at: the inventory's address, its host names, the address Ray binds
(``--node-ip-address``, the probe's ``node_ip``), and 127.0.0.1/localhost. The
dashboard's HTTP (the Jobs API, its bearer token) is not covered: Ray serves it in
clear whatever these variables say.

Keys are EC P-256: made in about a millisecond (RSA 2048 takes tens of milliseconds,
a thousand nodes' worth is a minute of rtk's CPU), small handshakes, and supported by
gRPC's BoringSSL on every platform Ray ships for. Everything cryptographic is the
``cryptography`` package's; this module only picks names, lifetimes and files.

On this machine a cluster's files live in its state directory (``StateStore``), under
``tls/``, keys 0600: the CA, a client certificate for the Ray clients rtk starts here,
and each node's certificate, reused while it is valid, signed by the current CA and
names the same addresses.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from toolkit.errors import StateError

CA_VALIDITY = datetime.timedelta(days=365)
LEAF_VALIDITY = datetime.timedelta(days=90)
# A node or client certificate this close to its end is made anew at the next rtk up.
RENEW_BEFORE = datetime.timedelta(days=14)
# Clocks of nodes a little behind this machine's still accept a certificate made now.
BACKDATE = datetime.timedelta(minutes=5)
LOOPBACK_NAMES = ("127.0.0.1", "localhost")
CLIENT_NAME = "client"


class TlsError(StateError):
    """A certificate or key rtk keeps cannot be read, or does not do what it must."""


@dataclass(frozen=True)
class Identity:
    """A certificate and its private key, as PEM."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def cert(self) -> x509.Certificate:
        """The certificate, parsed."""
        return x509.load_pem_x509_certificate(self.cert_pem)


@dataclass(frozen=True)
class CertInfo:
    """What a certificate says, for reports (``rtk preflight``)."""

    subject: str
    names: tuple[str, ...]
    not_after: datetime.datetime
    fingerprint_sha256: str


def utc_now() -> datetime.datetime:
    """This machine's clock, timezone-aware UTC."""
    return datetime.datetime.now(datetime.UTC)


def subject_names(addresses: Iterable[str | None]) -> tuple[str, ...]:
    """The SAN entries for ``addresses``: loopback added, duplicates and blanks dropped.

    IP addresses are normalised (``::0001`` is ``::1``); names are lower case.
    """
    seen: dict[str, None] = {}
    for raw in (*addresses, *LOOPBACK_NAMES):
        text = (raw or "").strip()
        if not text:
            continue
        try:
            text = str(ipaddress.ip_address(text.strip("[]")))
        except ValueError:
            text = text.lower()
        seen.setdefault(text, None)
    return tuple(seen)


def _general_name(text: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(text))
    except ValueError:
        return x509.DNSName(text)


def _names_of(cert: x509.Certificate) -> tuple[str, ...]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return ()
    ips = [str(ip) for ip in san.get_values_for_type(x509.IPAddress)]
    return (*ips, *san.get_values_for_type(x509.DNSName))


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def new_ca(cluster: str, now: datetime.datetime) -> Identity:
    """A self-signed CA for ``cluster``, valid ``CA_VALIDITY`` from ``now``."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"rtk cluster {cluster} CA")])
    public = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Identity(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def new_leaf(
    ca: Identity, common_name: str, names: Iterable[str], now: datetime.datetime
) -> Identity:
    """A key and a certificate ``ca`` signs, for TLS server and client alike.

    Ray's processes present the same certificate when they serve and when they dial,
    so it carries both extended key usages. It ends ``LEAF_VALIDITY`` from ``now``, or
    with the CA if that is sooner.

    Raises:
        TlsError: ``names`` is empty, or holds a name no certificate can carry.
    """
    sans = tuple(names)
    if not sans:
        raise TlsError(f"no address or name for the certificate of {common_name}")
    ca_cert = ca.cert
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TlsError("the cluster CA's key is not an EC key: rtk up --rotate-credentials")
    key = ec.generate_private_key(ec.SECP256R1())
    try:
        alternative = x509.SubjectAlternativeName([_general_name(n) for n in sans])
    except ValueError as e:
        raise TlsError(f"{common_name}: a certificate cannot name {sans}: {e}") from e
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(min(now + LEAF_VALIDITY, ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=True,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(alternative, critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return Identity(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def verify_leaf(ca_pem: bytes, leaf_pem: bytes, now: datetime.datetime) -> None:
    """Check that ``ca_pem`` signed ``leaf_pem`` and both are valid at ``now``.

    The chain is built and checked by ``cryptography``'s X.509 verifier (the web PKI
    profile, as a TLS client certificate: what a Ray server asks of its peers).

    Raises:
        TlsError: Either does not parse, the chain does not verify, or a certificate
            is not valid at ``now``; the message says which.
    """
    try:
        ca = x509.load_pem_x509_certificate(ca_pem)
        leaf = x509.load_pem_x509_certificate(leaf_pem)
    except ValueError as e:
        raise TlsError(f"not a PEM certificate: {e}") from e
    for what, cert in (("CA", ca), ("certificate", leaf)):
        if now < cert.not_valid_before_utc:
            raise TlsError(f"the {what} is not valid before {cert.not_valid_before_utc:%Y-%m-%d}")
        if now > cert.not_valid_after_utc:
            raise TlsError(f"the {what} expired on {cert.not_valid_after_utc:%Y-%m-%d}")
    verifier = PolicyBuilder().store(Store([ca])).time(now).build_client_verifier()
    try:
        verifier.verify(leaf, [])
    except (VerificationError, InvalidSignature) as e:
        raise TlsError(f"the certificate does not verify against the cluster's CA: {e}") from e


def cert_info(cert_pem: bytes) -> CertInfo:
    """The subject, names, end and fingerprint of a PEM certificate.

    Raises:
        TlsError: It does not parse.
    """
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError as e:
        raise TlsError(f"not a PEM certificate: {e}") from e
    return CertInfo(
        cert.subject.rfc4514_string(),
        _names_of(cert),
        cert.not_valid_after_utc,
        cert.fingerprint(hashes.SHA256()).hex(),
    )


def leaf_fits(ca: Identity, leaf: Identity, names: Iterable[str], now: datetime.datetime) -> bool:
    """True when ``leaf`` can be kept.

    That is: ``ca`` signed it, it names exactly ``names``, it is valid for
    ``RENEW_BEFORE`` more, and its key is its certificate's.
    """
    try:
        verify_leaf(ca.cert_pem, leaf.cert_pem, now + RENEW_BEFORE)
        cert = leaf.cert
        key = serialization.load_pem_private_key(leaf.key_pem, password=None)
    except (TlsError, ValueError):
        return False
    same_key = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ) == cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return same_key and set(_names_of(cert)) == set(names)


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (mode 0600 from the start), replacing it atomically."""
    temp = path.with_name(path.name + ".tmp")
    temp.unlink(missing_ok=True)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    temp.replace(path)


class ClusterTls:
    """A cluster's CA and certificates on this machine: ``directory``, mode 0700.

    Files: ``ca.crt``/``ca.key``, ``client.crt``/``client.key`` (the Ray clients rtk
    starts here), ``nodes/NAME.crt``/``.key``. Every file is 0600. Call ``ca()`` once
    before threads ask for nodes' certificates; each node's files are its own.
    """

    def __init__(self, cluster: str, directory: Path) -> None:
        self.cluster = cluster
        self.directory = directory

    @property
    def ca_cert_file(self) -> Path:
        """The CA's certificate (what every node and client trusts)."""
        return self.directory / "ca.crt"

    @property
    def client_cert_file(self) -> Path:
        """This machine's client certificate."""
        return self.directory / f"{CLIENT_NAME}.crt"

    @property
    def client_key_file(self) -> Path:
        """This machine's client key."""
        return self.directory / f"{CLIENT_NAME}.key"

    def _load(self, stem: Path) -> Identity | None:
        try:
            cert = stem.with_name(stem.name + ".crt").read_bytes()
            key = stem.with_name(stem.name + ".key").read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise TlsError(f"cannot read {stem}.crt/.key: {e}") from e
        return Identity(cert, key)

    def _save(self, stem: Path, identity: Identity) -> None:
        try:
            stem.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            _write_private(stem.with_name(stem.name + ".key"), identity.key_pem)
            _write_private(stem.with_name(stem.name + ".crt"), identity.cert_pem)
        except OSError as e:
            raise TlsError(f"cannot write {stem}.crt/.key: {e}") from e

    def ca(self, now: datetime.datetime | None = None) -> Identity:
        """The cluster's CA: the one kept here while valid, else a new one.

        A new CA makes every certificate it did not sign unfit, so nodes get new ones.

        Raises:
            TlsError: The state directory cannot be read or written.
        """
        now = now or utc_now()
        stem = self.directory / "ca"
        kept = self._load(stem)
        if kept is not None:
            try:
                cert = kept.cert
                if cert.not_valid_before_utc <= now < cert.not_valid_after_utc:
                    return kept
            except ValueError:
                pass
        made = new_ca(self.cluster, now)
        self._save(stem, made)
        return made

    def node(
        self, name: str, names: Iterable[str | None], now: datetime.datetime | None = None
    ) -> Identity:
        """Node ``name``'s certificate for ``names``: the one kept while it fits, else new.

        Raises:
            TlsError: The state directory cannot be read or written, or a name cannot
                be put in a certificate or a file name.
        """
        if "/" in name or name.startswith(".") or not name:
            raise TlsError(f"node name {name!r} cannot name a certificate file")
        return self._leaf(self.directory / "nodes" / name, name, names, now)

    def client(self, now: datetime.datetime | None = None) -> Identity:
        """The certificate the Ray clients rtk starts on this machine present."""
        return self._leaf(
            self.directory / CLIENT_NAME,
            f"rtk client of {self.cluster}",
            [socket.gethostname()],
            now,
        )

    def _leaf(
        self,
        stem: Path,
        common_name: str,
        names: Iterable[str | None],
        now: datetime.datetime | None,
    ) -> Identity:
        now = now or utc_now()
        wanted = subject_names(names)
        ca = self.ca(now)
        kept = self._load(stem)
        if kept is not None and leaf_fits(ca, kept, wanted, now):
            return kept
        made = new_leaf(ca, common_name, wanted, now)
        self._save(stem, made)
        return made
