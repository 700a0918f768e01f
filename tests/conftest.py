"""Fixtures shared by the unit tests: synthetic data, no network, the course's own Tudui class."""
import socket

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` need CUDA: skip them here when there is none."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if item.get_closest_marker("gpu") is not None:  # not item.keywords: it holds parameter ids too
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _language_as_it_was():
    """Every test: the package's language setting as it was before (a lesson's code run in a test sets it)."""
    from tudui import text
    chosen = list(text._chosen)
    yield
    text._chosen[:] = chosen


@pytest.fixture(autouse=True)
def _offline_synthetic(monkeypatch):
    """Every test: synthetic data by default, and no network beyond this machine (a download fails at once)."""
    monkeypatch.setenv("TUDUI_DATA", "synthetic")

    connect, connect_ex = socket.socket.connect, socket.socket.connect_ex

    def local(sock, address):
        return sock.family == getattr(socket, "AF_UNIX", None) or (
            isinstance(address, tuple) and address[0] in ("127.0.0.1", "localhost", "::1"))

    def guarded(real):
        def call(sock, address, *args, **kwargs):
            if not local(sock, address):
                raise OSError(f"network access is disabled in the tests (tried {address!r})")
            return real(sock, address, *args, **kwargs)
        return call

    monkeypatch.setattr(socket.socket, "connect", guarded(connect))
    monkeypatch.setattr(socket.socket, "connect_ex", guarded(connect_ex))
