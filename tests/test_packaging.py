"""Installed, netprof is one import package: no generic top-level names land in site-packages."""

from __future__ import annotations

from importlib import metadata


def test_only_netprof_is_importable_top_level():
    files = metadata.files("netprof")
    tops = {f.parts[0] for f in files if f.suffix in (".py", ".so") and not f.parts[0].startswith("..")}
    assert tops == {"netprof"}, tops


def test_subpackages_and_binaries_are_installed():
    import netprof.backends._cpp_backends  # noqa: F401  (the pybind11 module)
    import netprof.flamegraphs  # noqa: F401
    import netprof.probes  # noqa: F401
    import netprof.profiler  # noqa: F401

    names = {str(f) for f in metadata.files("netprof")}
    assert any(n.endswith("bin/netprof-loader") for n in names)
    assert any(n.endswith("probes/counting/counting.bpf.c") for n in names)
    assert not any("backends/cpp/" in n for n in names)  # C++ sources are compiled, not shipped
