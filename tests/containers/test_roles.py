"""The host roles, run for real by ansible-playbook against this machine (connection local).

docker_host: dockerd is already answering here, so a run changes nothing; ``absent`` stops only a
process with exactly the command line the role starts dockerd with (a stand-in with a throwaway
socket here, never this machine's dockerd). podman_host: run in --check mode, and for real with its
drop-in folder in a temp dir (never /etc/containers on this shared machine). payload_image: loads a
saved image when its tag is missing, a second run changes nothing, ``absent`` removes the tag.
payload: installed into a temp home from a small wheelhouse (psutil + dlinfra), removed, installed again.
Each ``absent`` and each second ``present`` run reports changed=0.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from support import REPO, need_binary

from dlinfra.images.deps_archive import PROBE, build_deps_archive
from dlinfra.images.wheelhouse import Wheelhouse, deps_hash
from dlinfra.providers.containers.engine import Engine
from dlinfra.providers.containers.image import layer_ids, save_image, save_layers_above, split_lock

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def _play_hosts(tmp_path: Path, role: str, extra: dict, hosts: dict[str, dict], *, check: bool = False) -> dict:
    """Run ``role`` on these local hosts (name -> host variables); per host: changed, failures; "output"."""
    playbook = tmp_path / f"{role}.yml"
    playbook.write_text(f"- hosts: all\n  connection: local\n  gather_facts: false\n  roles:\n    - role: {role}\n")
    inventory = tmp_path / f"{role}-inventory.json"
    inventory.write_text(json.dumps({"all": {"hosts": hosts}}))
    extra = {**extra, "ansible_python_interpreter": sys.executable}
    argv = ["ansible-playbook", "-i", str(inventory), str(playbook), "--extra-vars", json.dumps(extra)]
    if check:
        argv.append("--check")
    env = {
        **os.environ,
        "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
        "ANSIBLE_NOCOLOR": "1",
    }
    result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    stats: dict = {"output": result.stdout + result.stderr, "rc": result.returncode}
    for name in hosts:
        recap = re.search(rf"^{re.escape(name)}\s+:\s+(.*)$", result.stdout, re.M)
        assert recap, result.stdout[-2000:]
        found = {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", recap.group(1))}
        stats[name] = {"changed": found["changed"], "failures": found["failed"]}
    return stats


def _failed_tasks(output: str) -> list[str]:
    """Each failed task's name and error: what the recap at the end of the output does not say."""
    failed, task = [], ""
    for line in output.splitlines():
        if line.startswith("TASK ["):
            task = line.rstrip(" *")
        elif line.startswith("fatal:"):
            failed.append(f"{task} {line[:800]}")
    return failed


def _changed_in(output: str, task: str) -> int:
    """How many hosts reported a change in the payload role's tasks whose name starts with ``task``."""
    sections = output.split(f"TASK [payload : {task}")[1:]
    return sum(len(re.findall(r"^changed: \[", part.split("TASK [")[0], re.M)) for part in sections)


def _play(tmp_path: Path, role: str, extra: dict, *, check: bool = False) -> dict:
    stats = _play_hosts(tmp_path, role, extra, {"localhost": {}}, check=check)
    assert stats["rc"] == 0, stats["output"][-4000:]
    return stats["localhost"]


def test_docker_host_role_is_a_no_op_when_dockerd_answers(tmp_path: Path, docker: Engine) -> None:
    need_binary("ansible-playbook")
    stats = _play(tmp_path, "docker_host", {"docker_host_install": False})
    assert stats["changed"] == 0 and stats["failures"] == 0


def test_podman_host_role_checks_the_runtime(tmp_path: Path, podman: Engine) -> None:
    need_binary("ansible-playbook")
    stats = _play(tmp_path, "podman_host", {"podman_host_install": False}, check=True)
    assert stats["failures"] == 0


