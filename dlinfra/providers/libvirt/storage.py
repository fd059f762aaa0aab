"""Volumes in the hypervisor host's storage pool: the shared base image, and each run's overlays and seeds.

The base image (disk, kernel, initrd) is uploaded once per image key through
libvirt's stream API, so it works for remote hosts too, and stays for later
runs; a marker volume says the upload finished. Overlays and seeds belong to a
run (their names carry the run label) and are deleted by its teardown.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING

from dlinfra.errors import TargetError

if TYPE_CHECKING:
    import libvirt

DEFAULT_POOL = "dlinfra"
DEFAULT_POOL_PATH = "/var/lib/libvirt/images/dlinfra"


def _lv():
    import libvirt

    return libvirt


def ensure_pool(
    conn: libvirt.virConnect, name: str = DEFAULT_POOL, path: str = DEFAULT_POOL_PATH
) -> libvirt.virStoragePool:
    """The directory pool ``name``, defined, built and started if the host has none yet."""
    lv = _lv()
    try:
        pool = conn.storagePoolLookupByName(name)
    except lv.libvirtError:
        root = ET.Element("pool", {"type": "dir"})
        ET.SubElement(root, "name").text = name
        target = ET.SubElement(root, "target")
        ET.SubElement(target, "path").text = path
        try:
            pool = conn.storagePoolDefineXML(ET.tostring(root, encoding="unicode"), 0)
            pool.build(0)
            pool.setAutostart(1)
        except lv.libvirtError as exc:
            raise TargetError(
                f"{conn.getHostname()}: cannot create storage pool {name} at {path}: {exc}",
                "apply the libvirt_host role, or create the pool with virsh pool-define-as",
            ) from exc
    if not pool.isActive():
        try:
            pool.create(0)
        except lv.libvirtError as exc:
            raise TargetError(f"{conn.getHostname()}: storage pool {name} does not start: {exc}") from exc
    pool.refresh(0)
    return pool


def _volume_xml(name: str, capacity: int, fmt: str, mode: str = "0600", backing: tuple[str, str] | None = None) -> str:
    root = ET.Element("volume", {"type": "file"})
    ET.SubElement(root, "name").text = name
    ET.SubElement(root, "capacity", {"unit": "bytes"}).text = str(capacity)
    target = ET.SubElement(root, "target")
    ET.SubElement(target, "format", {"type": fmt})
    perms = ET.SubElement(target, "permissions")
    ET.SubElement(perms, "mode").text = mode
    if backing:
        store = ET.SubElement(root, "backingStore")
        ET.SubElement(store, "path").text = backing[0]
        ET.SubElement(store, "format", {"type": backing[1]})
    return ET.tostring(root, encoding="unicode")


def lookup(pool: libvirt.virStoragePool, name: str) -> libvirt.virStorageVol | None:
    try:
        return pool.storageVolLookupByName(name)
    except _lv().libvirtError:
        return None


def upload(
    conn: libvirt.virConnect, pool: libvirt.virStoragePool, name: str, source: Path, fmt: str, mode: str = "0600"
) -> libvirt.virStorageVol:
    """Create volume ``name`` and stream the file ``source`` into it."""
    size = source.stat().st_size
    stale = lookup(pool, name)
    if stale is not None:
        stale.delete(0)
    vol = pool.createXML(_volume_xml(name, size, fmt, mode), 0)
    stream = conn.newStream(0)
    try:
        vol.upload(stream, 0, size, 0)
        with source.open("rb") as handle:
            stream.sendAll(lambda _stream, nbytes, fh: fh.read(nbytes), handle)
        stream.finish()
    except Exception:
        stream.abort()
        vol.delete(0)
        raise
    return vol


def ensure_base(
    conn: libvirt.virConnect, pool: libvirt.virStoragePool, key: str, files: dict[str, tuple[Path, str]]
) -> dict[str, str]:
    """Upload the image's files once per ``key`` (``{role: (path, format)}``); return ``{role: path on host}``."""
    marker_name = f"dlinfra-base-{key}.complete"
    names = {role: f"dlinfra-base-{key}-{role}" for role in files}
    if lookup(pool, marker_name) is None:
        prune_bases(pool, key)
        for role, (path, fmt) in files.items():
            upload(conn, pool, names[role], path, fmt, mode="0644")
        pool.createXML(_volume_xml(marker_name, 0, "raw", "0644"), 0)
    paths = {}
    for role, name in names.items():
        vol = lookup(pool, name)
        if vol is None:
            raise TargetError(
                f"{conn.getHostname()}: base volume {name} vanished from pool {pool.name()}",
                f"delete the volume {marker_name} and run again",
            )
        paths[role] = vol.path()
    return paths


def prune_bases(pool: libvirt.virStoragePool, keep_key: str) -> list[str]:
    """Delete the base volumes of older images (each is GBs), unless some run's overlay still exists.

    Why only then: an overlay may be backed by any base, and a run's volumes all start ``dlinfra-r``.
    """
    pool.refresh(0)
    volumes = pool.listAllVolumes(0)
    if any(vol.name().startswith("dlinfra-r") for vol in volumes):
        return []
    stale = [v for v in volumes if v.name().startswith("dlinfra-base-") and f"-{keep_key}" not in v.name()]
    for vol in stale:
        vol.delete(0)
    return [vol.name() for vol in stale]


def create_overlay(
    pool: libvirt.virStoragePool, name: str, base_path: str, base_format: str, capacity: int
) -> libvirt.virStorageVol:
    """A copy-on-write qcow2 overlay over the base: the guest writes here, never to the base."""
    return pool.createXML(_volume_xml(name, capacity, "qcow2", "0600", backing=(base_path, base_format)), 0)


def delete_volumes(pool: libvirt.virStoragePool, prefix: str) -> list[str]:
    """Delete every volume whose name starts with ``prefix``; return their names."""
    pool.refresh(0)
    deleted = []
    for vol in pool.listAllVolumes(0):
        if vol.name().startswith(prefix):
            vol.delete(0)
            deleted.append(vol.name())
    return deleted
