"""The xdl_trace version: the one place it is written (CMake, pyproject.toml and _core read it)."""

__version__ = "0.1.0"
