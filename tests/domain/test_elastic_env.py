"""What the workers of an elastic job (issue 35) are told of their rendezvous, so that torchrun's
c10d backend works unchanged; a rigid gang is told none of it."""

from gpupool.domain.jobs import JobSpec, Placement
from gpupool.domain.worker_env import Rendezvous, worker_env

ELASTIC_VARS = {
    "GPUPOOL_RDZV_ENDPOINT",
    "GPUPOOL_RDZV_ID",
    "GPUPOOL_MIN_WORKERS",
    "GPUPOOL_MAX_WORKERS",
    "PET_RDZV_CONF",
}


def env_of(spec: JobSpec, worker: int, rendezvous: Rendezvous, attempt: int | None = None) -> dict[str, str]:
    return worker_env(
        job_id=7,
        spec=spec,
        placement=Placement(worker, f"node-{worker + 1}", (0,)),
        rendezvous=rendezvous,
        restarts=2,
        preempted=False,
        attempt=attempt,
    )


def test_every_worker_of_an_elastic_job_is_told_one_rendezvous_on_worker_0_which_hosts_it() -> None:
    spec = JobSpec.create(command=["torchrun", "t.py"], gpus=1, workers="2:8")
    rdzv = Rendezvous("10.0.0.1", 29400)
    host, guest = env_of(spec, 0, rdzv, attempt=4), env_of(spec, 5, rdzv, attempt=4)
    for env in (host, guest):
        assert env["GPUPOOL_RDZV_ENDPOINT"] == "10.0.0.1:29400"
        assert env["GPUPOOL_RDZV_ID"] == "gpupool-7-4"
        assert (env["GPUPOOL_MIN_WORKERS"], env["GPUPOOL_MAX_WORKERS"], env["NNODES"]) == ("2", "8", "2:8")
    timeouts = ",last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=4"
    assert (host["PET_RDZV_CONF"], guest["PET_RDZV_CONF"]) == ("is_host=1" + timeouts, "is_host=0" + timeouts)
    assert host["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == guest["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    # Ranks and the world size are the rendezvous's to give at each re-form (worker 5 > minimum 2).
    assert not {"WORLD_SIZE", "RANK", "NODE_RANK"} & (set(host) | set(guest))
    assert guest["GPUPOOL_WORKER"] == "5" and guest["LOCAL_RANK"] == "0"
    # Without an attempt given, it is the one after the restarts the worker is told of.
    assert env_of(spec, 1, rdzv)["GPUPOOL_RDZV_ID"] == "gpupool-7-3"


def test_a_rigid_gang_is_told_no_elastic_rendezvous_and_its_nnodes_stays_its_size() -> None:
    env = env_of(JobSpec.create(command=["x"], gpus=1, workers=4), 1, Rendezvous("10.0.0.1", 29400))
    assert not ELASTIC_VARS & set(env) and env["NNODES"] == "4"
    assert (env["WORLD_SIZE"], env["RANK"], env["NODE_RANK"]) == ("4", "1", "1")


def test_a_rendezvous_is_kept_as_its_endpoint_and_read_back_ipv6_included() -> None:
    for rdzv, endpoint in (
        (Rendezvous("node-1.lan", 1234), "node-1.lan:1234"),
        (Rendezvous("fe80::1", 80), "[fe80::1]:80"),
    ):
        assert rdzv.endpoint == endpoint and Rendezvous.parse(endpoint) == rdzv