def test_payload_image_role_loads_only_when_missing(tmp_path: Path, docker: Engine, docker_tiny) -> None:
    """present loads once; absent removes the tag (and the emptied staging folder); present loads it again."""
    need_binary("ansible-playbook")
    ref = f"dlinfra-roletest-{secrets.token_hex(3)}:1"
    docker.run("tag", docker_tiny.tag, ref)
    tarball = save_image(docker, ref)
    stage = tmp_path / "stage"
    try:
        docker.run("rmi", ref)
        extra = {
            "payload_image_tarball": str(tarball),
            "payload_image_ref": ref,
            "payload_image_engine": "docker",
            "payload_image_stage_dir": str(stage),
        }
        other = f"{ref.rsplit(':', 1)[0]}:other"  # a tarball that does not hold the tag asked for
        refused = _play_hosts(tmp_path, "payload_image", {**extra, "payload_image_ref": other}, {"localhost": {}})
        assert refused["rc"] != 0 and f"{tarball} does not hold {other}" in refused["output"], refused["output"]
        docker.run("rmi", ref)  # the refused run loaded it, under its own tag
        first = _play(tmp_path, "payload_image", extra)
        assert first["changed"] >= 1 and docker.exists("image", ref)
        second = _play(tmp_path, "payload_image", extra)
        assert second["changed"] == 0
        assert not any(stage.iterdir())  # the staged tarball is removed once loaded

        gone = _play(tmp_path, "payload_image", {**extra, "payload_image_state": "absent"})
        assert gone["changed"] >= 1 and not docker.exists("image", ref) and not stage.exists()
        assert docker.exists("image", docker_tiny.tag)  # only the tag went, not the image it shares
        assert _play(tmp_path, "payload_image", {**extra, "payload_image_state": "absent"})["changed"] == 0

        back = _play(tmp_path, "payload_image", extra)
        assert back["changed"] >= 1 and docker.exists("image", ref)
        assert _play(tmp_path, "payload_image", extra)["changed"] == 0
    finally:
        docker.run("rmi", ref, check=False)
        shutil.rmtree(tarball.parent, ignore_errors=True)  # this throwaway tag's cached tarball


def test_only_the_layers_above_the_dependencies_image_ship_and_load(
    tmp_path: Path, docker: Engine, docker_tiny
) -> None:
    """What a ctr-vm guest gets after a source edit: its image holds the dependencies image, so only the payload
    image's own layer is archived (``save_layers_above``), and the payload_image role's load of that archive
    into an engine holding the dependencies image gives back the whole image, files of the top layer included."""
    need_binary("ansible-playbook")
    assert docker_tiny.deps_tag and docker.exists("image", docker_tiny.deps_tag)
    ref = f"dlinfra-roletest-{secrets.token_hex(3)}:1"
    marker = secrets.token_hex(8)  # a top layer of its own, which no other image shares
    cid = docker.run("create", docker_tiny.tag, "true").stdout.strip()
    thin = None
    try:
        (tmp_path / "marker").write_text(marker)
        docker.run("cp", str(tmp_path / "marker"), f"{cid}:/opt/dlinfra/marker")
        docker.run("commit", cid, ref)
        thin = save_layers_above(docker, ref, docker_tiny.deps_tag)
        whole = save_image(docker, ref)
        with tarfile.open(thin) as archive, tarfile.open(whole) as full:
            layers = json.loads(full.extractfile("manifest.json").read())[0]["Layers"]  # type: ignore[union-attr]
            below = len(layer_ids(docker, docker_tiny.deps_tag))
            names = set(archive.getnames())
        assert not names & set(layers[:below])  # the dependencies' layers are left out
        assert set(layers[below:]) <= names and "manifest.json" in names
        assert thin.stat().st_size < whole.stat().st_size / 2

        docker.run("rmi", ref)  # its own layers go with it; the dependencies image stays
        extra = {
            "payload_image_tarball": str(thin),
            "payload_image_ref": ref,
            "payload_image_engine": "docker",
            "payload_image_stage_dir": str(tmp_path / "stage"),
        }
        assert _play(tmp_path, "payload_image", extra)["changed"] >= 1
        shown = docker.run("run", "--rm", "--network", "none", ref, "cat", "/opt/dlinfra/marker").stdout
        assert shown.strip() == marker
    finally:
        docker.run("rm", "-f", cid, check=False)
        docker.run("rmi", ref, check=False)
        if thin is not None:
            shutil.rmtree(thin.parent, ignore_errors=True)  # this throwaway image's cached archives


