"""Text from outside netprof, made safe for a terminal, a log or a report: the one owner of that rule.

Outside means whatever netprof did not write itself: a remote host (the agent's replies, a `--server-host`
run's output, a remote loader's events), ssh's stderr, a child's stderr, a results directory read back.
Such text may carry terminal control sequences: ESC starts CSI (`ESC [ 2 J` clears the screen) and OSC
(`ESC ] 0 ; title BEL` sets the window title, `ESC ] 52 ; c ; …` writes the clipboard), CR overwrites a
line already shown, and the 8-bit C1 controls U+0080-U+009F (CSI is also U+009B, OSC U+009D) act as ESC
sequences on terminals that honour them. rich removes only BEL, BS, VT, FF and CR, so every such text
passes through `clean_text` before it is printed, logged or written into a report (docs/threat-model.md):
C0 (but newline and tab, where the text may have lines) and C1 controls and DEL are dropped; what an
escape sequence leaves behind (`]0;title`) is plain text.
"""

from __future__ import annotations

import re

# C0 controls but newline and tab, DEL, and C1 controls (as code points: text decoded from UTF-8, or from
# bytes with errors="replace", holds a stray 0x9b byte as U+FFFD, a UTF-8-encoded CSI as U+009B).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# The same and newline and tab: for a text shown as one line.
_CONTROL_OR_BREAK = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_BREAKS = re.compile(r"[\t\n]+")


def clean_text(text: str, lines: bool = True) -> str:
    """`text` without control characters. `lines`: newlines and tabs stay (a stderr tail, a stack, a line
    of output); otherwise they become one space each run of them (a one-line error message)."""
    if lines:
        return _CONTROL.sub("", text)
    return _CONTROL_OR_BREAK.sub("", _BREAKS.sub(" ", text))


def clean(obj):
    """Every string in a JSON-like object (keys too) through clean_text."""
    if isinstance(obj, str):
        return clean_text(obj)
    if isinstance(obj, dict):
        return {clean(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [clean(v) for v in obj]
    return obj
