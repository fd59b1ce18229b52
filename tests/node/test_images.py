"""The node's image cache (``node/images.py``, ``node/oci.py``, ``node/unpack.py``): images built in
the test as OCI layouts and archives (``tests/support/oci.py``), unpacked once by digest, hostile
layers refused with nothing left behind, least-recently-used eviction that spares held images."""

from __future__ import annotations

import json
import os
import platform
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from gpupool.node.accounts import Account
from gpupool.node.images import ImageCache, ImageConfig, ImageError, ImageUnavailable, Ref, parse_ref
from tests.support.oci import Dir, File, Hardlink, Node, Symlink, digest_of, layer, write_archive, write_layout

MB = 1 << 20
BASE = layer(
    {
        "bin": Dir(),
        "bin/hello": File(b"#!/bin/sh\necho hi\n", mode=0o755),
        "usr/lib": Dir(),
        "usr/lib/libx.so.1": b"lib",
        "lib": Symlink("usr/lib"),
        "etc/alternatives/py": Symlink("/usr/bin/python3"),
        "home/ann": Dir(mode=0o700, uid=1000, gid=1000),
        "home/ann/notes": File(b"mine", mode=0o600, uid=1000, gid=1000),
        "bin/su": File(b"elf", mode=0o4755),
        "bin/wall": File(b"elf", mode=0o2755),
        "tmp": Dir(mode=0o1777),
        "usr/lib/libx.so": Hardlink("usr/lib/libx.so.1"),
    }
)


@pytest.fixture
def cache(tmp_path: Path) -> ImageCache:
    return ImageCache(str(tmp_path / "cache"), 64 * MB, skopeo=None)


def image_dirs(cache: ImageCache) -> list[str]:
    return sorted(e for e in os.listdir(cache.directory) if not e.startswith("."))


@pytest.mark.parametrize(
    ("text", "ref"),
    [
        ("/data/img", Ref("layout", "/data/img", "")),
        ("/data/img.tar", Ref("archive", "/data/img.tar", "")),
        ("oci:/data/img:v2", Ref("layout", "/data/img", "v2")),
        ("oci:/data/img", Ref("layout", "/data/img", "")),
        ("oci-archive:/data/a.b/img.tar:v1", Ref("archive", "/data/a.b/img.tar", "v1")),
        ("mystack", Ref("registry", "mystack", "")),
        ("mystack:v2", Ref("registry", "mystack", "v2")),
        ("nvcr.io/nvidia/pytorch:24.10-py3", Ref("registry", "nvcr.io/nvidia/pytorch", "24.10-py3")),
        ("localhost:5000/team/img", Ref("registry", "localhost:5000/team/img", "")),
        ("python:3.11@sha256:" + "a" * 64, Ref("registry", "python", "3.11", "sha256:" + "a" * 64)),
    ],
)
def test_parse_ref_reads_every_form(text: str, ref: Ref) -> None:
    assert parse_ref(text) == ref


@pytest.mark.parametrize(
    "text",
    [
        "",
        " python",
        "Python:3",
        "python:bad tag",
        "python@sha256:abc",
        "oci:relative/dir",
        "oci:/a/../b",
        "a//b",
        "img:",
    ],
)
def test_parse_ref_refuses_a_malformed_reference(text: str) -> None:
    with pytest.raises(ImageError):
        parse_ref(text)


def test_canonical_names() -> None:
    assert parse_ref("mystack").text == "mystack:latest"
    assert parse_ref("python@sha256:" + "b" * 64).text == "python@sha256:" + "b" * 64
    assert parse_ref("/x/img.tar").text == "oci-archive:/x/img.tar:latest"


