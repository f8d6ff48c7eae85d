"""Type stub of netprof.backends._cpp_backends, the pybind11 module of backends/cpp/module.cpp
(keep the two in step). model: "epoll", "poll", "th" or "uring" (the backend's name without "cpp_")."""

def serve(model: str, listen_fd: int, work_kind: str = "none", work_us: float = 0.0, poisson: bool = False,
          msize: int = 64, framing: str = "message") -> None: ...
