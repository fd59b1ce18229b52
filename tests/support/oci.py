"""OCI images built in a test, without a registry or skopeo: layers from dicts, written as a layout
directory or an archive, with the raw names a hostile layer would use left as given.

    layer({"bin/sh": File(b"...", mode=0o755), "lib": Symlink("usr/lib"), "etc": Dir(), "old/.wh.x": b""})
    digest = write_layout(path, [layer1, layer2], env=("A=1",), cmd=("sh",))
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path

LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"


@dataclass(frozen=True)
class File:
    data: bytes
    mode: int = 0o644
    uid: int = 0
    gid: int = 0


@dataclass(frozen=True)
class Dir:
    mode: int = 0o755
    uid: int = 0
    gid: int = 0


@dataclass(frozen=True)
class Symlink:
    target: str


@dataclass(frozen=True)
class Hardlink:
    target: str


@dataclass(frozen=True)
class Node:
    """A device (``chr``/``blk``) or a FIFO: what an image may not hold."""

    kind: str = "chr"


Entry = bytes | File | Dir | Symlink | Hardlink | Node
_NODE_TYPES = {"chr": tarfile.CHRTYPE, "blk": tarfile.BLKTYPE, "fifo": tarfile.FIFOTYPE}


def layer(entries: dict[str, Entry], *, compress: bool = True) -> bytes:
    """A layer blob: one member per entry, in order, named exactly as given."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, entry in entries.items():
            info = tarfile.TarInfo(name)
            info.mtime = 1_700_000_000
            data: bytes | None = None
            if isinstance(entry, bytes):
                entry = File(entry)
            if isinstance(entry, File):
                info.size, info.mode, info.uid, info.gid, data = (
                    len(entry.data),
                    entry.mode,
                    entry.uid,
                    entry.gid,
                    entry.data,
                )
            elif isinstance(entry, Dir):
                info.type, info.mode, info.uid, info.gid = tarfile.DIRTYPE, entry.mode, entry.uid, entry.gid
            elif isinstance(entry, Symlink):
                info.type, info.linkname = tarfile.SYMTYPE, entry.target
            elif isinstance(entry, Hardlink):
                info.type, info.linkname = tarfile.LNKTYPE, entry.target
            else:
                info.type, info.devmajor, info.devminor = _NODE_TYPES[entry.kind], 1, 3
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    raw = out.getvalue()
    return gzip.compress(raw, mtime=0) if compress else raw


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def write_layout(
    path: str | Path,
    layers: list[bytes],
    *,
    env: tuple[str, ...] = (),
    entrypoint: tuple[str, ...] = (),
    cmd: tuple[str, ...] = (),
    workdir: str = "",
    tag: str = "latest",
) -> str:
    """Write (or add to) an OCI layout at ``path``; the new image's manifest digest."""
    root = Path(path)
    blobs = root / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)

    def blob(data: bytes) -> str:
        digest = digest_of(data)
        (blobs / digest.split(":")[1]).write_bytes(data)
        return digest

    descriptors = []
    for data in layers:
        media = LAYER_GZIP if data[:2] == b"\x1f\x8b" else LAYER_TAR
        descriptors.append({"mediaType": media, "digest": blob(data), "size": len(data)})
    diff_ids = [digest_of(gzip.decompress(d) if d[:2] == b"\x1f\x8b" else d) for d in layers]
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": list(env),
            "Entrypoint": list(entrypoint) or None,
            "Cmd": list(cmd) or None,
            "WorkingDir": workdir,
        },
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }
    config_bytes = json.dumps(config).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": blob(config_bytes),
            "size": len(config_bytes),
        },
        "layers": descriptors,
    }
    manifest_bytes = json.dumps(manifest).encode()
    digest = blob(manifest_bytes)
    (root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    index_path = root / "index.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {"schemaVersion": 2, "manifests": []}
    index["manifests"] = [
        m for m in index["manifests"] if m.get("annotations", {}).get("org.opencontainers.image.ref.name") != tag
    ]
    index["manifests"].append(
        {
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": digest,
            "size": len(manifest_bytes),
            "annotations": {"org.opencontainers.image.ref.name": tag},
        }
    )
    index_path.write_text(json.dumps(index))
    return digest


def write_archive(path: str | Path, layers: list[bytes], **config: object) -> str:
    """An OCI archive (a tar of a layout, as skopeo writes) at ``path``; the image's manifest digest."""
    staging = Path(f"{path}.layout")
    digest = write_layout(staging, layers, **config)  # type: ignore[arg-type]
    with tarfile.open(path, "w") as tar:
        for name in sorted(os.listdir(staging)):
            tar.add(staging / name, arcname=name)
    return digest
