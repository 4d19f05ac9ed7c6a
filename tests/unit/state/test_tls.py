"""The cluster's CA and node certificates: names, chain, lifetimes, reuse and file modes."""

from __future__ import annotations

import datetime
import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from toolkit.state.cluster_state import ClusterState
from toolkit.state.store import StateStore
from toolkit.state.tls import (
    CA_VALIDITY,
    LEAF_VALIDITY,
    RENEW_BEFORE,
    ClusterTls,
    TlsError,
    cert_info,
    new_ca,
    new_leaf,
    subject_names,
    verify_leaf,
)

NOW = datetime.datetime(2026, 11, 26, 8, 0, tzinfo=datetime.UTC)
NAMES = ["10.77.3.2", "node2", "Node2.example", "10.77.3.2", None, ""]


def tls(tmp_path: Path) -> ClusterTls:
    return ClusterTls("c1", tmp_path / "state" / "c1" / "tls")


def test_subject_names_add_loopback_and_drop_blanks_and_repeats() -> None:
    assert subject_names(NAMES) == (
        "10.77.3.2",
        "node2",
        "node2.example",
        "127.0.0.1",
        "localhost",
    )
    assert subject_names(["::0001", "[fe80::1]"]) == ("::1", "fe80::1", "127.0.0.1", "localhost")


def test_node_certificate_names_ips_as_ip_and_hosts_as_dns(tmp_path: Path) -> None:
    cert = tls(tmp_path).node("node2", NAMES, NOW).cert
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("10.77.3.2"),
        ipaddress.ip_address("127.0.0.1"),
    ]
    assert san.get_values_for_type(x509.DNSName) == ["node2", "node2.example", "localhost"]
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    # Ray presents one certificate to serve and to dial.
    assert {u.dotted_string for u in usage} == {"1.3.6.1.5.5.7.3.1", "1.3.6.1.5.5.7.3.2"}


def test_chain_verifies_as_a_server_for_the_node_address_and_not_another(tmp_path: Path) -> None:
    store = tls(tmp_path)
    ca = store.ca(NOW)
    leaf = store.node("node2", NAMES, NOW)
    verify_leaf(ca.cert_pem, leaf.cert_pem, NOW)
    builder = PolicyBuilder().store(Store([ca.cert])).time(NOW)
    for name in ("10.77.3.2", "127.0.0.1"):
        verifier = builder.build_server_verifier(x509.IPAddress(ipaddress.ip_address(name)))
        verifier.verify(leaf.cert, [])
    other = builder.build_server_verifier(x509.IPAddress(ipaddress.ip_address("10.77.3.3")))
    with pytest.raises(VerificationError):
        other.verify(leaf.cert, [])


def test_a_certificate_of_another_ca_does_not_verify(tmp_path: Path) -> None:
    ours = new_ca("c1", NOW)
    theirs = new_ca("c1", NOW)  # same name, another key: what a stranger could make
    leaf = new_leaf(theirs, "node2", subject_names(["10.77.3.2"]), NOW)
    with pytest.raises(TlsError, match="does not verify against the cluster's CA"):
        verify_leaf(ours.cert_pem, leaf.cert_pem, NOW)


def test_lifetimes_and_expiry(tmp_path: Path) -> None:
    ca = new_ca("c1", NOW)
    leaf = new_leaf(ca, "node2", subject_names(["10.77.3.2"]), NOW)
    assert ca.cert.not_valid_after_utc == NOW + CA_VALIDITY
    assert leaf.cert.not_valid_after_utc == NOW + LEAF_VALIDITY
    # A node whose clock is a minute behind accepts it.
    verify_leaf(ca.cert_pem, leaf.cert_pem, NOW - datetime.timedelta(minutes=1))
    with pytest.raises(TlsError, match="certificate expired on 2027-02-24"):
        verify_leaf(ca.cert_pem, leaf.cert_pem, NOW + LEAF_VALIDITY + datetime.timedelta(days=1))
    # A leaf never outlives its CA.
    late = new_leaf(ca, "node2", ("10.77.3.2",), NOW + CA_VALIDITY - datetime.timedelta(days=3))
    assert late.cert.not_valid_after_utc == ca.cert.not_valid_after_utc


def test_kept_certificate_is_reused_while_it_fits(tmp_path: Path) -> None:
    store = tls(tmp_path)
    first = store.node("node2", NAMES, NOW)
    assert store.node("node2", list(reversed(NAMES)), NOW + datetime.timedelta(days=30)) == first
    # Another address (the node's Ray binds elsewhere now): a new certificate.
    moved = store.node("node2", ["10.77.3.9", "node2"], NOW + datetime.timedelta(days=30))
    assert moved != first
    assert "10.77.3.9" in cert_info(moved.cert_pem).names
    # Close to its end: a new one, valid LEAF_VALIDITY from then.
    soon = (
        NOW
        + datetime.timedelta(days=30)
        + LEAF_VALIDITY
        - RENEW_BEFORE
        + datetime.timedelta(days=1)
    )
    renewed = store.node("node2", ["10.77.3.9", "node2"], soon)
    assert renewed != moved
    assert renewed.cert.not_valid_after_utc == soon + LEAF_VALIDITY


def test_a_new_ca_makes_new_node_certificates(tmp_path: Path) -> None:
    store = tls(tmp_path)
    ca = store.ca(NOW)
    leaf = store.node("node2", NAMES, NOW)
    assert store.ca(NOW + datetime.timedelta(days=100)) == ca
    later = NOW + CA_VALIDITY + datetime.timedelta(days=1)
    new = store.ca(later)
    assert new != ca
    again = store.node("node2", NAMES, later)
    assert again != leaf
    verify_leaf(new.cert_pem, again.cert_pem, later)


def test_a_damaged_key_file_is_replaced(tmp_path: Path) -> None:
    store = tls(tmp_path)
    leaf = store.node("node2", NAMES, NOW)
    (store.directory / "nodes" / "node2.key").write_bytes(b"not a key")
    assert store.node("node2", NAMES, NOW) != leaf


def test_every_file_is_private(tmp_path: Path) -> None:
    store = tls(tmp_path)
    store.node("node2", NAMES, NOW)
    store.client(NOW)
    files = sorted(p for p in store.directory.rglob("*") if p.is_file())
    assert [p.relative_to(store.directory).as_posix() for p in files] == [
        "ca.crt",
        "ca.key",
        "client.crt",
        "client.key",
        "nodes/node2.crt",
        "nodes/node2.key",
    ]
    assert {stat.S_IMODE(p.stat().st_mode) for p in files} == {0o600}
    for folder in (store.directory, store.directory / "nodes"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert b"PRIVATE KEY" in (store.directory / "ca.key").read_bytes()


def test_a_node_named_like_the_client_gets_its_own_files(tmp_path: Path) -> None:
    store = tls(tmp_path)
    assert store.node("client", ["10.0.0.5"], NOW) != store.client(NOW)
    with pytest.raises(TlsError, match="cannot name a certificate file"):
        store.node("../ca", ["10.0.0.5"], NOW)


def test_forget_credentials_removes_token_and_tls_only(tmp_path: Path) -> None:
    state = StateStore("c1", tmp_path)
    token = state.token()
    state.tls.node("node2", NAMES, NOW)
    state.save(ClusterState(cluster="c1"))
    state.forget_credentials()
    assert not state.token_file.exists()
    assert not state.tls.directory.exists()
    assert state.load() == ClusterState(cluster="c1")
    assert state.token() != token
    state.forget_credentials()  # nothing left to remove: no error
