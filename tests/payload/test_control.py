"""The control channel behind a port proxy: a container's published port answers before the controller listens."""

from __future__ import annotations

import socket
import threading
import time

from dlinfra.payload.control import ControlClient, ControlServer


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_proxy_that_accepts_and_resets_is_not_a_connected_controller() -> None:
    """docker-proxy accepts on the published port and resets while nothing listens in the container."""
    port = _free_port()
    proxy = socket.socket()
    proxy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    proxy.bind(("", port))
    proxy.listen(8)
    refused = []

    def reset_everyone() -> None:
        deadline = time.monotonic() + 1.0
        proxy.settimeout(0.1)
        while time.monotonic() < deadline:
            try:
                conn, _ = proxy.accept()
            except TimeoutError:
                continue
            refused.append(1)
            conn.close()
        proxy.close()

    stand_in = threading.Thread(target=reset_everyone)
    stand_in.start()
    client = ControlClient("127.0.0.1", port, "worker:1", "127.0.0.1", "chief:0", timeout=10)
    connecting = threading.Thread(target=client.connect)
    connecting.start()
    stand_in.join()
    server = ControlServer(port, {"worker:1": "127.0.0.1"}, timeout=10, on_lost=lambda reason: None)
    try:
        connecting.join(timeout=15)
        assert refused, "the stand-in proxy never saw the client"
        assert client.sock is not None
        server.wait_for_peers(timeout=5)
        server.finish(global_step=7, wait=0.1)
        assert client.wait() == ("done", 7)
    finally:
        server.close()
