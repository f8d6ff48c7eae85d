// netprof.backends._cpp_backends: the C++ echo backends as one pybind11 function.
#include "backends.hpp"

#include <pybind11/pybind11.h>

namespace py = pybind11;

PYBIND11_MODULE(_cpp_backends, m) {
    m.doc() = "C++ echo backends (epoll, poll, thread per connection) for netprof";
    m.def(
        "serve",
        [](const std::string& model, int listen_fd, const std::string& work_kind, double work_us,
           bool poisson) {
            const auto work = netprof::Work::parse(work_kind, work_us, poisson);
            auto serve = model == "epoll"  ? netprof::serve_epoll
                         : model == "poll" ? netprof::serve_poll
                         : model == "th"   ? netprof::serve_threads
                                           : nullptr;
            if (!serve) throw py::value_error("model must be epoll, poll or th, not " + model);
            // Serving never touches Python objects: let other Python threads run meanwhile.
            py::gil_scoped_release release;
            serve(listen_fd, work);
        },
        py::arg("model"), py::arg("listen_fd"), py::arg("work_kind") = "none", py::arg("work_us") = 0.0,
        py::arg("poisson") = false,
        "Echo on every connection accepted from listen_fd until the peer has closed them all "
        "(after at least one) or SIGTERM/SIGINT arrives.");
}
