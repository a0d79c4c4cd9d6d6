"""The error of every step of making an agent image (its base, its wheels, its build), in a
module of its own: images/bases.py and images/build.py both raise it."""

from __future__ import annotations


class ImageBuildError(RuntimeError):
    """An image could not be built; the message says why and where the log is."""
