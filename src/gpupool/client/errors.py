"""What the CLI needs of the client before it makes one: the errors it turns into exit codes, the
environment's names for the connection, and whether a host is this machine. Kept apart from
``http.py`` (and its transports and job types, ~50 ms to import) so that parsing arguments,
printing help or ``--version`` does not load them."""

from __future__ import annotations

CA_ENV = "GPUPOOL_CA"  # a CA bundle to verify the head's certificate with (else the system's)
INSECURE_ENV = "GPUPOOL_INSECURE"  # "1": plain http to a head that is not on this machine is allowed


class ClientError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class HeadUnreachable(Exception):
    pass


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine: a loopback address or ``localhost``."""
    if host.lower() == "localhost" or host in ("127.0.0.1", "::1"):
        return True
    import ipaddress  # only a command that checks a URL needs it

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
