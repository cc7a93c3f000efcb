"""The disk cache of compiled kernels verifies and bounds itself (pgad/jit/cache.py, docs/security.md).

In process: every kind of damaged file is refused, removed and compiled again; a directory that someone else could
write to is not used; the least recently used kernels go past the cap; two processes storing one key never expose
half a file. On a real server: a damaged file no longer crashes the backend (it took the cluster with it), and
pgad.cache_size bounds what any role can make the server write.
"""
import dataclasses
import errno
import hashlib
import json
import multiprocessing
import os
import pathlib
import shutil
import subprocess
import sys
import threading
import uuid
import warnings

import numpy as np
import psycopg
import pytest

from pgad import backends, program
from pgad.jit import cache, compiler
from pgad.jit.cache import CacheWarning, DiskCache
from pgad.lang import printer

KEY = 'ab' * 32
ROOT = pathlib.Path(__file__).parent.parent


def kernel_file(directory, key=KEY):
    return pathlib.Path(directory) / (key + cache.SUFFIX)


def damaged(code=b'machine code' * 10):
    """Each way a file can be wrong, and the reason unpack gives for it (in the warning when the file is removed)."""
    good = cache.pack(KEY, code)
    flipped = bytearray(good)
    flipped[-1] ^= 1
    return {
        'empty': (b'', '0 bytes, shorter than the header'),
        'truncated header': (good[:40], '40 bytes, shorter than the header'),
        'header only': (good[:cache.HEADER.size], '0 bytes of code where the header says 120'),
        'truncated code': (good[:-5], '115 bytes of code where the header says 120'),
        'corrupted code': (bytes(flipped), 'its SHA-256 does not match'),
        'not a kernel': (b'\x7fELF' + good[4:], 'not a pgad kernel'),
        'another format': (good[:8] + (cache.FORMAT + 1).to_bytes(4, 'little') + good[12:],
                           f'format {cache.FORMAT + 1}, not {cache.FORMAT}'),
        'another key': (cache.pack('cd' * 32, code), 'stored under another key'),
    }


def test_a_packed_kernel_unpacks_to_itself():
    assert cache.unpack(KEY, cache.pack(KEY, b'\x90' * 100)) == (b'\x90' * 100, None)


@pytest.mark.parametrize('kind', damaged().keys())
def test_unpack_refuses_every_damaged_file(kind):
    data, problem = damaged()[kind]
    assert cache.unpack(KEY, data) == (None, problem)


@pytest.mark.parametrize('kind', damaged().keys())
def test_a_damaged_file_is_removed_with_a_warning_and_never_loaded(tmp_path, kind):
    store = DiskCache(str(tmp_path), 1 << 20)
    store.get(KEY)  # makes the directory
    kernel_file(tmp_path).write_bytes(damaged()[kind][0])
    with pytest.warns(CacheWarning, match='removed the damaged kernel cache file'):
        assert store.get(KEY) is None
    assert not kernel_file(tmp_path).exists()


