"""Which rank this process is, from the environment torchrun gives each worker.

``torch.distributed.run`` (torchrun) starts every worker with ``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK`` (the node), ``GROUP_WORLD_SIZE`` (the
nodes), ``MASTER_ADDR``/``MASTER_PORT``, ``TORCHELASTIC_RUN_ID`` and
``TORCHELASTIC_RESTART_COUNT`` set (torch/distributed/elastic/agent/server/local_elastic_agent.py,
``_start_workers``). A process with ``RANK`` and ``WORLD_SIZE`` is a rank; anything else is a
plain run.
"""

from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import Mapping
from dataclasses import asdict, dataclass

__all__ = ["RankInfo", "RankEnvironmentError"]

#: Set by ``syncfree run --nproc-per-node`` for its ranks: one id per launch.
RUN_ID_VARIABLE = "SYNCFREE_RUN_ID"


class RankEnvironmentError(ValueError):
    """The environment names a rank, but with values no launcher would set."""


def _whole(environ: Mapping[str, str], name: str, default: int | None = None) -> int | None:
    text = environ.get(name)
    if text is None or text.strip() == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise RankEnvironmentError(f"{name}={text!r} in the environment is not a whole number") from None
    if value < 0:
        raise RankEnvironmentError(f"{name}={text!r} in the environment is negative")
    return value


@dataclass(frozen=True)
class RankInfo:
    """One worker of a distributed job, as its launcher described it."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int | None
    node_rank: int | None          # GROUP_RANK: which node (torchrun's agent) started it
    nnodes: int | None             # GROUP_WORLD_SIZE
    run_id: str | None             # TORCHELASTIC_RUN_ID ("none" for torchrun's static rendezvous)
    restart_count: int             # TORCHELASTIC_RESTART_COUNT: which attempt of an elastic job
    master_addr: str | None
    master_port: int | None
    hostname: str
    pid: int
    agent_pid: int | None          # the torchrun agent that started this worker (its parent)
    launch_id: str | None = None   # SYNCFREE_RUN_ID, when syncfree run launched the job

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> RankInfo | None:
        """This process's rank, or None outside a distributed launch.

        Raises `RankEnvironmentError` for values a launcher would not set (``RANK=abc``,
        a rank past the world size)."""
        environ = os.environ if environ is None else environ
        if "RANK" not in environ or "WORLD_SIZE" not in environ:
            return None
        rank = _whole(environ, "RANK")
        world_size = _whole(environ, "WORLD_SIZE")
        if rank is None or world_size is None:
            return None
        if world_size < 1:
            raise RankEnvironmentError(f"WORLD_SIZE={world_size} in the environment: a job has at least one rank")
        if rank >= world_size:
            raise RankEnvironmentError(f"RANK={rank} in the environment is not below WORLD_SIZE={world_size}")
        by_torchrun = "TORCHELASTIC_RUN_ID" in environ
        return cls(
            rank=rank,
            world_size=world_size,
            local_rank=_whole(environ, "LOCAL_RANK", rank),
            local_world_size=_whole(environ, "LOCAL_WORLD_SIZE"),
            node_rank=_whole(environ, "GROUP_RANK"),
            nnodes=_whole(environ, "GROUP_WORLD_SIZE"),
            run_id=environ.get("TORCHELASTIC_RUN_ID") or None,
            restart_count=_whole(environ, "TORCHELASTIC_RESTART_COUNT", 0) or 0,
            master_addr=environ.get("MASTER_ADDR") or None,
            master_port=_whole(environ, "MASTER_PORT"),
            hostname=socket.gethostname(),
            pid=os.getpid(),
            agent_pid=os.getppid() if by_torchrun else None,
            launch_id=environ.get(RUN_ID_VARIABLE) or None,
        )

    @property
    def run_key(self) -> str:
        """What the ranks of one launch share and the ranks of another launch do not.

        syncfree's own launch id when it launched the job; torchrun's run id when it is not
        the static rendezvous's ``none``; otherwise the rendezvous address, and on one node
        the agent that started the workers (a new torchrun is a new agent)."""
        if self.launch_id:
            parts = [self.launch_id]
        elif self.run_id and self.run_id != "none":
            parts = [self.run_id]
        else:
            parts = [f"{self.master_addr}:{self.master_port}"]
            if self.agent_pid is not None and self.nnodes in (None, 1):
                parts.append(f"{self.hostname}:{self.agent_pid}")
        parts.append(f"attempt {self.restart_count}")
        return " ".join(parts)

    @property
    def run_digest(self) -> str:
        """A short name for `run_key` (file names)."""
        return hashlib.sha1(self.run_key.encode()).hexdigest()[:12]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping) -> RankInfo:
        """The inverse of `to_dict` (a rank report file's ``rank``); ValueError when a field
        a rank needs is missing or of the wrong type."""
        values = {name: data.get(name) for name in cls.__dataclass_fields__}
        for name in ("rank", "world_size", "local_rank", "restart_count", "pid"):
            if not isinstance(values[name], int) or isinstance(values[name], bool) or values[name] < 0:
                raise ValueError(f"rank field {name!r} is not a whole number")
        if values["rank"] >= values["world_size"]:
            raise ValueError("rank is not below world_size")
        if not isinstance(values["hostname"], str):
            raise ValueError("rank field 'hostname' is not text")
        return cls(**values)
