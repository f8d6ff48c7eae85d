"""A server started once and kept warm across cells (`netprof ab`, `netprof knee`): it runs in a process
group of its own, and each cell sees it as an attached server, so run_cell neither starts nor stops it."""

from __future__ import annotations

import dataclasses

from netprof.profiler.core.procs import ProcessGroup
from netprof.profiler.run import servers
from netprof.profiler.run.cell import CellEnv, start_server
from netprof.profiler.run.interpreters import Interpreter
from netprof.profiler.run.loader_client import Loader
from netprof.profiler.run.plan import RunConfig


class WarmServer:
    """`cfg`'s one server (cfg.backends[0]) under the label `label`; `start` (again after `stop`, for a
    fresh process) gives `self.cfg`, the configuration with the running server attached."""

    def __init__(self, label: str, cfg: RunConfig, interp: Interpreter) -> None:
        self.label, self.base, self.interp = label, cfg, interp
        self.group = ProcessGroup()
        self.cfg: RunConfig | None = None
        self.starts = 0

    @property
    def name(self) -> str:
        return self.base.backends[0]

    def start(self, loader: Loader) -> None:
        running = start_server(self.group, next(self.base.combinations(0)), CellEnv(self.base, loader, self.interp))
        spec = servers.attached(running.pid, f"{running.host}:{running.port}", name=self.name)
        # attached, it is still the kind of server it is ("zmq" for a ZeroMQ backend): the cells' loader
        # requests drive it as the run's --zmq-client says (RunConfig.loader_transport)
        spec = dataclasses.replace(spec, transport=self.base.server(self.name).transport)
        self.cfg = dataclasses.replace(self.base, own=[spec])
        self.starts += 1

    def failure(self) -> str | None:
        """Why the server is gone, when it is."""
        proc = self.group.procs[0] if self.group.procs else None
        if proc is None or proc.alive():
            return None
        tail = proc.stderr_tail()
        return f"the {self.label} server exited with code {proc.returncode()}" + (f": {tail}" if tail else "")

    def as_started(self, row: dict) -> None:
        """A cell's row says what the attached server really is (its kind, and a built-in's interpreter)."""
        spec = self.base.server(self.name)
        row.update(server_kind=spec.kind, family=spec.family, reads=spec.reads)
        if spec.kind == "builtin":
            row.update(interpreter=self.interp.label, python_version=self.interp.version,
                       python_build=self.interp.build_flags)

    def stop(self) -> None:
        self.group.stop_all()
        self.cfg = None
