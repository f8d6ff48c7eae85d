// netprof.backends._cpp_backends: the C++ echo backends as one pybind11 function.
#include <pybind11/pybind11.h>

#include "backends.hpp"

namespace py = pybind11;

PYBIND11_MODULE(_cpp_backends, m) {
  m.doc() = "C++ echo backends (epoll, poll, thread per connection, io_uring) for netprof";
  m.def(
      "serve",
      [](const std::string& model, int listen_fd, const std::string& work_kind, double work_us, bool poisson,
         long long msize, const std::string& framing_name) {
        const auto work = netprof::Work::parse(work_kind, work_us, poisson);
        const auto framing = netprof::Framing::parse(framing_name, msize);
        auto serve = model == "epoll"   ? netprof::serve_epoll
                     : model == "poll"  ? netprof::serve_poll
                     : model == "th"    ? netprof::serve_threads
                     : model == "uring" ? netprof::serve_uring
                                        : nullptr;
        if (!serve) throw py::value_error("model must be epoll, poll, th or uring, not " + model);
        // Serving never touches Python objects: let other Python threads run meanwhile.
        py::gil_scoped_release release;
        serve(listen_fd, work, framing);
      },
      py::arg("model"), py::arg("listen_fd"), py::arg("work_kind") = "none", py::arg("work_us") = 0.0,
      py::arg("poisson") = false, py::arg("msize") = 64, py::arg("framing") = "message",
      "Echo on every connection accepted from listen_fd until SIGTERM/SIGINT arrives (connections "
      "coming and going never end it). framing 'message': each recv asks for the "
      "bytes that complete an msize-byte message, whole messages are echoed; 'stream': echo what "
      "each recv returned.");
}
