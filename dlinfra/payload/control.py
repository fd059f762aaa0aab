"""The control channel: how the tasks of a distributed run learn that it ended, or broke.

TensorFlow's parameter servers and PS-strategy workers are plain gRPC servers
that never return, and a dead peer can leave collectives or the coordinator
waiting for a long time. So the controller task (the chief, or worker 0 when
there is none) listens on a small TCP port; every other task connects, says
hello and sends a heartbeat every second. JSON lines, one message per line:

* task -> controller: ``hello`` (task, address), ``hb``, ``bye`` (finished cleanly)
* controller -> task: ``welcome`` (answers hello), ``hb``, ``done`` (final global step), ``abort`` (reason)

A task counts as connected only once ``welcome`` arrives: a published port
(a container on a bridge network) is answered by the engine's proxy even
before the controller listens, and that connection is then reset.

A closed connection or a missing heartbeat for ``timeout`` seconds names the
lost task; the caller writes a failure record and exits, so nothing hangs.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dlinfra.payload.errors import PeerLost

log = logging.getLogger("dlinfra.payload")

HEARTBEAT_S = 1.0


def _send(sock: socket.socket, lock: threading.Lock, message: dict[str, Any]) -> bool:
    data = (json.dumps(message) + "\n").encode()
    try:
        with lock:
            sock.sendall(data)
        return True
    except OSError:
        return False


class _LineReader:
    """Reads JSON lines from a socket; ``None`` on a closed connection."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def read(self) -> dict[str, Any] | None:
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(4096)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            return {"type": "garbage"}
        return message if isinstance(message, dict) else {"type": "garbage"}


@dataclass
class _Peer:
    name: str
    address: str
    sock: socket.socket | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    last_seen: float = 0.0
    finished: bool = False
    closed: bool = False


