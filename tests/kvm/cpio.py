"""The "newc" cpio format the kernel unpacks as an initramfs, written directly
so that building a guest needs no cpio tool and the archive is byte-for-byte
reproducible (fixed inode numbers, mtimes and owners).

The kernel accepts several archives concatenated in one initrd file; the
cached base image and each run's scenario are two such archives.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import BinaryIO

MAGIC = b"070701"
TRAILER = "TRAILER!!!"
S_IFDIR = 0o040000
S_IFREG = 0o100000
S_IFCHR = 0o020000


def _pad4(length: int) -> bytes:
    return b"\0" * (-length % 4)


@dataclass
class CpioWriter:
    """Appends entries to a binary stream; `close()` writes the trailer.
    Parent directories must be added before their entries (the kernel does
    not create them)."""

    out: BinaryIO
    _ino: int = 1
    _dirs: set[str] = field(default_factory=set)

    def _entry(self, name: str, mode: int, data: bytes, nlink: int = 1, rdev: tuple[int, int] = (0, 0)) -> None:
        encoded = name.encode() + b"\0"
        fields = (self._ino, mode, 0, 0, nlink, 0, len(data), 0, 0, *rdev, len(encoded), 0)
        header = MAGIC + b"".join(b"%08x" % value for value in fields)
        self._ino += 1
        self.out.write(header + encoded + _pad4(len(header) + len(encoded)))
        self.out.write(data + _pad4(len(data)))

    def directory(self, path: str) -> None:
        """`path` and any missing parents, relative to the archive root."""
        parts = path.strip("/").split("/")
        for depth in range(1, len(parts) + 1):
            name = "/".join(parts[:depth])
            if name and name not in self._dirs:
                self._dirs.add(name)
                self._entry(name, S_IFDIR | 0o755, b"", nlink=2)

    def file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        name = path.strip("/")
        self.directory(name.rpartition("/")[0])
        self._entry(name, S_IFREG | mode, data)

    def char_device(self, path: str, major: int, minor: int) -> None:
        name = path.strip("/")
        self.directory(name.rpartition("/")[0])
        self._entry(name, S_IFCHR | 0o600, b"", rdev=(major, minor))

    def close(self) -> None:
        self._entry(TRAILER, 0, b"")
