"""The GPU suite (issue 29): a real head on this machine's real NVIDIA GPUs, no ``--fake-*``.

Run by ``scripts/test-gpu`` on a machine with a GPU; collected everywhere else too, where every
test is skipped with the reason (no NVML, no GPU, not root). The head and its jobs are real: NVML
telemetry, the energy counter, CUDA jobs, the device wall, the private namespace, MPS and nccl.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.headproc import HeadProcess


def nvml_gpus() -> tuple[list[dict[str, object]], str]:
    """This machine's GPUs as NVML sees them, or why there are none."""
    try:
        import pynvml
    except ImportError as exc:
        return [], f"no NVML binding here ({exc})"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return [], f"NVML does not start here: {exc}"
    found = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(i)
        uuid = pynvml.nvmlDeviceGetUUID(handle)
        found.append({"index": i, "uuid": uuid if isinstance(uuid, str) else uuid.decode(), "handle": handle})
    return found, "" if found else "NVML sees no GPU here"


GPUS, WHY_NOT = nvml_gpus()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    why = WHY_NOT or ("" if os.geteuid() == 0 else "the GPU suite checks the walls, which need root")
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.gpu)
            if why:
                item.add_marker(pytest.mark.skip(reason=f"no real GPU to test: {why}"))


@pytest.fixture(scope="session")
def gpu_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HeadProcess]:
    """One head on the real GPUs for the whole suite, reading them every second."""
    head = HeadProcess(
        tmp_path_factory.mktemp("gpu") / "data",
        real=True,
        extra=["--telemetry-every", "1s"],
    )
    head.start(timeout=120)
    yield head
    head.kill_everything()


MPS_CONTROL = shutil.which("nvidia-cuda-mps-control") or next(
    (
        p
        for p in ("/usr/local/nvidia/bin/nvidia-cuda-mps-control", "/usr/bin/nvidia-cuda-mps-control")
        if os.path.exists(p)
    ),
    None,
)


@pytest.fixture
def mps_daemon() -> Iterator[Path]:
    """An MPS control daemon where CUDA clients look for it by default, stopped afterwards."""
    if MPS_CONTROL is None:
        pytest.skip("no nvidia-cuda-mps-control on this machine")
    pipe = Path("/tmp/nvidia-mps")
    subprocess.run([MPS_CONTROL, "-d"], check=True, timeout=30)
    try:
        yield pipe
    finally:
        subprocess.run([MPS_CONTROL], input="quit\n", text=True, timeout=30, check=False)
        for entry in Path("/proc").iterdir():  # whatever of it is left (its server too)
            with contextlib.suppress(OSError, ValueError):
                if entry.name.isdigit() and b"nvidia-cuda-mps" in (entry / "cmdline").read_bytes():
                    os.kill(int(entry.name), signal.SIGKILL)
