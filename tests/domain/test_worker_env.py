from gpupool.domain.jobs import JobSpec, Placement
from gpupool.domain.worker_env import Rendezvous, env_allowed, inherited_env, worker_env
from gpupool.settings import worker_base_env


def test_multi_worker_env_supports_torch_env_init_and_torchrun() -> None:
    spec = JobSpec.create(command=["python", "t.py"], gpus=4, workers=2, env={"MY": "1"})
    env = worker_env(
        job_id=9,
        spec=spec,
        placement=Placement(1, "node-2", (4, 5, 6, 7), cpus=(0, 1)),
        rendezvous=Rendezvous("10.0.0.1", 29500),
        restarts=2,
        preempted=True,
        checkpoint_dir="/ck",
    )
    assert env["GPUPOOL_GPUS"] == "4,5,6,7" and "CUDA_VISIBLE_DEVICES" not in env  # the node writes it
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]) == ("1", "2", "0")
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("10.0.0.1", "29500")
    assert (env["NNODES"], env["NODE_RANK"], env["GPUS_PER_NODE"]) == ("2", "1", "4")
    assert env["GPUPOOL_JOB_ID"] == "9" and env["GPUPOOL_NODE"] == "node-2"
    assert env["GPUPOOL_RESTARTS"] == "2" and env["GPUPOOL_PREEMPTED"] == "1"
    assert env["GPUPOOL_CHECKPOINT_DIR"] == "/ck"
    assert env["OMP_NUM_THREADS"] == "2"
    assert env["MY"] == "1"


def test_cpu_only_worker_sees_no_gpu_and_no_preempt_flag() -> None:
    spec = JobSpec.create(command=["x"], gpus=0)
    env = worker_env(
        job_id=1,
        spec=spec,
        placement=Placement(0, "n", ()),
        rendezvous=Rendezvous("127.0.0.1", 1),
        restarts=0,
        preempted=False,
    )
    assert env["GPUPOOL_GPUS"] == "" and env["GPUS_PER_NODE"] == "0"
    assert "GPUPOOL_PREEMPTED" not in env and "OMP_NUM_THREADS" not in env


def test_a_job_env_cuda_visible_devices_is_dropped_for_the_node_to_write() -> None:
    """The node sets it from the request's GPUs (tests/node/test_launch_contract.py); the job's
    own value never reaches the request, so no node of another version could let it win."""
    spec = JobSpec.create(command=["x"], env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"})
    env = worker_env(
        job_id=1,
        spec=spec,
        placement=Placement(0, "n", (3,)),
        rendezvous=Rendezvous("h", 1),
        restarts=0,
        preempted=False,
    )
    assert "CUDA_VISIBLE_DEVICES" not in env and env["GPUPOOL_GPUS"] == "3"


def test_the_checkpoint_dir_is_given_only_when_the_job_has_one_and_wins_over_the_job_env() -> None:
    def env_of(spec: JobSpec) -> dict[str, str]:
        return worker_env(
            job_id=1,
            spec=spec,
            placement=Placement(0, "n", (0,)),
            rendezvous=Rendezvous("h", 1),
            restarts=0,
            preempted=False,
            checkpoint_dir=spec.checkpoint_dir,  # as the applier passes it
        )

    spec = JobSpec.create(command=["x"], env={"GPUPOOL_CHECKPOINT_DIR": "/mine"}, checkpoint_dir="/data/ck")
    assert env_of(spec)["GPUPOOL_CHECKPOINT_DIR"] == "/data/ck"
    assert "GPUPOOL_CHECKPOINT_DIR" not in env_of(JobSpec.create(command=["x"]))


def test_a_job_inherits_only_the_allow_list_of_the_heads_environment() -> None:
    head = {
        "PATH": "/usr/bin",
        "HOME": "/home/h",
        "LANG": "C.UTF-8",
        "LC_ALL": "C",
        "TZ": "UTC",
        "TMPDIR": "/tmp",
        "LD_LIBRARY_PATH": "/usr/local/cuda/lib64",
        "CUDA_HOME": "/usr/local/cuda",
        "NCCL_SOCKET_IFNAME": "eth0",
        "GLOO_SOCKET_IFNAME": "eth0",
        "CUDA_VISIBLE_DEVICES": "0,1",  # gpupool's own, per worker
        "GPUPOOL_TOKEN": "t",
        "GPUPOOL_DATA_DIR": "/d",
        "GPUPOOL_JOIN_TOKEN": "j",
        "RAY_AUTH_TOKEN": "r",
        "AWS_SECRET_ACCESS_KEY": "k",
        "PYTHONPATH": "/src",
        "HTTPS_PROXY": "http://user:pw@proxy",
    }
    got = inherited_env(head)
    assert set(got) == {
        "PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "LD_LIBRARY_PATH", "CUDA_HOME",
        "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME",
    }  # fmt: skip
    assert got["PATH"] == "/usr/bin"
    assert worker_base_env(head) == got  # what Settings gives both backends
    assert not env_allowed("RAY_ADDRESS") and not env_allowed("GPUPOOL_URL") and env_allowed("LC_CTYPE")
