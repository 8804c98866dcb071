"""The package's version, in a module of its own at the bottom floor: a record (``gbpn.io.versions``), the
command's ``--version`` and ``pyproject.toml`` (``[tool.setuptools.dynamic]``) read it without importing the
package root (which loads the layers)."""
__version__ = "0.1.0"