@pytest.mark.parametrize('kind', ['empty', 'truncated code', 'corrupted code'])
def test_a_damaged_kernel_is_compiled_again_and_computes_right(tmp_path, kind):
    prog = program.build('λ(d, w) (w.a*d.x - exp(d.x))^2', ('a',), 'reverse')
    store = DiskCache(str(tmp_path), 1 << 20)
    key = compiler.cache_key(prog)
    compiler.compile(prog, store)
    code, _ = cache.unpack(key, kernel_file(tmp_path, key).read_bytes())
    bad = {'empty': b'', 'truncated code': cache.pack(key, code)[:-len(code) // 2],
           'corrupted code': cache.pack(key, code)[:-1] + b'\xcc'}[kind]
    kernel_file(tmp_path, key).write_bytes(bad)
    with pytest.warns(CacheWarning):
        again = compiler.compile(prog, store)
    assert not again.cached and cache.unpack(key, kernel_file(tmp_path, key).read_bytes())[0] == code
    x = np.linspace(0, 1, 33)
    np.testing.assert_allclose(again.kernel([x], 33, np.array([0.5])),
                               backends.compile(prog, 'python')([x], 33, np.array([0.5])), rtol=1e-12)


COMPILE_AND_RUN = '''
import json, sys
sys.path.insert(0, {root!r})
import numpy as np
from pgad import program
from pgad.jit import compiler
from pgad.jit.cache import DiskCache
prog = program.build({text!r}, ('a', 'b'), 'reverse')
compiled = compiler.compile(prog, DiskCache({directory!r}, 1 << 24))
x = np.linspace(-1, 1, 1001)
print(json.dumps([compiled.cached, compiled.kernel([x, x * x], 1001, np.array([0.3, -0.2])).tolist()]))
'''


def test_a_kernel_from_the_disk_cache_computes_right_in_another_process(tmp_path):
    """The second process never compiles: it loads the object code the first one stored, and gets its numbers.
    (In one process a second load would find the first kernel's symbol, so only another process proves it.)"""
    text = 'λ(d, w) (w.a*exp(d.x) + w.b*sin(d.y) - d.y)^2'
    script = COMPILE_AND_RUN.format(root=str(ROOT), text=text, directory=str(tmp_path / 'kernels'))
    runs = [subprocess.run([sys.executable, '-c', script], capture_output=True, text=True) for _ in range(2)]
    assert [(run.returncode, run.stderr) for run in runs] == [(0, ''), (0, '')]
    (first_cached, first), (second_cached, second) = [json.loads(run.stdout) for run in runs]
    assert (first_cached, second_cached) == (False, True)
    x = np.linspace(-1, 1, 1001)
    reference = backends.compile(program.build(text, ('a', 'b'), 'reverse'), 'python')([x, x * x], 1001,
                                                                                       np.array([0.3, -0.2]))
    np.testing.assert_allclose(first, reference, rtol=1e-12)
    np.testing.assert_allclose(second, reference, rtol=1e-12)


KEYED = 'λ(d, w) w.a*d.x + w.b*exp(d.y)'


def same_dag_other_order(part):
    """Two programs with one DAG that differ only in the order of their outputs, columns or weights."""
    prog = program.build(KEYED, ('a', 'b'), 'reverse')
    if part == 'outputs':
        return prog, program.Program(prog.lam, (prog.outputs[0], *prog.outputs[:0:-1]), prog.weights)
    if part == 'columns':
        return prog, program.Program(dataclasses.replace(prog.lam, columns=prog.lam.columns[::-1]), prog.outputs,
                                     prog.weights)
    # the loss alone (no gradient outputs), reading the weight vector as (a, b) or as (b, a)
    return program.build(KEYED, ('a', 'b'), gradient=False), program.build(KEYED, ('b', 'a'), gradient=False)


@pytest.mark.parametrize('part', ['outputs', 'columns', 'weights'])
def test_the_cache_key_covers_the_order_of_outputs_columns_and_weights(tmp_path, part):
    """A kernel takes its columns and weights and writes its sums in the program's order, so two programs with one
    DAG in another order must not share a kernel (on disk or loaded): each computes its own numbers."""
    first, second = same_dag_other_order(part)
    assert printer.to_listing(first.graph, first.outputs) == printer.to_listing(second.graph, second.outputs)
    assert compiler.cache_key(first) != compiler.cache_key(second)
    store = DiskCache(str(tmp_path), 1 << 20)
    x, y, w = np.linspace(-1, 1, 17), np.linspace(0, 2, 17), np.array([0.3, -0.7])
    for prog in (first, second):
        columns = [{'x': x, 'y': y}[c] for c in prog.columns]
        np.testing.assert_allclose(compiler.compile(prog, store).kernel(columns, 17, w),
                                   backends.compile(prog, 'python')(columns, 17, w), rtol=1e-12)  # ~1e-16 apart


# --- whose directory --------------------------------------------------------------------------------------------
def test_a_directory_others_can_write_is_not_used(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, '_warned', set())
    directory = tmp_path / 'open'
    directory.mkdir(mode=0o777)
    directory.chmod(0o777)
    store = DiskCache(str(directory), 1 << 20)
    with pytest.warns(CacheWarning, match=r'writable by group or others \(mode 0777\)'):
        store.put(KEY, b'code')
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # once per process, not per call
        store.put(KEY, b'code')
        assert store.get(KEY) is None
    assert list(directory.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason='giving a directory to another user needs root')
def test_a_directory_owned_by_another_user_is_not_used(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, '_warned', set())
    directory = tmp_path / 'theirs'
    directory.mkdir(mode=0o700)
    os.chown(directory, 65534, 65534)  # nobody
    with pytest.warns(CacheWarning, match='owned by uid 65534'):
        DiskCache(str(directory), 1 << 20).put(KEY, b'code')
    assert list(directory.iterdir()) == []


def test_links_are_not_followed(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, '_warned', set())
    real = tmp_path / 'real'
    real.mkdir(mode=0o700)
    (tmp_path / 'link').symlink_to(real)
    with pytest.warns(CacheWarning, match='not a directory'):
        DiskCache(str(tmp_path / 'link'), 1 << 20).put(KEY, b'code')
    store = DiskCache(str(real), 1 << 20)
    elsewhere = tmp_path / 'planted'
    elsewhere.write_bytes(cache.pack(KEY, b'code'))
    kernel_file(real).symlink_to(elsewhere)
    with pytest.warns(CacheWarning, match='removed the damaged'):
        assert store.get(KEY) is None
    assert elsewhere.exists() and not kernel_file(real).is_symlink()


@pytest.mark.skipif(os.geteuid() != 0, reason='giving a file to another user needs root')
def test_a_file_owned_by_another_user_is_not_loaded(tmp_path):
    store = DiskCache(str(tmp_path / 'c'), 1 << 20)
    store.put(KEY, b'code')
    os.chown(kernel_file(tmp_path / 'c'), 65534, 65534)
    with pytest.warns(CacheWarning, match='owned by uid 65534'):
        assert store.get(KEY) is None


# --- bounded ------------------------------------------------------------------------------------------------------
def test_the_least_recently_used_go_past_the_cap(tmp_path):
    size = len(cache.pack(KEY, b'x' * 1000))
    store = DiskCache(str(tmp_path), 3 * size)
    keys = [f'{k:064x}' for k in range(10)]
    for k, key in enumerate(keys):
        store.put(key, b'x' * 1000)
        os.utime(kernel_file(tmp_path, key), (1e9 + k, 1e9 + k))  # a clear order, whatever the clock's resolution
        if k == 4:
            assert store.get(keys[2]) is not None  # used again: now the most recent, and kept
    kept = sorted(p.name[:64] for p in tmp_path.iterdir())
    assert kept == sorted([keys[2], keys[8], keys[9]])
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) <= 3 * size


