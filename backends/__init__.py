"""netprof.backends: the echo servers under test, one small module per family.

`python -m netprof.backends --list` shows them; `registry` describes them without importing any.
"""
