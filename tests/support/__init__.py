"""What the tests share and are not tests themselves: fakes (an executor, NVML, a node runtime),
builders of clusters and queues, a head in a subprocess, the scripts jobs run (dial.py,
replica_server.py), Unix accounts, and the database fixtures (database.py, a pytest plugin that
tests/conftest.py loads). Test modules import from here, never from one another."""

from pathlib import Path

DIAL = str(Path(__file__).resolve().with_name("dial.py"))  # run as a job: what it could connect to
REPLICA_SERVER = str(Path(__file__).resolve().with_name("replica_server.py"))  # run as a service's replica