def test_a_layout_is_unpacked_with_its_owners_links_and_config_and_no_setuid(tmp_path: Path, cache: ImageCache) -> None:
    digest = write_layout(tmp_path / "img", [BASE], env=("A=1",), entrypoint=("/bin/hello",), cmd=("x",), workdir="/w")
    image = cache.get(str(tmp_path / "img"))
    root = Path(image.root)
    assert image.digest == digest and image.size > 0
    assert image.config == ImageConfig(env=("A=1",), entrypoint=("/bin/hello",), cmd=("x",), workdir="/w", user="")
    assert (root / "bin/hello").read_bytes() == b"#!/bin/sh\necho hi\n"
    assert stat.S_IMODE((root / "bin/hello").stat().st_mode) == 0o755
    assert os.readlink(root / "lib") == "usr/lib" and os.readlink(root / "etc/alternatives/py") == "/usr/bin/python3"
    assert (root / "usr/lib/libx.so").stat().st_ino == (root / "usr/lib/libx.so.1").stat().st_ino
    notes = (root / "home/ann/notes").stat()
    owner = (1000, 1000) if os.geteuid() == 0 else (os.geteuid(), os.getegid())  # only root can give files away
    assert (notes.st_uid, notes.st_gid, stat.S_IMODE(notes.st_mode)) == (*owner, 0o600)
    assert stat.S_IMODE((root / "home/ann").stat().st_mode) == 0o700
    assert stat.S_IMODE((root / "bin/su").stat().st_mode) == 0o755  # setuid dropped
    assert stat.S_IMODE((root / "bin/wall").stat().st_mode) == 0o755  # setgid dropped
    assert stat.S_IMODE((root / "tmp").stat().st_mode) == 0o1777  # sticky kept
    assert stat.S_IMODE(os.stat(cache.directory).st_mode) == 0o711
    assert stat.S_IMODE(os.stat(Path(image.root).parent).st_mode) == 0o700
    assert sorted(os.listdir(Path(image.root).parent)) == ["lock", "meta.json", "root", "unpack.lock"]


def test_archives_by_both_forms_give_the_same_image(tmp_path: Path, cache: ImageCache) -> None:
    digest = write_archive(tmp_path / "img.tar", [BASE], tag="v1")
    assert cache.get(f"oci-archive:{tmp_path}/img.tar:v1").digest == digest
    assert cache.get(f"{tmp_path}/img.tar").digest == digest  # its only image
    assert image_dirs(cache) == [digest.split(":")[1]]


def test_an_index_of_platforms_gives_this_machines_image(tmp_path: Path, cache: ImageCache) -> None:
    """As skopeo writes a multi-platform image: index.json names an image index, which names one
    manifest per platform."""
    other = write_layout(tmp_path / "img", [layer({"arch": b"other"})], tag="other")
    mine = write_layout(tmp_path / "img", [layer({"arch": b"mine"})], tag="mine")
    index_path = tmp_path / "img/index.json"
    entries = {
        m["annotations"]["org.opencontainers.image.ref.name"]: m
        for m in json.loads(index_path.read_text())["manifests"]
    }
    machine = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    entries["other"]["platform"] = {"os": "linux", "architecture": "riscv-none"}
    entries["mine"]["platform"] = {"os": "linux", "architecture": machine}
    nested = json.dumps({"schemaVersion": 2, "manifests": [entries["other"], entries["mine"]]}).encode()
    (tmp_path / "img/blobs/sha256" / digest_of(nested).split(":")[1]).write_bytes(nested)
    top = {"mediaType": "application/vnd.oci.image.index.v1+json", "digest": digest_of(nested), "size": len(nested)}
    index_path.write_text(json.dumps({"schemaVersion": 2, "manifests": [top]}))
    image = cache.get(str(tmp_path / "img"))
    assert image.digest == mine != other and Path(image.root, "arch").read_bytes() == b"mine"


@pytest.mark.skipif(os.geteuid() != 0, reason="reading as another account needs root")
def test_a_path_is_read_as_the_jobs_owner(tmp_path: Path, cache: ImageCache) -> None:
    nobody = Account("nobody", 65534, 65534, (65534,), "/", "/bin/sh")
    shared = Path(tempfile.mkdtemp(dir="/var/tmp"))  # tmp_path's parents are root's alone
    try:
        shared.chmod(0o755)
        write_layout(shared / "img", [BASE])
        write_archive(shared / "img.tar", [BASE])
        for path in shared.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        assert (
            cache.get(str(shared / "img"), reader=nobody).digest
            == cache.get(str(shared / "img.tar"), reader=nobody).digest
        )
        (shared / "img").chmod(0o700)
        (shared / "img.tar").chmod(0o600)
        for ref in (str(shared / "img"), str(shared / "img.tar")):
            with pytest.raises(ImageError, match=r"not readable|Permission denied"):
                cache.get(ref, reader=nobody)
            assert cache.get(ref).digest  # root itself may
        assert os.geteuid() == 0 and os.getegid() == 0
    finally:
        shutil.rmtree(shared)


def test_whiteouts_hide_what_lower_layers_put_there(tmp_path: Path, cache: ImageCache) -> None:
    lower = layer({"a/x": b"x", "a/y": b"y", "b/old": b"o", "b/sub/deep": b"d", "c": Dir(), "c/f": b"f"})
    upper = layer({"a/.wh.x": b"", "b": Dir(), "b/.wh..wh..opq": b"", "b/new": b"n", "b/sub/kept": b"k", ".wh.c": b""})
    root = Path(cache.get(_layout(tmp_path, [lower, upper])).root)
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) == [
        "a",
        "a/y",
        "b",
        "b/new",
        "b/sub",
        "b/sub/kept",
    ]