def test_nothing_is_written_to_a_nearly_full_filesystem(tmp_path, monkeypatch):
    full = os.statvfs_result((4096, 4096, 1000, 10, 10, 0, 0, 0, 0, 255))  # 1 % free
    monkeypatch.setattr(os, 'fstatvfs', lambda fd: full)
    DiskCache(str(tmp_path), 1 << 20).put(KEY, b'code')
    assert list(tmp_path.iterdir()) == []


def test_a_cache_of_size_zero_or_no_directory_is_off(tmp_path, monkeypatch):
    """Off: no directory made, neither the one named nor one relative to the working directory."""
    monkeypatch.chdir(tmp_path)
    for store in (DiskCache(str(tmp_path / 'cache'), 0), DiskCache('', 1 << 20)):
        store.put(KEY, b'code')
        assert store.get(KEY) is None
    assert list(tmp_path.iterdir()) == []


def test_a_kernel_is_written_only_where_min_free_stays_free(tmp_path, monkeypatch):
    """The file's own bytes count: 4096 bytes above MIN_FREE (5 % of 1000 blocks of 4096) take a 4096-byte file
    (code + the 88-byte header) and not one byte more. Exact: integers."""
    disk = os.statvfs_result((4096, 4096, 1000, 51, 51, 0, 0, 0, 0, 255))  # 51 blocks free, 50 are MIN_FREE
    monkeypatch.setattr(os, 'fstatvfs', lambda fd: disk)
    assert cache.HEADER.size == 88
    store = DiskCache(str(tmp_path), 1 << 20)
    store.put(KEY, b'x' * (4096 - 88 + 1))
    assert list(tmp_path.iterdir()) == []
    store.put(KEY, b'x' * (4096 - 88))
    assert store.get(KEY) == b'x' * (4096 - 88)


