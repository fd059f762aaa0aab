"""All of Nova in one process: the compute API, conductor, scheduler and a compute (the fake driver, or libvirt).

Usage (the services' venv): ``python nova_aio.py CONFIG_DIR PORT``; CONFIG_DIR holds ``nova.conf`` and
``api-paste.ini``. Why one process: with ``transport_url = fake:/`` oslo.messaging passes RPC in
memory, so no RabbitMQ is needed, but only between services of the same process (Nova's own
functional tests run it this way). Nova 34 runs on native threads (its ``threading`` backend), so the
API is served by a threading ``wsgiref`` server here while the services' RPC servers and periodic
tasks run on theirs. SIGTERM stops the API, then the services.
"""

from nova import monkey_patch  # isort: skip

monkey_patch.patch(backend="threading")

import os  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
from socketserver import ThreadingMixIn  # noqa: E402
from typing import Any  # noqa: E402
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server  # noqa: E402


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Handler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Nova logs each request itself."""


def _as_nova_compute_main() -> None:
    """What ``nova-compute``'s own main sets up before its service: privsep's root helper (a context's
    ``helper_command`` overrides it), os-brick, and os-vif's plugins, through which a real virt driver plugs
    its guests' ports (the fake one plugs none)."""
    import shlex

    import nova.conf
    import os_brick
    import os_vif
    from nova import utils
    from oslo_privsep import priv_context

    priv_context.init(root_helper=shlex.split(utils.get_root_helper()))
    os_brick.setup(nova.conf.CONF)
    os_vif.initialize()


def main() -> None:
    config_dir, port = sys.argv[1], int(sys.argv[2])
    os.environ["OS_NOVA_CONFIG_DIR"] = config_dir
    os.environ["OS_NOVA_CONFIG_FILES"] = "api-paste.ini;nova.conf"
    sys.argv = sys.argv[:1]
    from nova import service
    from nova.compute import rpcapi as compute_rpcapi
    from nova.conductor import rpcapi as conductor_rpcapi
    from nova.scheduler import rpcapi as scheduler_rpcapi
    from nova.wsgi.osapi_compute import application  # parses nova.conf, sets up logging, RPC and the DB

    _as_nova_compute_main()
    services = [
        service.Service.create(binary="nova-conductor", topic=conductor_rpcapi.RPC_TOPIC),
        service.Service.create(binary="nova-scheduler", topic=scheduler_rpcapi.RPC_TOPIC),
        service.Service.create(
            binary="nova-compute", topic=compute_rpcapi.RPC_TOPIC, topic_alt=compute_rpcapi.RPC_TOPIC_ALT
        ),
    ]
    for svc in services:
        svc.start()
    httpd = make_server("127.0.0.1", port, application, server_class=_Server, handler_class=_Handler)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=httpd.shutdown, daemon=True).start())
    print(f"nova_aio: API on 127.0.0.1:{port}", flush=True)
    try:
        httpd.serve_forever()
    finally:
        for svc in reversed(services):
            try:
                svc.stop()
            except Exception as exc:  # noqa: BLE001 - stop the others anyway
                print(f"nova_aio: stopping {svc.binary}: {exc}", flush=True)
        os._exit(0)  # the services' executor threads are not daemons


if __name__ == "__main__":
    try:
        main()
    except BaseException as exc:  # noqa: BLE001 - the services' threads would keep a failed start alive
        import traceback

        traceback.print_exc()
        print(f"nova_aio: failed: {exc}", flush=True)
        os._exit(1)