def test_a_link_to_a_host_path_is_followed_inside_the_root_only(tmp_path: Path, cache: ImageCache) -> None:
    host = tmp_path / "host"
    host.mkdir()
    first = layer({"evil": Symlink(str(host))})
    second = layer({"evil/pwned": b"x", "evil/sub/deeper": b"y"})
    root = Path(cache.get(_layout(tmp_path, [first, second])).root)
    assert list(host.iterdir()) == []
    assert (root / str(host).lstrip("/") / "pwned").read_bytes() == b"x"
    assert (root / str(host).lstrip("/") / "sub/deeper").read_bytes() == b"y"


@pytest.mark.parametrize(
    ("entries", "why"),
    [
        ({"../escape": b"x"}, "climbs out"),
        ({"a/../../escape": b"x"}, "climbs out"),
        ({"/etc/escape": b"x"}, "absolute"),
        ({"a/b/link": Symlink("../../../etc/shadow")}, "points outside"),
        ({"hl": Hardlink("../outside")}, "climbs out"),
        ({"hl": Hardlink("/etc/passwd")}, "absolute"),
        ({"hl": Hardlink("missing")}, "not in the image"),
        ({"dev/sda": Node("blk")}, "device or FIFO"),
        ({"dev/null": Node("chr")}, "device or FIFO"),
        ({"fifo": Node("fifo")}, "device or FIFO"),
        ({".wh...": b""}, "names no file"),  # would remove the image's own directory
        ({"first/.wh..": b""}, "names no file"),
        ({"big": b"x" * (3 * MB)}, "larger than"),
    ],
)
def test_a_hostile_layer_is_refused_and_leaves_nothing(tmp_path: Path, entries: dict[str, object], why: str) -> None:
    cache = ImageCache(str(tmp_path / "cache"), 2 * MB, skopeo=None)
    good = cache.get(_layout(tmp_path / "good", [layer({"ok": b"ok"})]))
    bad = _layout(tmp_path / "bad", [layer({"first": b"1"}), layer(entries, compress=False)])  # type: ignore[arg-type]
    with pytest.raises(ImageError, match=why):
        cache.get(bad)
    assert image_dirs(cache) != [] and Path(good.root, "ok").read_bytes() == b"ok"
    leftovers = [d for d in image_dirs(cache) if d != good.digest.split(":")[1]]
    assert all(
        sorted(os.listdir(Path(cache.directory, d))) == ["lock", "unpack.lock"] for d in leftovers
    )  # no root, no meta
    assert [c.digest for c in cache.listing()] == [good.digest]
    assert not (tmp_path / "escape").exists() and not (tmp_path / "bad" / "escape").exists()


def test_a_blob_that_does_not_match_its_digest_is_refused(tmp_path: Path, cache: ImageCache) -> None:
    blob = layer({"f": b"original"})
    ref = _layout(tmp_path, [blob])
    blob_file = next(p for p in (tmp_path / "img/blobs/sha256").iterdir() if p.read_bytes() == blob)
    blob_file.write_bytes(layer({"f": b"tampered"}))
    with pytest.raises(ImageError, match="does not match its digest"):
        cache.get(ref)
    assert cache.listing() == []


@pytest.mark.parametrize("kind", ["empty dir", "plain tar", "bad json"])
def test_what_is_not_an_oci_image_is_refused(tmp_path: Path, cache: ImageCache, kind: str) -> None:
    if kind == "empty dir":
        (tmp_path / "img").mkdir()
        ref = str(tmp_path / "img")
    elif kind == "plain tar":
        (tmp_path / "img.tar").write_bytes(layer({"etc/passwd": b"root:x:0:0"}, compress=False))
        ref = str(tmp_path / "img.tar")
    else:
        (tmp_path / "img").mkdir()
        (tmp_path / "img/index.json").write_text("{not json")
        ref = str(tmp_path / "img")
    with pytest.raises(ImageError, match="not an OCI image"):
        cache.get(ref)


def test_an_image_larger_than_the_cache_is_refused(tmp_path: Path) -> None:
    cache = ImageCache(str(tmp_path / "cache"), 1 * MB, skopeo=None)
    with pytest.raises(ImageError, match="larger than this node's image cache"):
        cache.get(_layout(tmp_path, [layer({"big": os.urandom(2 * MB)})]))
    assert cache.listing() == []


