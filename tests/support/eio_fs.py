#!/usr/bin/python3
"""A FUSE file system over a directory that answers EIO to reads past an offset.

    eio_fs.py ROOT MOUNTPOINT NAME OFFSET

Mirrors ROOT at MOUNTPOINT (files open as asked; nothing is created or removed). A read of a file named NAME that reaches byte OFFSET
or later fails with EIO, as a disk with a bad sector does: read(2) and pread(2) return EIO, a
mapped page faults with SIGBUS. Runs in the foreground until unmounted (root only; uses the
`fusepy` module of Debian's python3-fusepy).
"""
import errno
import os
import sys

from fusepy import FUSE, FuseOSError, Operations


class EioFs(Operations):
    def __init__(self, root, name, offset):
        self.root = root
        self.name = name
        self.offset = offset

    def _path(self, path):
        return os.path.join(self.root, path.lstrip("/"))

    def getattr(self, path, fh=None):
        st = os.lstat(self._path(path))
        keys = ("st_atime", "st_ctime", "st_gid", "st_mode", "st_mtime", "st_nlink", "st_size", "st_uid")
        return {k: getattr(st, k) for k in keys}

    def readdir(self, path, fh):
        return [".", ".."] + os.listdir(self._path(path))

    def open(self, path, flags):
        return os.open(self._path(path), flags)

    def read(self, path, size, offset, fh):
        if os.path.basename(path) == self.name and offset + size > self.offset:
            raise FuseOSError(errno.EIO)
        return os.pread(fh, size, offset)

    def release(self, path, fh):
        os.close(fh)

    def flush(self, path, fh):
        return 0

    def write(self, path, data, offset, fh):
        return os.pwrite(fh, data, offset)

    def truncate(self, path, length, fh=None):
        os.truncate(self._path(path), length)

    def fsync(self, path, datasync, fh):
        return 0


if __name__ == "__main__":
    root, mnt, name, offset = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    FUSE(EioFs(root, name, offset), mnt, foreground=True, nothreads=True)
