"""netprof's own exceptions: one root, each kind with the exit code the CLI leaves with.

Exit codes (also in `netprof --help` and the README): 0 every cell ran; 1 some cells failed (FF)
or a `--fail-if` regression; 2 bad input or a missing capability; 3 netprof's own error (the report
of finished cells is still written); 130 interrupted.
"""

from __future__ import annotations

EXIT_OK, EXIT_FAILED_CELLS, EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class NetprofError(Exception):
    """An error the CLI reports as one line (the message names the fix) and exits with `exit_code`."""

    exit_code = EXIT_INTERNAL


class InputError(NetprofError, ValueError):
    """Bad input, found before any process is started."""

    exit_code = EXIT_BAD_INPUT


class CapabilityError(NetprofError):
    """The machine lacks something a run needs (BPF rights, a tool, an interpreter)."""

    exit_code = EXIT_BAD_INPUT
