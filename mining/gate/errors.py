"""Errors the gate raises for input it cannot check (exit 2), as opposed to a kernel that fails (exit 1)."""


class BadInput(ValueError):
    """The problem, the kernel file or the toolchain setup is unusable. Message: one line, naming the file."""