class ControlServer:
    """The controller's end: accepts the other tasks and watches them."""

    def __init__(self, port: int, peers: dict[str, str], timeout: float, on_lost: Callable[[str], None]) -> None:
        self.timeout = timeout
        self.on_lost = on_lost
        self.peers = {name: _Peer(name, address) for name, address in peers.items()}
        self._ended = threading.Event()
        self._lost_once = threading.Lock()
        self._lost = False
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.listener.bind(("", port))
        except OSError as exc:
            raise PeerLost(
                f"cannot open the control port {port}: {exc}", "pass a free one with --control-port"
            ) from None
        self.listener.listen(64)
        self.port = port
        threading.Thread(target=self._accept_loop, name="control-accept", daemon=True).start()
        threading.Thread(target=self._monitor_loop, name="control-monitor", daemon=True).start()

    def _accept_loop(self) -> None:
        while not self._ended.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), name="control-peer", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = _LineReader(conn)
        peer: _Peer | None = None
        while True:
            try:
                message = reader.read()
            except OSError:
                message = None
            if message is None:
                if peer is not None:
                    peer.closed = True
                conn.close()
                return
            kind = message.get("type")
            if kind == "hello":
                peer = self.peers.get(str(message.get("task")))
                if peer is None:
                    _send(conn, threading.Lock(), {"type": "abort", "reason": f"unknown task {message.get('task')}"})
                    conn.close()
                    return
                _send(conn, peer.lock, {"type": "welcome"})  # before peer.sock is set: no heartbeat can precede it
                peer.sock, peer.last_seen, peer.closed = conn, time.monotonic(), False
                log.info("control: %s connected", peer.name)
            elif peer is not None:
                peer.last_seen = time.monotonic()
                if kind == "bye":
                    peer.finished = True

    def _monitor_loop(self) -> None:
        next_beat = 0.0
        while not self._ended.wait(0.2):
            now = time.monotonic()
            if now >= next_beat:
                next_beat = now + HEARTBEAT_S
                for peer in self.peers.values():
                    if peer.sock is not None and not peer.closed:
                        _send(peer.sock, peer.lock, {"type": "hb"})
            for peer in self.peers.values():
                if peer.sock is None or peer.finished:
                    continue
                if peer.closed:
                    self._lose(f"{peer.name} at {peer.address} unreachable (its process ended or the connection broke)")
                elif now - peer.last_seen > self.timeout:
                    self._lose(f"{peer.name} at {peer.address} unreachable (no heartbeat for {self.timeout:g}s)")

    def _lose(self, reason: str) -> None:
        with self._lost_once:
            if self._lost or self._ended.is_set():
                return
            self._lost = True
        log.error("control: %s", reason)
        self.abort(reason)
        self.on_lost(reason)

    def wait_for_peers(self, timeout: float) -> None:
        """Block until every task has said hello; name the missing ones after ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(p.sock is not None for p in self.peers.values()):
                return
            time.sleep(0.1)
        missing = [f"{p.name} at {p.address}" for p in self.peers.values() if p.sock is None]
        reason = f"{', '.join(missing)} unreachable (did not connect to the control channel in {timeout:g}s)"
        self.abort(reason)  # the tasks that did connect fail naming the missing one, not the chief
        time.sleep(0.2)
        raise PeerLost(reason)

    def finish(self, global_step: int | None, wait: float) -> None:
        """Tell every task the run ended at ``global_step``; wait up to ``wait`` s for them to sign off."""
        with self._lost_once:
            if self._lost:
                return
            self._ended.set()
        for peer in self.peers.values():
            if peer.sock is not None and not peer.closed:
                _send(peer.sock, peer.lock, {"type": "done", "global_step": global_step})
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and not all(p.finished or p.closed for p in self.peers.values()):
            time.sleep(0.05)
        self.close()

    def abort(self, reason: str) -> None:
        """Tell every task the run failed (best effort)."""
        self._ended.set()
        for peer in self.peers.values():
            if peer.sock is not None and not peer.closed:
                _send(peer.sock, peer.lock, {"type": "abort", "reason": reason})

    def close(self) -> None:
        self._ended.set()
        try:
            self.listener.close()
        except OSError:
            pass


class ControlClient:
    """A task's end: connects to the controller, heartbeats, and waits for the verdict."""

    def __init__(self, host: str, port: int, task: str, address: str, controller: str, timeout: float) -> None:
        self.host, self.port, self.task, self.address = host, port, task, address
        self.controller = controller
        self.timeout = timeout
        self.sock: socket.socket | None = None
        self.reader: _LineReader | None = None
        self.lock = threading.Lock()
        self._stop = threading.Event()

    def connect(self) -> None:
        """Connect, retrying while the controller starts; PeerLost after ``timeout`` seconds."""
        deadline = time.monotonic() + self.timeout
        last = ""
        while time.monotonic() < deadline:
            try:
                sock = socket.create_connection((self.host, self.port), timeout=min(5.0, self.timeout))
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                _send(sock, self.lock, {"type": "hello", "task": self.task, "address": self.address})
                reader = _LineReader(sock)
                answer = reader.read()
            except OSError as exc:
                last = str(exc)
                time.sleep(0.2)
                continue
            if answer is None:  # a proxy took the connection but nobody listens behind it yet
                sock.close()
                last = "closed before the controller answered"
                time.sleep(0.2)
                continue
            if answer.get("type") == "abort":
                sock.close()
                raise PeerLost(str(answer.get("reason") or f"{self.controller} refused {self.task}"))
            sock.settimeout(self.timeout)
            self.sock, self.reader = sock, reader
            threading.Thread(target=self._heartbeat, name="control-heartbeat", daemon=True).start()
            return
        raise PeerLost(f"{self.controller} unreachable (control channel {self.host}:{self.port}: {last})")

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            if self.sock is None or not _send(self.sock, self.lock, {"type": "hb"}):
                return

    def wait(self) -> tuple[str, Any]:
        """Block until the run ends: ('done', global_step), ('abort', reason) or ('lost', reason)."""
        assert self.sock is not None and self.reader is not None
        reader = self.reader
        while True:
            try:
                message = reader.read()
            except TimeoutError:
                return "lost", f"{self.controller} unreachable (no heartbeat for {self.timeout:g}s)"
            except OSError as exc:
                return "lost", f"{self.controller} unreachable ({exc})"
            if message is None:
                return "lost", f"{self.controller} unreachable (its process ended or the connection broke)"
            if message.get("type") == "done":
                return "done", message.get("global_step")
            if message.get("type") == "abort":
                return "abort", str(message.get("reason") or "aborted by the controller")

    def watch(self, done: threading.Event, on_lost: Callable[[str], None]) -> None:
        """Sync workers: call ``on_lost`` (from a thread) when the controller aborts or vanishes before ``done``
        is set, as :class:`ControlServer` does for the controller's side."""

        def loop() -> None:
            verdict, detail = self.wait()
            if done.is_set() or verdict == "done":
                return
            on_lost(str(detail))

        threading.Thread(target=loop, name="control-watchdog", daemon=True).start()

    def bye(self) -> None:
        """Sign off cleanly so the controller does not count this task as lost."""
        self._stop.set()
        if self.sock is not None:
            _send(self.sock, self.lock, {"type": "bye"})
            try:
                self.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