def test_the_warning_names_the_damaged_file_by_its_full_path(tmp_path):
    store = DiskCache(str(tmp_path), 1 << 20)
    kernel_file(tmp_path).write_bytes(b'')
    with pytest.warns(CacheWarning) as caught:
        assert store.get(KEY) is None
    assert [str(w.message) for w in caught] == [
        f'removed the damaged kernel cache file "{kernel_file(tmp_path)}": 0 bytes, shorter than the header; '
        'compiling the kernel again']


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    """A FIFO planted under a kernel's name is opened without blocking, refused as not a regular file, and removed
    (within 10 s; it is instant)."""
    store = DiskCache(str(tmp_path), 1 << 20)
    os.mkfifo(kernel_file(tmp_path), 0o600)
    got = {}

    def read():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            got['code'] = store.get(KEY)
        got['warnings'] = [str(w.message) for w in caught]

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(10)
    try:
        assert not reader.is_alive(), 'get() blocked opening a FIFO'
    finally:
        if reader.is_alive():  # let it go: a writer opening the FIFO unblocks the reader's open
            os.close(os.open(kernel_file(tmp_path), os.O_WRONLY | os.O_NONBLOCK))
            reader.join(10)
    assert got == {'code': None, 'warnings': [f'removed the damaged kernel cache file "{kernel_file(tmp_path)}": '
                                              'not a regular file; compiling the kernel again']}
    assert not kernel_file(tmp_path).exists()


def test_a_file_of_max_file_bytes_is_read_and_a_larger_one_is_not(tmp_path, monkeypatch):
    store = DiskCache(str(tmp_path), 1 << 20)
    store.put(KEY, b'code' * 100)
    size = kernel_file(tmp_path).stat().st_size
    monkeypatch.setattr(cache, 'MAX_FILE', size)
    assert store.get(KEY) == b'code' * 100
    monkeypatch.setattr(cache, 'MAX_FILE', size - 1)
    with pytest.warns(CacheWarning) as caught:
        assert store.get(KEY) is None
    assert [str(w.message) for w in caught] == [
        f'removed the damaged kernel cache file "{kernel_file(tmp_path)}": {size} bytes, more than any kernel; '
        'compiling the kernel again']


def test_a_directory_that_cannot_be_used_is_named_with_the_reason(tmp_path, monkeypatch):
    """The WARNING's whole text: a regular file is 'not a directory' (and is left as it is); a missing parent is
    the OS's reason."""
    monkeypatch.setattr(cache, '_warned', set())
    plain = tmp_path / 'plain'
    plain.write_bytes(b'not a directory')
    missing = tmp_path / 'missing' / 'kernels'
    for path, problem in ((plain, 'it is not a directory'), (missing, 'No such file or directory')):
        store = DiskCache(str(path), 1 << 20)
        with pytest.warns(CacheWarning) as caught:
            store.put(KEY, b'code')
            assert store.get(KEY) is None
        assert [str(w.message) for w in caught] == [
            f'not using the kernel cache directory "{path}": {problem}; kernels are compiled in every connection']
    assert plain.read_bytes() == b'not a directory' and not missing.parent.exists()


def test_a_new_directory_and_its_kernels_are_private_whatever_the_umask(tmp_path):
    umask = os.umask(0)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter('error')
            store = DiskCache(str(tmp_path / 'kernels'), 1 << 20)
            store.put(KEY, b'code')
            assert store.get(KEY) == b'code'
    finally:
        os.umask(umask)
    assert (tmp_path / 'kernels').stat().st_mode & 0o7777 == 0o700
    assert kernel_file(tmp_path / 'kernels').stat().st_mode & 0o7777 == 0o600


def test_a_write_that_fails_leaves_nothing_behind(tmp_path, monkeypatch):
    """An error while the kernel is written (here fsync's EIO) stores nothing and leaves no temporary file behind;
    put returns quietly, and the kernel is compiled again next time."""
    def failing(fd):
        raise OSError(errno.EIO, 'Input/output error')
    store = DiskCache(str(tmp_path), 1 << 20)
    monkeypatch.setattr(cache.os, 'fsync', failing)
    store.put(KEY, b'code')
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == [] and store.get(KEY) is None


