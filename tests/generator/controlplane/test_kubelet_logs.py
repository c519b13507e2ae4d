"""The kubelet's log server answers the API server's client certificate alone, and a client that
connects and never speaks holds up nobody: TLS is negotiated in each connection's own thread, and
only so many such connections are held at once."""
from __future__ import annotations

import socket
import ssl

import pytest

from generator.container.ports import free_port
from generator.controlplane import pki
from generator.controlplane.components import APISERVER_KUBELET_CLIENT
from generator.controlplane.kubelet import logs
from tests.support.waiting import wait_for


@pytest.fixture
def server(tmp_path):
    ca = pki.Authority(tmp_path / "pki")
    cert, key = ca.issue("kubelet-serving", "kubelet", server=True, names=["localhost"], ips=["127.0.0.1"])
    port = free_port()
    served = logs.serve(None, "127.0.0.1", port, cert, key, ca.cert_path)
    yield ca, port
    served.shutdown()
    served.server_close()


def get(ca, port: int, stem: str, cn: str) -> str:
    """GET /healthz with a client certificate `cn` signed by the cluster's CA; '' when refused."""
    context = ssl.create_default_context(cafile=str(ca.cert_path))
    context.load_cert_chain(*(str(p) for p in ca.issue(stem, cn)))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        try:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: kubelet\r\nConnection: close\r\n\r\n")
                return tls.recv(4096).decode()
        except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
            return ""


def test_only_the_api_servers_client_certificate_gets_an_answer(server):
    ca, port = server
    assert get(ca, port, "apiserver-kubelet-client", APISERVER_KUBELET_CLIENT).startswith("HTTP/1.0 200")
    # Signed by the same CA, as every pod's and component's certificate is: still refused.
    assert get(ca, port, "scheduler", "system:kube-scheduler") == ""
    assert get(ca, port, "node", "system:node:other") == ""


def test_a_client_that_never_speaks_does_not_stall_the_others(server):
    ca, port = server
    with socket.create_connection(("127.0.0.1", port)):  # connected, no TLS hello: the old server waited on it
        # A 5 s client timeout turns a stalled server into a failure, not a slow pass.
        assert get(ca, port, "apiserver-kubelet-client", APISERVER_KUBELET_CLIENT).startswith("HTTP/1.0 200")


def test_connections_that_never_prove_who_they_are_are_capped_and_the_api_server_gets_in_once_they_go(tmp_path,
                                                                                                       monkeypatch):
    monkeypatch.setattr(logs, "MAX_UNAUTHENTICATED", 2)
    ca = pki.Authority(tmp_path / "pki")
    cert, key = ca.issue("kubelet-serving", "kubelet", server=True, names=["localhost"], ips=["127.0.0.1"])
    port = free_port()
    served = logs.serve(None, "127.0.0.1", port, cert, key, ca.cert_path)
    try:
        silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
        for s in silent:  # each one holds its thread until its handshake times out
            s.sendall(b"\x16")
        with socket.create_connection(("127.0.0.1", port), timeout=5) as third:
            assert third.recv(1) == b""  # past the cap: closed at once, with no thread (a timeout raises here)
        for s in silent:
            s.close()
        # Their slots come back as their threads end; the API server then gets its answer.
        wait_for(lambda: get(ca, port, "apiserver-kubelet-client", APISERVER_KUBELET_CLIENT).startswith("HTTP/1.0 200"),
                 20, "the API server's answer after the silent clients left", interval=0.05)
    finally:
        served.shutdown()
        served.server_close()