def test_concurrent_gets_of_one_image_unpack_it_once(tmp_path: Path) -> None:
    ref = _layout(tmp_path, [BASE, layer({"more": b"m" * MB})])
    said: list[str] = []
    images = []

    def get() -> None:
        images.append(ImageCache(str(tmp_path / "cache"), 64 * MB, skopeo=None).get(ref, said.append))

    threads = [threading.Thread(target=get) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(images) == 4 and len({i.digest for i in images}) == 1
    assert [s.split(" (")[0] for s in said] == ["gpupool: unpacking layer 1/2", "gpupool: unpacking layer 2/2"]


def test_concurrent_processes_unpack_one_image_once(tmp_path: Path) -> None:
    ref = _layout(tmp_path, [BASE, layer({"more": b"m" * MB})])
    code = (
        "import sys; from gpupool.node.images import ImageCache; "
        f"print(ImageCache({str(tmp_path / 'cache')!r}, 1 << 30, skopeo=None).get({ref!r}, print).digest)"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=60)[0].splitlines() for p in procs]
    assert all(p.returncode == 0 for p in procs) and len({out[-1] for out in outs}) == 1
    assert sum(line.startswith("gpupool: unpacking layer") for out in outs for line in out) == 2


def test_an_unpack_killed_halfway_leaves_no_image_and_the_next_get_redoes_it(tmp_path: Path) -> None:
    many = layer({f"d{i // 100}/f{i}": os.urandom(16 << 10) for i in range(3000)}, compress=False)
    ref = _layout(tmp_path, [BASE, many])
    cache_dir = str(tmp_path / "cache")
    code = (
        "from gpupool.node.images import ImageCache; "
        f"ImageCache({cache_dir!r}, 1 << 30, skopeo=None).get({ref!r}, lambda s: print(s, flush=True))"
    )
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) as proc:
        for line in proc.stdout or ():
            if line.startswith("gpupool: unpacking layer 2/2"):
                proc.kill()  # SIGKILL in the middle of the second layer
                break
    assert proc.returncode == -9
    cache = ImageCache(cache_dir, 1 << 30, skopeo=None)
    (half,) = image_dirs(cache)
    assert sorted(os.listdir(Path(cache_dir, half))) == [".root-tmp", "lock", "unpack.lock"]  # half made, unnamed
    assert cache.listing() == []
    said: list[str] = []
    image = cache.get(ref, said.append)
    assert len(said) == 2 and len(list(Path(image.root).rglob("f*"))) == 3000
    assert sorted(os.listdir(Path(image.root).parent)) == ["lock", "meta.json", "root", "unpack.lock"]


def test_a_crashed_unpack_is_redone(tmp_path: Path, cache: ImageCache) -> None:
    ref = _layout(tmp_path, [BASE])
    first = cache.get(ref)
    cache.close()
    base = Path(first.root).parent
    (base / "meta.json").unlink()  # as if it crashed between the rename and the meta
    (base / ".root-tmp").mkdir()
    again = ImageCache(cache.directory, cache.limit, skopeo=None).get(ref)
    assert again.digest == first.digest and (Path(again.root) / "bin/hello").exists()
    assert not (base / ".root-tmp").exists()


def test_eviction_is_least_recently_used_and_spares_a_held_image(tmp_path: Path) -> None:
    cache = ImageCache(str(tmp_path / "cache"), 5 * MB, skopeo=None)
    refs = [_layout(tmp_path / n, [layer({n: os.urandom(2 * MB)})]) for n in "abc"]
    a = cache.get(refs[0])
    held = cache.hold(a)  # a is the least recently used, but a job runs in it
    b = cache.get(refs[1])
    cache.close()  # b is not held
    c = cache.get(refs[2])  # over the bound: b goes, not a
    cache.close()
    assert {i.digest for i in cache.listing()} == {a.digest, c.digest}
    assert [i.busy for i in cache.listing() if i.digest == a.digest] == [True]
    os.close(held)
    assert cache.evict(need_bytes=5 * MB) == [a.digest, c.digest]
    assert cache.listing() == [] and not Path(b.root).exists()


def test_hold_refuses_an_image_evicted_meanwhile(tmp_path: Path, cache: ImageCache) -> None:
    image = cache.get(_layout(tmp_path, [BASE]))
    cache.close()
    assert cache.evict(need_bytes=cache.limit) == [image.digest]
    with pytest.raises(ImageError, match="evicted"):
        cache.hold(image)