def test_podman_host_role_writes_and_removes_its_drop_in(tmp_path: Path, podman: Engine) -> None:
    """For real, with the drop-in folder in a temp dir: written, removed by absent, written again."""
    need_binary("ansible-playbook")
    conf_dir = tmp_path / "containers.conf.d"
    extra = {"podman_host_install": False, "podman_host_conf_dir": str(conf_dir)}
    drop_in = conf_dir / "dlinfra.conf"
    assert _play(tmp_path, "podman_host", extra)["changed"] >= 1
    assert 'runtime = "runc"' in drop_in.read_text()
    gone = _play(tmp_path, "podman_host", {**extra, "podman_host_state": "absent"})
    assert gone["changed"] == 1 and not drop_in.exists()
    assert _play(tmp_path, "podman_host", {**extra, "podman_host_state": "absent"})["changed"] == 0
    assert _play(tmp_path, "podman_host", extra)["changed"] == 1 and drop_in.is_file()
    assert _play(tmp_path, "podman_host", extra)["changed"] == 0


def _stand_in(cmdline: str) -> subprocess.Popen[bytes]:
    """A sleeping process whose command line reads exactly ``cmdline`` (perl rewrites its own)."""
    proc = subprocess.Popen(["perl", "-e", f"$0 = '{cmdline}'; sleep 600"])
    for _ in range(100):
        if Path(f"/proc/{proc.pid}/cmdline").read_bytes().rstrip(b"\0") == cmdline.encode():
            return proc
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"the stand-in never showed {cmdline!r}")


def test_docker_host_absent_stops_only_the_dockerd_it_started(tmp_path: Path, docker: Engine) -> None:
    """absent stops '/usr/sbin/dockerd --host unix://SOCKET' for its socket only; a second run changes nothing."""
    need_binary("ansible-playbook")
    need_binary("perl")
    socket = str(tmp_path / "dlinfra-test docker.sock")  # a space and a dot: the pattern is escaped
    started = _stand_in(f"/usr/sbin/dockerd --host unix://{socket}")
    other_socket = _stand_in(f"/usr/sbin/dockerd --host unix://{socket}.other")
    other_way = _stand_in(f"dockerd --host unix://{socket}")
    try:
        extra = {"docker_host_state": "absent", "docker_host_socket": socket, "docker_host_wait_retries": 10}
        assert _play(tmp_path, "docker_host", extra)["changed"] == 1
        assert started.wait(timeout=10) == -15  # SIGTERM
        assert other_socket.poll() is None and other_way.poll() is None
        assert _play(tmp_path, "docker_host", extra)["changed"] == 0
        docker.run("version")  # this machine's dockerd was never touched
    finally:
        for proc in (started, other_socket, other_way):
            proc.kill()
            proc.wait()


def _staged_payload(tmp_path: Path, tiny_wheelhouse: Path) -> tuple[dict, Wheelhouse]:
    """The role's variables for the small wheelhouse (psutil + dlinfra) in a temp home, and that wheelhouse."""
    deps, own = split_lock((tiny_wheelhouse / "requirements.lock").read_text())
    staged = tmp_path / "wheelhouse"
    staged.mkdir()
    (staged / "requirements.lock").write_text("\n".join(deps + own) + "\n")
    (staged / "dlinfra.lock").write_text("\n".join(own) + "\n")
    tar = tmp_path / "wheelhouse.tar"
    with tarfile.open(tar, "w") as out:
        for path in [*sorted(tiny_wheelhouse.glob("*.whl")), staged / "requirements.lock", staged / "dlinfra.lock"]:
            out.add(path, arcname=path.name)
    lock_hash = hashlib.sha256((staged / "requirements.lock").read_bytes()).hexdigest()
    # dlinfra's wheel alone, as a source edit ships it: no dependency wheel and no requirements.lock in it,
    # so a full install from this tar would fail.
    self_tar = tmp_path / "dlinfra-wheel.tar"
    with tarfile.open(self_tar, "w") as out:
        for path in [*sorted(tiny_wheelhouse.glob("dlinfra-*.whl")), staged / "dlinfra.lock"]:
            out.add(path, arcname=path.name)
    home = tmp_path / "home"
    wheelhouse = Wheelhouse(
        path=staged, lock=staged / "requirements.lock", files=sorted(tiny_wheelhouse.glob("*.whl")),
        self_lock=staged / "dlinfra.lock", lock_hash=lock_hash, tarball=tar, self_tarball=self_tar,
        deps_hash=deps_hash("\n".join(deps + own), "\n".join(own)), payload_hash="",
    )  # fmt: skip
    for wheel in wheelhouse.files:
        shutil.copy2(wheel, staged / wheel.name)
    extra = {
        "payload_home": str(home),
        "payload_base_python": sys.executable,
        "payload_wheelhouse_tar": str(tar),
        "payload_lock_hash": lock_hash,
        "payload_deps_hash": deps_hash("\n".join(deps + own), "\n".join(own)),
        "payload_self_tar": str(self_tar),
        "payload_pip_compile": False,
    }
    return extra, wheelhouse


