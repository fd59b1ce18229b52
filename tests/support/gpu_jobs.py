"""Jobs of the GPU suite (tests/gpu), through a real head's CLI and client: submit one, wait for its
end, read its log and the ``KEY=value`` lines it printed."""

from __future__ import annotations

from typing import Any

from tests.support.headproc import HeadProcess, wait_for, wait_state


def submit(head: HeadProcess, *args: str, token: str | None = None) -> int:
    out = head.cli("submit", *args, token=token)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split()[-1])


def job(head: HeadProcess, job_id: int) -> dict[str, Any]:
    with head.client() as c:
        return c.job(job_id)


def ended(head: HeadProcess, job_id: int, timeout: float = 180) -> dict[str, Any]:
    with head.client() as c:
        return wait_state(c, job_id, ("succeeded", "failed", "cancelled"), timeout=timeout)


def log(head: HeadProcess, job_id: int, worker: int = 0) -> str:
    with head.client() as c:
        return c.logs(job_id, worker=worker).data.decode(errors="replace")


def said(head: HeadProcess, job_id: int, key: str, timeout: float = 120) -> str:
    """The value of the job's ``KEY=value`` line, once it printed one."""

    def found() -> tuple[str] | None:  # a tuple: an empty value is still an answer
        lines = log(head, job_id).splitlines()
        return next(((ln.split("=", 1)[1],) for ln in lines if ln.startswith(key + "=")), None)

    return str(wait_for(found, timeout, interval=0.2, what=f"job {job_id} to say {key}")[0])