def test_a_link_planted_at_the_temporary_name_is_not_followed(tmp_path, monkeypatch):
    """The temporary file is created exclusively, never through a link: a link already at its name (the clock is
    fixed, so the name is known) fails the store and is removed, and the file it points to is not written."""
    monkeypatch.setattr(cache.time, 'monotonic_ns', lambda: 42)
    directory, victim = tmp_path / 'kernels', tmp_path / 'victim'
    directory.mkdir(mode=0o700)
    victim.write_bytes(b'not a kernel')
    (directory / f'.{KEY}.{os.getpid()}.42.tmp').symlink_to(victim)
    DiskCache(str(directory), 1 << 20).put(KEY, b'code')
    assert victim.read_bytes() == b'not a kernel' and list(directory.iterdir()) == []


def test_stale_temporary_files_are_removed_and_others_kept(tmp_path, monkeypatch):
    """A writer's temporary file more than STALE_SECONDS old is removed when a kernel is stored; one exactly that
    old, or younger, may still be written, and is kept (the clock is fixed, so the boundary is exact)."""
    now = 2e9
    monkeypatch.setattr(cache.time, 'time', lambda: now)
    ages = {'.stale.1.2.tmp': cache.STALE_SECONDS + 1, '.boundary.1.2.tmp': cache.STALE_SECONDS,
            '.fresh.1.2.tmp': 10, 'other.TMP': cache.STALE_SECONDS + 1}
    for name, age in ages.items():
        (tmp_path / name).write_bytes(b'half a kernel')
        os.utime(tmp_path / name, (now - age, now - age))
    DiskCache(str(tmp_path), 1 << 20).put(KEY, b'code')
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(['.boundary.1.2.tmp', '.fresh.1.2.tmp',
                                                                 'other.TMP', KEY + cache.SUFFIX])


def test_a_smaller_cap_evicts_down_to_it_in_one_store(tmp_path):
    """pgad.cache_size lowered: the next store removes as many of the least recently used as it takes."""
    size = len(cache.pack(KEY, b'x' * 1000))
    keys = [f'{k:064x}' for k in range(6)]
    for k, key in enumerate(keys[:5]):
        DiskCache(str(tmp_path), 100 * size).put(key, b'x' * 1000)
        os.utime(kernel_file(tmp_path, key), (1e9 + k, 1e9 + k))
    DiskCache(str(tmp_path), 2 * size).put(keys[5], b'x' * 1000)
    assert sorted(p.name[:64] for p in tmp_path.iterdir()) == [keys[4], keys[5]]


def test_a_link_in_the_directory_is_sized_as_a_link(tmp_path):
    """A symbolic link to a large file elsewhere counts as the link, not the file: it does not evict kernels."""
    directory, size = tmp_path / 'kernels', len(cache.pack(KEY, b'x' * 1000))
    store = DiskCache(str(directory), 3 * size)
    store.get(KEY)  # makes the directory
    big = tmp_path / 'big'
    big.write_bytes(b'\0' * (100 * size))
    os.utime(big, (4e9, 4e9))  # newer than any kernel
    kernel_file(directory, 'ef' * 32).symlink_to(big)
    store.put(KEY, b'x' * 1000)
    assert store.get(KEY) == b'x' * 1000
    assert big.stat().st_size == 100 * size


def test_a_file_that_vanishes_during_eviction_does_not_stop_it(tmp_path, monkeypatch):
    """Another backend may remove a file between listing the directory and reading its size: that file is skipped,
    and the rest are still evicted down to the cap."""
    size = len(cache.pack(KEY, b'x' * 1000))
    keys = [f'{k:064x}' for k in range(5)]
    for k, key in enumerate(keys[:4]):
        DiskCache(str(tmp_path), 100 * size).put(key, b'x' * 1000)
        os.utime(kernel_file(tmp_path, key), (1e9 + k, 1e9 + k))
    scandir = os.scandir

    def vanishing_first(fd):
        entries = sorted(scandir(fd), key=lambda e: e.name != keys[0] + cache.SUFFIX)
        os.unlink(entries[0].name, dir_fd=fd)  # listed, then gone
        yield from entries

    monkeypatch.setattr(os, 'scandir', vanishing_first)
    DiskCache(str(tmp_path), 2 * size).put(keys[4], b'x' * 1000)
    assert sorted(p.name[:64] for p in tmp_path.iterdir()) == [keys[3], keys[4]]


