"""The disk cache of compiled kernels: object code that a later connection loads instead of compiling again.

Object code is loaded into the server process and run there, as the server's OS user, so nothing is loaded that
has not been checked:
- the directory (pgad.cache_directory) is used only when it is owned by this process's user and not writable by
  group or others, and every file is opened through the directory's descriptor without following links; a directory
  that fails is not used at all (a WARNING says so once per process), and kernels are then compiled each time;
- each file is a header and the code: a magic number and format version, the code's length, its SHA-256, and the
  key it was stored under. A file that fails any check (empty, truncated, corrupted, another key's, another
  format's, not a regular file, someone else's) is removed with a WARNING and never loaded;
- a file is written whole or not at all: to a temporary name, fsync, rename, fsync of the directory, so a crash or
  two backends storing the same key at once leave either no file or a whole one.
The cache is bounded: past pgad.cache_size the least recently used files are removed (a hit renews a file's
time), and nothing is written that would leave less than MIN_FREE of the filesystem free (the WAL may share it).
"""
import contextlib
import errno
import hashlib
import os
import stat
import struct
import time
import warnings
from dataclasses import dataclass

MAGIC = b'PGADKERN'
FORMAT = 1
HEADER = struct.Struct('<8sIIQ32s32s')  # magic, format, reserved, code length, SHA-256 of the code, key
SUFFIX = '.kernel'
MAX_FILE = 64 << 20        # no kernel is this large; a larger file is not read
MIN_FREE = 0.05            # of the filesystem, left free
STALE_SECONDS = 3600       # a temporary file this old was left by a writer that died
_warned = set()


class CacheWarning(UserWarning):
    """A problem with the disk cache, reported as a PostgreSQL WARNING; the kernel is compiled instead."""


def pack(key, code):
    """The file's bytes for code stored under key (64 hex digits)."""
    return HEADER.pack(MAGIC, FORMAT, 0, len(code), hashlib.sha256(code).digest(), bytes.fromhex(key)) + code


def unpack(key, data):
    """The code in a file's bytes, or the reason they are not a valid kernel stored under key."""
    if len(data) < HEADER.size:
        return None, f'{len(data)} bytes, shorter than the header'
    magic, version, _, length, digest, stored_key = HEADER.unpack_from(data)
    code = data[HEADER.size:]
    if magic != MAGIC:
        return None, 'not a pgad kernel'
    if version != FORMAT:
        return None, f'format {version}, not {FORMAT}'
    if length != len(code):
        return None, f'{len(code)} bytes of code where the header says {length}'
    if stored_key != bytes.fromhex(key):
        return None, 'stored under another key'
    if hashlib.sha256(code).digest() != digest:
        return None, 'its SHA-256 does not match'
    return code, None


@dataclass(frozen=True)
class DiskCache:
    directory: str      # pgad.cache_directory; '' for no disk cache
    capacity: int       # pgad.cache_size in bytes; 0 for no disk cache

    def get(self, key):
        """The code stored under key, or None."""
        with self._opened() as fd:
            if fd is None:
                return None
            name = key + SUFFIX
            try:
                data = _read(name, fd)
            except FileNotFoundError:
                return None
            except OSError as e:
                return self._reject(name, fd, e.strerror or str(e))
            code, problem = unpack(key, data)
            if problem:
                return self._reject(name, fd, problem)
            try:
                os.utime(name, dir_fd=fd)  # recently used
            except OSError:
                pass
            return code

    def put(self, key, code):
        """Store code under key, then evict the least recently used past the capacity."""
        data = pack(key, code)
        with self._opened() as fd:
            if fd is None or not _room_for(fd, len(data)):
                return
            name, temporary = key + SUFFIX, f'.{key}.{os.getpid()}.{time.monotonic_ns()}.tmp'
            try:
                out = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                              dir_fd=fd)
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(out, view):]
                    os.fsync(out)
                finally:
                    os.close(out)
                os.rename(temporary, name, src_dir_fd=fd, dst_dir_fd=fd)
                os.fsync(fd)
            except OSError:
                _unlink(temporary, fd)
                return
            self._evict(fd)

    def _evict(self, fd):
        """Remove the least recently used kernels until the rest fit the capacity; and stale temporary files."""
        files, total, now = [], 0, time.time()
        for entry in os.scandir(fd):
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if entry.name.endswith('.tmp') and now - info.st_mtime > STALE_SECONDS:
                _unlink(entry.name, fd)
            elif entry.name.endswith(SUFFIX):
                files.append((info.st_mtime, entry.name, info.st_size))
                total += info.st_size
        for _, name, size in sorted(files):
            if total <= self.capacity:
                break
            _unlink(name, fd)
            total -= size

    def _reject(self, name, fd, problem):
        _unlink(name, fd)
        warnings.warn(CacheWarning(f'removed the damaged kernel cache file "{os.path.join(self.directory, name)}": '
                                   f'{problem}; compiling the kernel again'))
        return None

    def _opened(self):
        return _directory(self.directory if self.capacity > 0 else '')


NONE = DiskCache('', 0)


@contextlib.contextmanager
def _directory(path):
    """`with _directory(path) as fd`: a descriptor of the cache directory, or None where it must not be used."""
    fd = _open_trusted(path) if path else None
    try:
        yield fd
    finally:
        if fd is not None:
            os.close(fd)


def _open_trusted(path):
    """A descriptor of directory path, made if missing; None, with one WARNING per process, if it is not trusted."""
    fd = None
    try:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        problem = untrusted(os.fstat(fd))
    except OSError as e:
        problem = 'it is not a directory' if e.errno in (errno.ENOTDIR, errno.ELOOP) else e.strerror or str(e)
    if not problem:
        return fd
    if fd is not None:
        os.close(fd)
    if path not in _warned:
        _warned.add(path)
        warnings.warn(CacheWarning(f'not using the kernel cache directory "{path}": {problem}; '
                                   'kernels are compiled in every connection'))
    return None


def untrusted(info):
    """Why a file or directory with this stat may have been written by someone other than this OS user, or None."""
    if info.st_uid != os.geteuid():
        return f'it is owned by uid {info.st_uid}, not by the server\'s OS user (uid {os.geteuid()})'
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f'it is writable by group or others (mode {stat.S_IMODE(info.st_mode):04o})'
    return None


def _read(name, fd):
    descriptor = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=fd)
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, 'not a regular file')
        problem = untrusted(info)
        if problem:
            raise OSError(errno.EPERM, problem)
        if info.st_size > MAX_FILE:
            raise OSError(errno.EFBIG, f'{info.st_size} bytes, more than any kernel')
        chunks, left = [], info.st_size + 1
        while left > 0:
            chunk = os.read(descriptor, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b''.join(chunks)
    finally:
        os.close(descriptor)


def _room_for(fd, size):
    disk = os.fstatvfs(fd)
    return disk.f_bavail * disk.f_frsize - size >= MIN_FREE * disk.f_blocks * disk.f_frsize


def _unlink(name, fd):
    try:
        os.unlink(name, dir_fd=fd)
    except OSError:
        pass