def test_payload_role_absent_then_present(tmp_path: Path, tiny_wheelhouse: Path) -> None:
    """The payload in a temp home: installed, removed (run files kept), removed home, installed, unchanged."""
    need_binary("ansible-playbook")
    extra, _ = _staged_payload(tmp_path, tiny_wheelhouse)
    home = Path(extra["payload_home"])
    absent = {"payload_state": "absent", "payload_home": str(home)}  # no wheelhouse needed to remove it
    venv_python = home / "venv" / "bin" / "python"
    marker = home / "installed.lock.sha256"

    assert _play(tmp_path, "payload", extra)["changed"] >= 1
    assert venv_python.exists() and marker.read_text().strip() == extra["payload_lock_hash"]
    assert not (home / "wheelhouse").exists()

    (home / "runs").mkdir()
    (home / "runs" / "r.json").write_text("{}")
    assert _play(tmp_path, "payload", absent)["changed"] >= 1
    assert not (home / "venv").exists() and not marker.exists()
    assert sorted(p.name for p in home.iterdir()) == ["runs"]  # run files are not the role's to remove
    assert _play(tmp_path, "payload", absent)["changed"] == 0

    shutil.rmtree(home / "runs")
    assert _play(tmp_path, "payload", absent)["changed"] == 1 and not home.exists()

    assert _play(tmp_path, "payload", extra)["changed"] >= 1
    check = subprocess.run([str(venv_python), "-c", "import dlinfra.payload, psutil"], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    assert _play(tmp_path, "payload", extra)["changed"] == 0
    assert (home / "installed.deps.sha256").read_text().strip() == extra["payload_deps_hash"]

    # A source edit: another lock, the same dependencies. Only the small tar travels, dlinfra is reinstalled.
    edited = {**extra, "payload_lock_hash": "e" * 64}
    assert _play(tmp_path, "payload", edited)["changed"] >= 1
    assert marker.read_text().strip() == "e" * 64
    check = subprocess.run([str(venv_python), "-c", "import dlinfra.payload, psutil"], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    assert _play(tmp_path, "payload", edited)["changed"] == 0


def test_payload_role_from_the_dependencies_archive(
    tmp_path: Path, tiny_wheelhouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two hosts sharing one store (a local testbed's): the controller's archive is unpacked once, each host's
    venv imports the dependencies from it and dlinfra from its own wheel; a second run changes nothing; a copy
    whose sha256 differs is refused, naming it; an interpreter the archive does not fit installs with pip."""
    need_binary("ansible-playbook")
    need_binary("zstd")
    monkeypatch.setenv("DLINFRA_CACHE", str(tmp_path / "cache"))  # a small archive, beside nobody's real one
    extra, wheelhouse = _staged_payload(tmp_path, tiny_wheelhouse)
    archive = build_deps_archive(wheelhouse)
    assert archive is not None
    extra |= {
        "payload_deps_archive": str(archive.path),
        "payload_deps_sha256": archive.sha256,
        "payload_deps_probe": PROBE,
        "payload_deps_fits": archive.fits,
        "payload_deps_site": archive.site_packages,
    }
    del extra["payload_home"]
    store = tmp_path / "store"
    hosts = {name: {"payload_home": str(tmp_path / name), "dlinfra_deps_store": str(store)} for name in ("h1", "h2")}

    first = _play_hosts(tmp_path, "payload", extra, hosts)
    assert first["rc"] == 0, first["output"][-4000:]
    task = "TASK [payload : Check its sha256, unpack it, move it into place, remove the copy]"
    assert first["output"].count(task) == 1
    unpacking = first["output"].split(task)[1].split("TASK [")[0]
    assert len(re.findall(r"^changed: \[h\d\]", unpacking, re.M)) == 1, "one host unpacked it for both"
    assert sorted(p.name for p in store.iterdir()) == [archive.sha256, "wheels"], "unpacked once, nothing partial"
    assert [p.name for p in (store / "wheels").iterdir()] == [f"{extra['payload_lock_hash']}.tar"]
    # The hosts see the controller's archive itself (one filesystem): unpacked where it lies, not copied, kept.
    assert not _changed_in(first["output"], "Copy the archive"), "the archive was copied"
    assert archive.path.is_file(), "the controller's archive is left where it was"
    copying = first["output"].split("TASK [payload : Copy dlinfra's wheel and its lock into the store")[1]
    assert len(re.findall(r"^changed: \[h\d\]", copying.split("TASK [")[0], re.M)) == 1, "one copy for both"
    for name in hosts:
        venv_python = tmp_path / name / "venv" / "bin" / "python"
        probe = "import dlinfra.payload, psutil; print(psutil.__file__)"
        check = subprocess.run([str(venv_python), "-c", probe], capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
        assert check.stdout.startswith(str(store / archive.sha256)), "psutil comes from the store"
        assert not (tmp_path / name / "venv" / "bin" / "pip").exists(), "no pip ran on the target"
    again = _play_hosts(tmp_path, "payload", extra, hosts)
    assert again["rc"] == 0 and again["h1"]["changed"] == again["h2"]["changed"] == 0, again["output"][-3000:]

    # A source edit: another lock, the same dependencies. One new wheel tar in the store, both hosts on it.
    edited = {**extra, "payload_lock_hash": "e" * 64}
    assert _play_hosts(tmp_path, "payload", edited, hosts)["rc"] == 0
    assert sorted(p.name for p in (store / "wheels").iterdir()) == sorted(
        [f"{extra['payload_lock_hash']}.tar", f"{'e' * 64}.tar"]
    )
    for name in hosts:
        assert (tmp_path / name / "installed.lock.sha256").read_text().strip() == "e" * 64

    wrong = {"payload_home": str(tmp_path / "h3"), "dlinfra_deps_store": str(tmp_path / "store3")}
    refused = _play_hosts(tmp_path, "payload", {**extra, "payload_deps_sha256": "0" * 64}, {"h3": wrong})
    assert refused["rc"] != 0 and "not " + "0" * 64 in refused["output"], refused["output"][-3000:]
    assert _changed_in(refused["output"], "Copy the archive"), "not the controller's (its sha256 differs): copied"
    assert archive.path.is_file(), "the controller's archive is left alone"
    left = [p.relative_to(tmp_path / "store3") for p in (tmp_path / "store3").rglob("*")]
    assert left in ([], [Path("wheels")]), f"the refused copy and any partial folder are removed: {left}"

    # Two inventories (two local testbeds) on one store at once: one unpacks, the other waits and finds it there.
    shared = tmp_path / "store5"
    plays = {name: tmp_path / f"play-{name}" for name in ("h5", "h6")}
    for folder in plays.values():
        folder.mkdir()
    with ThreadPoolExecutor(2) as pool:
        runs = {
            name: pool.submit(_play_hosts, folder, "payload", extra,
                              {name: {"payload_home": str(tmp_path / name), "dlinfra_deps_store": str(shared)}})
            for name, folder in plays.items()
        }  # fmt: skip
        both = {name: run.result() for name, run in runs.items()}
    assert all(r["rc"] == 0 for r in both.values()), [_failed_tasks(r["output"]) for r in both.values()]
    unpacked = [r["output"].split(task)[1].split("TASK [")[0] for r in both.values() if task in r["output"]]
    assert sum(len(re.findall(r"^changed: \[h\d\]", u, re.M)) for u in unpacked) == 1, "unpacked once for both"
    assert sorted(p.name for p in shared.iterdir()) == [archive.sha256, "wheels"], "nothing partial, no lock file"

    other = {"payload_home": str(tmp_path / "h4"), "dlinfra_deps_store": str(tmp_path / "store4")}
    fallback = _play_hosts(
        tmp_path, "payload", {**extra, "payload_deps_fits": "cpython-399-sparc64 True"}, {"h4": other}
    )
    assert fallback["rc"] == 0, fallback["output"][-3000:]
    assert not (tmp_path / "store4").exists(), "no store where the archive does not fit"
    venv_python = tmp_path / "h4" / "venv" / "bin" / "python"
    check = subprocess.run([str(venv_python), "-c", "import dlinfra.payload, psutil"], capture_output=True, text=True)
    assert check.returncode == 0 and (tmp_path / "h4" / "venv" / "bin" / "pip").exists(), check.stderr
