"""matplotlib for the report, imported the one safe way (every plotting module imports it from here).

matplotlib reads `./matplotlibrc` from the working directory before any other configuration, once, at
import. netprof (root) runs in the caller's directory, where another user may have put a matplotlibrc,
or a link named so to a root-only file, whose lines matplotlib then echoes in its warnings. So the import
runs with `/` as the working directory; everything else matplotlib reads comes from MPLCONFIGDIR, which
`rootenv.setup()` points at a root-owned directory. The Agg backend: no display.
"""

from __future__ import annotations

import os

_cwd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
try:
    os.chdir("/")
    import matplotlib

    matplotlib.use("Agg")  # must precede pyplot
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator
finally:
    os.fchdir(_cwd)  # by descriptor: the directory may have been renamed meanwhile
    os.close(_cwd)

__all__ = ["matplotlib", "plt", "Line2D", "FixedLocator", "FuncFormatter", "NullLocator"]
