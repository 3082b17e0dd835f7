"""The blocks' checksum, CRC32C (docs/FORMAT.md "Checksums"), computed by the ``crc32c`` package's C function.

The package's ``__init__`` also loads its command line (argparse) and ``importlib.metadata`` for its version, about
13 ms on a first read; its C module is loaded here on its own when it can be (the same function), and through the
package otherwise. Standard library only.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys


def _c_function():
    """``crc32c._crc32c.crc32c``, without running the package's ``__init__`` when the module is found."""
    loaded = sys.modules.get("crc32c._crc32c")
    if loaded is None:
        spec = importlib.machinery.PathFinder.find_spec("crc32c")
        folders = list(spec.submodule_search_locations or []) if spec is not None else []
        found = [
            os.path.join(folder, "_crc32c" + suffix)
            for folder in folders
            for suffix in importlib.machinery.EXTENSION_SUFFIXES
            if os.path.isfile(os.path.join(folder, "_crc32c" + suffix))
        ]
        if not found:
            import crc32c  # the package's own way when its C module is not a file beside it

            return crc32c.crc32c
        loader = importlib.machinery.ExtensionFileLoader("crc32c._crc32c", found[0])
        module_spec = importlib.machinery.ModuleSpec("crc32c._crc32c", loader, origin=found[0])
        loaded = loader.create_module(module_spec)
        loader.exec_module(loaded)
        sys.modules["crc32c._crc32c"] = loaded  # the package, if imported later, uses this one
    return loaded.crc32c


#: CRC32C of a bytes-like object (any buffer: bytes, memoryview, a pyarrow Buffer), as an int; lets go of the GIL.
crc32c = _c_function()