WRITER = '''
import sys, warnings
sys.path.insert(0, {root!r})
from pgad.jit.cache import DiskCache
warnings.simplefilter('error')
store, code = DiskCache({directory!r}, 1 << 30), bytes(range(256)) * 4000
for _ in range(150):
    store.put({key!r}, code)
    got = store.get({key!r})
    assert got is None or got == code, 'a half-written file was read'
'''


def test_two_processes_storing_one_key_never_expose_half_a_file(tmp_path):
    script = WRITER.format(root=str(ROOT), directory=str(tmp_path), key=KEY)
    writers = [subprocess.Popen([sys.executable, '-c', script], stderr=subprocess.PIPE) for _ in range(2)]
    assert [(w.wait(), w.stderr.read().decode()) for w in writers] == [(0, ''), (0, '')]
    assert [p.name for p in tmp_path.iterdir()] == [KEY + cache.SUFFIX]
    assert cache.unpack(KEY, kernel_file(tmp_path).read_bytes())[0] == bytes(range(256)) * 4000


def code_of(key, writer, round_):
    """The code writer stores under key in round_: its own length, and bytes that say whose it is throughout."""
    stamp = f'{key}:{writer}:{round_}:'.encode()
    return stamp + hashlib.sha256(stamp).digest() * (3000 + 97 * writer)


def whole(key, code):
    """Is code exactly what some writer stored under key (code_of), not parts of two or a part of one?"""
    stored_key, writer, round_, _ = code.split(b':', 3)
    return stored_key.decode() == key and code == code_of(key, int(writer), int(round_))


def store_and_load(directory, capacity, keys, writer, rounds, start, results):
    """One of the processes: `rounds` times, store this writer's kernel under each key, then load each key;
    results gets (loads that found a whole kernel, loads that found none, loads that found anything else,
    the warnings)."""
    try:
        store, found, missing, wrong = DiskCache(directory, capacity), 0, 0, []
        start.wait()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            for round_ in range(rounds):
                for key in keys:
                    store.put(key, code_of(key, writer, round_))
                for key in keys:
                    code = store.get(key)
                    if code is None:
                        missing += 1
                    elif whole(key, code):
                        found += 1
                    else:
                        wrong.append(code[:80])
        results.put((found, missing, wrong, [str(w.message) for w in caught]))
    except BaseException as e:
        results.put((0, 0, [repr(e)], []))


@pytest.mark.parametrize('keys, capacity', [
    (1, 1 << 30),  # one key, nothing evicted: every load finds a whole kernel
    (2, 150_000),  # two keys in room for one: every store evicts the other key's file while others read it
])
def test_processes_storing_and_loading_one_key_at_once_load_only_whole_kernels(tmp_path, keys, capacity):
    """As the test above, with more writers, each storing code of its own, and evictions: four processes store and
    load the same keys at once, 150 times each; each load finds no kernel or one that a writer stored whole (of that
    writer's length, its bytes all its own), and no file is ever found damaged (no WARNING): a file appears under its
    name only whole (write, fsync, rename). Writing the file in place fails this test (0-byte and short files)."""
    context, processes, rounds = multiprocessing.get_context('fork'), 4, 150
    start, results = context.Barrier(processes), context.Queue()
    names = [f'{k:064x}' for k in range(keys)]
    workers = [context.Process(target=store_and_load, args=(str(tmp_path), capacity, names, k, rounds, start,
                                                            results)) for k in range(processes)]
    [w.start() for w in workers]
    outcomes = [results.get(timeout=120) for _ in workers]
    [w.join() for w in workers]
    found = sum(o[0] for o in outcomes)
    assert [(o[2], o[3]) for o in outcomes] == [([], [])] * processes  # nothing half-written, no damaged file
    assert found + sum(o[1] for o in outcomes) == processes * rounds * keys
    assert found == processes * rounds if keys == 1 else found > 0
    assert not list(tmp_path.glob('*.tmp'))


