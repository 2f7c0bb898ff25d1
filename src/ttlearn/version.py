"""The package's version, on the ground floor: every room records it, and none may import the package's top."""

__version__ = "0.1.0"
