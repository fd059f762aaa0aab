"""OpenStack provisioning benchmark: the ``ironic`` and ``nova`` providers' overhead over the APIs' own times.

Starts a standalone Ironic (fake-hardware) and Keystone, Placement, Glance, Neutron and Nova (fake virt driver)
from ``make openstack``'s venvs, then for 1 and 4 nodes / servers prints:

  * provider up:   ``Provider.up`` until the targets are built (nodes ``active`` / servers ``ACTIVE``), through
    the ``openstack.cloud`` playbook and the provider's own polling;
  * API up:        the same state reached with openstacksdk calls alone, polled every 50 ms;
  * provider down / API down: from the delete request until the API lists nothing of the run (nodes
    ``available`` again);
  * overhead:      provider minus API (Ansible, the run registry, the provider's checks and poll interval).

The fake drivers give no machine and no guest to SSH into, so SSH readiness is not part of "ready" here (it
is the same ``read_facts`` the ``ssh`` provider runs, measured by bench/orchestration.py).

    python bench/openstack.py                   # 1 and 4 of each, 3 repeats
    python bench/openstack.py --counts 1 --repeats 1
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# `python bench/openstack.py` puts bench/ first on sys.path, where this file would shadow openstacksdk's package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from dlinfra.inventory import InventoryHost  # noqa: E402 - after the sys.path fix
from dlinfra.providers.base import LayerSpec  # noqa: E402
from dlinfra.providers.ironic.provider import IronicProvider  # noqa: E402
from dlinfra.providers.nova.provider import NovaProvider  # noqa: E402
from dlinfra.testbed.ironic import IronicService  # noqa: E402
from dlinfra.testbed.openstack import NETWORK, OpenStackServices  # noqa: E402

POLL_S = 0.05


class _IronicNoSsh(IronicProvider):
    def wait_ready(self, targets: list[Any]) -> None:
        """A fake-hardware node has no machine to answer SSH."""


class _NovaNoSsh(NovaProvider):
    def wait_ready(self, targets: list[Any]) -> None:
        """A fake-driver server has no guest to answer SSH."""


def _hosts(names: list[str]) -> list[InventoryHost]:
    return [InventoryHost(name=n, address="192.0.2.1", groups=[], vars={}) for n in names]


def _poll(done: Callable[[], bool], timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError("the API did not reach the state in time")
        time.sleep(POLL_S)


def _timed(step: Callable[[], Any]) -> float:
    started = time.monotonic()
    step()
    return time.monotonic() - started


# ------------------------------------------------------------------ ironic
def bench_ironic(service: IronicService, n: int) -> dict[str, float]:
    import openstack

    conn = openstack.connect(cloud=service.cloud)
    names = [f"bench-node-{n}-{i}" for i in range(1, n + 1)]
    ids = []
    for name in names:
        node = conn.baremetal.find_node(name, ignore_missing=True) or conn.register_machine(
            nics=[], name=name, driver="fake-hardware", resource_class=f"bench-{n}", wait=False
        )
        ids.append(node.id)
    _poll(lambda: all(conn.baremetal.get_node(i).provision_state == "available" for i in ids))
    for i in ids:  # as an idle real node is (the collection refuses a node whose power state is unknown)
        if conn.baremetal.get_node(i).power_state != "power off":
            conn.baremetal.set_node_power_state(i, "power off")

    def state_is(goal: str) -> Callable[[], bool]:
        return lambda: all(conn.baremetal.get_node(i).provision_state == goal for i in ids)

    def api_up() -> None:
        for i in ids:
            conn.baremetal.set_node_provision_state(i, "active")
        _poll(state_is("active"))

    def api_down() -> None:
        for i in ids:
            conn.baremetal.set_node_provision_state(i, "deleted")
        _poll(state_is("available"))

    provider = _IronicNoSsh("bm")
    spec = LayerSpec("bm", _hosts(names), Path("inventory.yml"),
                     {"nodes": names, "config_drive": False, "poll_interval": POLL_S})  # fmt: skip
    return {
        "api_up": _timed(api_up),
        "api_down": _timed(api_down),
        "provider_up": _timed(lambda: provider.up(spec)),
        "provider_down": _timed(provider.down),
    }


# ------------------------------------------------------------------ nova
def bench_nova(services: OpenStackServices, n: int, image: str) -> dict[str, float]:
    conn = services.connection()
    flavor = conn.compute.find_flavor("bench-api", ignore_missing=True) or conn.compute.create_flavor(
        name="bench-api", vcpus=1, ram=256, disk=1
    )
    network = conn.network.find_network(NETWORK, ignore_missing=False)
    names = [f"bench-api-{n}-{i}" for i in range(1, n + 1)]
    made: list[str] = []

    def api_up() -> None:
        for name in names:
            server = conn.compute.create_server(
                name=name, flavor_id=flavor.id, image_id=image, networks=[{"uuid": network.id}]
            )
            made.append(server.id)
        _poll(lambda: all(conn.compute.get_server(i).status == "ACTIVE" for i in made))

    def api_down() -> None:
        for i in made:
            conn.compute.delete_server(i)
        _poll(lambda: not [s for s in conn.compute.servers() if s.id in made])

    provider = _NovaNoSsh("vm")
    prefix = f"bench-nova-{n}-"
    spec = LayerSpec("vm", _hosts([f"{prefix}{i}" for i in range(1, n + 1)]), Path("inventory.yml"),
                     {"count": n, "image": image, "network": NETWORK, "ram_mb": 256, "disk_gb": 1,
                      "name_prefix": prefix, "poll_interval": POLL_S})  # fmt: skip
    return {
        "api_up": _timed(api_up),
        "api_down": _timed(api_down),
        "provider_up": _timed(lambda: provider.up(spec)),
        "provider_down": _timed(provider.down),
    }


def _row(what: str, runs: list[dict[str, float]]) -> str:
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    return (
        f"{what:<18} {med['provider_up']:>7.2f} {med['api_up']:>7.2f} {med['provider_up'] - med['api_up']:>+8.2f}"
        f"   {med['provider_down']:>7.2f} {med['api_down']:>7.2f} {med['provider_down'] - med['api_down']:>+8.2f}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", default="1,4", help="node / server counts (default 1,4)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="dlinfra-bench-os-") as folder:
        started = time.monotonic()
        ironic = IronicService(cloud="bench-ironic").start(Path(folder) / "ironic")
        ironic_s = time.monotonic() - started
        started = time.monotonic()
        nova = OpenStackServices(cloud="bench-nova")
        try:
            nova.start(Path(folder) / "nova")
            nova_s = time.monotonic() - started
            print(f"services up: ironic {ironic_s:.1f} s; keystone+placement+glance+neutron+nova {nova_s:.1f} s "
                  f"({', '.join(f'{k} {v:.1f}' for k, v in nova.timings.items())})")  # fmt: skip
            image = nova.connection().image.create_image(
                name="bench-image", data=b"bench\n", disk_format="raw", container_format="bare"
            )
            for n in counts:
                os.environ.update(ironic.env())
                rows.append(_row(f"ironic {n} node(s)", [bench_ironic(ironic, n) for _ in range(args.repeats)]))
                print(rows[-1], flush=True)
                os.environ.update(nova.env())
                runs = [bench_nova(nova, n, str(image.id)) for _ in range(args.repeats)]
                rows.append(_row(f"nova {n} server(s)", runs))
                print(rows[-1], flush=True)
        finally:
            nova.stop()
            ironic.stop()
    print()
    print(f"{'median of ' + str(args.repeats) + ', s':<18} {'up':>7} {'API':>7} {'overhead':>8}   "
          f"{'down':>7} {'API':>7} {'overhead':>8}")  # fmt: skip
    for row in rows:
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