def test_import_by_name_and_a_name_moves_to_its_new_image(tmp_path: Path, cache: ImageCache) -> None:
    write_archive(tmp_path / "v1.tar", [layer({"v": b"1"})])
    write_archive(tmp_path / "v2.tar", [layer({"v": b"2"})])
    first = cache.import_archive(str(tmp_path / "v1.tar"), "mystack")
    assert cache.get("mystack").digest == first.digest == cache.get("mystack:latest").digest
    second = cache.import_archive(str(tmp_path / "v2.tar"), "mystack")
    cache.close()
    assert Path(cache.get("mystack").root, "v").read_bytes() == b"2"
    names = {c.digest: c.names for c in cache.listing()}
    assert names == {first.digest: (), second.digest: ("mystack:latest",)}
    with pytest.raises(ImageError):
        cache.import_archive(str(tmp_path / "v1.tar"), "Bad Name")


def test_listing_says_names_size_and_busy(tmp_path: Path, cache: ImageCache) -> None:
    image = cache.import_archive(_archive(tmp_path), "tools:v1")
    (listed,) = cache.listing()
    assert (listed.digest, listed.names, listed.size, listed.busy) == (image.digest, ("tools:v1",), image.size, False)
    assert listed.last_used.endswith("Z")
    fd = cache.hold(image)
    assert cache.listing()[0].busy
    os.close(fd)


def test_a_registry_reference_without_skopeo_says_so(cache: ImageCache) -> None:
    with pytest.raises(ImageError, match="skopeo is not installed"):
        cache.get("nvcr.io/nvidia/pytorch:24.10-py3")


def test_a_registry_pull_goes_through_skopeo_once(tmp_path: Path) -> None:
    """A stand-in skopeo copies a prepared layout where the real one would write the pulled image."""
    source = _layout(tmp_path / "registry", [BASE])
    calls = tmp_path / "calls"
    fake = tmp_path / "skopeo"
    fake.write_text(
        f'#!/bin/sh\necho "$@" >> {calls}\necho "Copying blob sha256:abc"\n'
        f'for a; do dest="$a"; done; dest="${{dest#oci:}}"; cp -r {source} "${{dest%:latest}}"\n'
    )
    fake.chmod(0o755)
    cache = ImageCache(str(tmp_path / "cache"), 64 * MB, skopeo=str(fake))
    said: list[str] = []
    image = cache.get("registry.example.com/team/img:v3", said.append)
    assert cache.get("registry.example.com/team/img:v3").digest == image.digest  # cached: no second pull
    assert calls.read_text().split()[:5] == [
        "--command-timeout",  # a registry that stops answering does not keep the job starting for ever
        "1h",
        "copy",
        "docker://registry.example.com/team/img:v3",
        calls.read_text().split()[4],
    ]
    assert len(calls.read_text().splitlines()) == 1
    assert said[:2] == ["gpupool: pulling image registry.example.com/team/img:v3", "gpupool: Copying blob sha256:abc"]
    assert not [e for e in os.listdir(cache.directory) if e.startswith(".pull-") and not e.endswith(".lock")]


def test_a_refused_pull_says_what_the_registry_said(tmp_path: Path) -> None:
    fake = tmp_path / "skopeo"
    fake.write_text('#!/bin/sh\necho "FATA[0001] unauthorized: authentication required" >&2\nexit 1\n')
    fake.chmod(0o755)
    cache = ImageCache(str(tmp_path / "cache"), 64 * MB, skopeo=str(fake), authfile="/nonexistent/auth.json")
    with pytest.raises(ImageError, match="unauthorized: authentication required") as refused:
        cache.get("private/img")
    assert not isinstance(refused.value, ImageUnavailable)  # the registry said no: the job fails
    assert cache.listing() == []


def test_a_registry_that_does_not_answer_makes_the_job_wait(tmp_path: Path) -> None:
    fake = tmp_path / "skopeo"
    fake.write_text('#!/bin/sh\necho "dial tcp 10.0.0.9:443: connect: connection refused" >&2\nexit 1\n')
    fake.chmod(0o755)
    cache = ImageCache(str(tmp_path / "cache"), 64 * MB, skopeo=str(fake))
    with pytest.raises(ImageUnavailable, match="connection refused"):
        cache.get("registry.example.com/team/img:v3")
    with pytest.raises(ImageUnavailable, match="skopeo is not installed"):
        ImageCache(str(tmp_path / "cache2"), 64 * MB, skopeo=None).get("registry.example.com/team/img:v3")


def _layout(tmp_path: Path, layers: list[bytes]) -> str:
    write_layout(tmp_path / "img", layers)
    return str(tmp_path / "img")


def _archive(tmp_path: Path) -> str:
    write_archive(tmp_path / "img.tar", [BASE])
    return str(tmp_path / "img.tar")
