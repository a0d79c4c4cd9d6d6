"""The tag of the base image `collector images base` makes from Debian packages (images/
base_image.py), used where none can be pulled; in a module that imports nothing, for the
option's default: images/build.py, where it belongs, imports the Docker SDK, which
`collector --help` must not (tests/collector/test_startup_imports.py). build.py re-exports it."""

from __future__ import annotations

LOCAL_BASE_IMAGE = "fwbench/base:bookworm"