# --- on a real server -------------------------------------------------------------------------------------------
def kernels(cluster):
    return sorted(pathlib.Path(cluster.kernels).glob('*' + cache.SUFFIX), key=lambda p: p.stat().st_mtime)


def lambda_(salt):
    return f'λ(d, w) (w.a*d.x + w.b - sin(d.x) + {salt})^2'


GRADIENT = ("SELECT pgad.gradient(%s, 'SELECT x / 10.0 AS x FROM generate_series(1, 50) AS x', '{\"a\": 1, \"b\": 2}', "
            "backend => 'llvm')")  # llvm: a small table's single evaluation runs on python under 'auto'


def test_a_damaged_cache_file_does_not_crash_the_server(cluster, dbname):
    salt = uuid.uuid4().int % 10**6
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        started = db.execute('SELECT pg_postmaster_start_time()').fetchone()[0]
        expected = db.execute(GRADIENT, (lambda_(salt),)).fetchone()[0]
    halved, emptied = (lambda data: data[:len(data) // 2]), (lambda data: b'')
    for damage in (halved, emptied, lambda data: data[:-1] + bytes([data[-1] ^ 1])):
        newest = kernels(cluster)[-1]
        newest.write_bytes(damage(newest.read_bytes()))  # as root: the file stays the server's
        notices = []
        with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:  # a new backend: it reads the file
            db.add_notice_handler(lambda diag: notices.append((diag.severity, diag.message_primary)))
            assert db.execute(GRADIENT, (lambda_(salt),)).fetchone()[0] == expected
            assert db.execute('SELECT pg_postmaster_start_time()').fetchone()[0] == started
        assert [severity for severity, message in notices if 'removed the damaged kernel' in message] == ['WARNING']


def test_pgad_cache_size_bounds_the_cache(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute("SET pgad.cache_size = '32kB'")
        for salt in range(40):
            db.execute(GRADIENT, (lambda_(f'{salt}.{uuid.uuid4().int % 1000}'),))
            assert sum(p.stat().st_size for p in kernels(cluster)) <= 32 * 1024
        last = db.execute('SELECT 1').fetchone()
    assert last == (1,) and len(kernels(cluster)) >= 3  # the cache is used: the newest kernels are in it


@pytest.mark.parametrize('owner, mode, problem', [('postgres', 0o777, 'writable by group or others'),
                                                  ('nobody', 0o755, 'not by the server')])
def test_the_server_uses_no_directory_others_could_write(cluster, dbname, owner, mode, problem):
    if os.geteuid() != 0:
        pytest.skip('giving a directory to another user needs root')
    directory = pathlib.Path(cluster.base_dir) / f'kernels_{uuid.uuid4().hex[:8]}'  # where the server can look
    directory.mkdir()
    shutil.chown(directory, owner)
    directory.chmod(mode)
    notices = []
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.add_notice_handler(lambda diag: notices.append(diag.message_primary))
        db.execute("SELECT set_config('pgad.cache_directory', %s, false)", (str(directory),))
        first = db.execute(GRADIENT, (lambda_(uuid.uuid4().int % 10**6),)).fetchone()[0]
        db.execute(GRADIENT, (lambda_(uuid.uuid4().int % 10**6),))
    assert first['a'] != 0 and list(directory.iterdir()) == []
    assert len([n for n in notices if problem in n]) == 1  # once per backend


def test_two_backends_compiling_one_kernel_store_one_whole_file(cluster, dbname):
    lam, results = lambda_(uuid.uuid4().int % 10**6), []

    def compute():
        with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
            results.append(db.execute(GRADIENT, (lam,)).fetchone()[0])
    threads = [threading.Thread(target=compute) for _ in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert len(results) == 2 and results[0] == results[1]
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:  # a third backend loads the file
        notices = []
        db.add_notice_handler(lambda diag: notices.append(diag.message_primary))
        assert db.execute(GRADIENT, (lam,)).fetchone()[0] == results[0] and notices == []
    assert not list(pathlib.Path(cluster.kernels).glob('*.tmp'))
