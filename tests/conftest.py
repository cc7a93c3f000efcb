"""One real PostgreSQL cluster for the whole test session (testing.postgresql, started by the tests themselves),
with pgad installed by `make install` and a fresh database per test module.

Without an NVIDIA GPU the cuda backend runs on numba's CUDA simulator, in the tests and in every server they start:
NUMBA_ENABLE_CUDASIM is set here, before anything imports numba, and the servers inherit it. With a GPU (its
driver's /dev/nvidiactl) the same tests run on it."""
import contextlib
import json
import os
import subprocess
import tracemalloc
import uuid

GPU = os.path.exists('/dev/nvidiactl')
os.environ.setdefault('NUMBA_ENABLE_CUDASIM', '0' if GPU else '1')

import psycopg
import pytest

from pgad.throwaway import Cluster

# The llvm backend's target (pgad/jit/targets.py): PGAD_LLVM_TARGET names it to the kernels compiled here and, as
# pgad.llvm_target, to the cluster's servers; `make test` runs the equality tests (EQUALITY_TESTS in the Makefile)
# once more for each of x86-64, x86-64-v3 and x86-64-v4, each skipped whole on a CPU that cannot run it
LLVM_TARGET = os.environ.get('PGAD_LLVM_TARGET')


# `make mutation MUTATION_SCOPE=models` (tools/mutation.sh) sets PGAD_MUTATION_HITS: the server it starts imports
# the mutated modules (tools/mutation_server/), and each backend runs the mutant that this test process runs
# (MUTANT_UNDER_TEST, which mutmut sets) because the options of every connection say so. In mutmut's 'stats' run the
# backends write the names of the mutated functions they called to a file of this process's own, and each test's are
# handed to mutmut as functions the test called: for each mutant, mutmut runs the tests that call its function.
MUTATION_HITS = os.environ.get('PGAD_MUTATION_HITS')


def _hits_file():
    return os.path.join(MUTATION_HITS, str(os.getpid()))


def unrunnable():
    """Why this CPU cannot run PGAD_LLVM_TARGET (the features it lacks), or None."""
    from pgad.errors import PgadError
    from pgad.jit import targets
    try:
        targets.named(LLVM_TARGET or targets.HOST)
    except PgadError as e:
        return e.message
    return None


def pytest_report_header(config):
    why = unrunnable()
    return f'llvm target: {LLVM_TARGET or "host"}' + (f' — every test skipped: {why}' if why else '')


def pytest_collection_modifyitems(config, items):
    """Under a PGAD_LLVM_TARGET this CPU cannot run, every test is skipped with the reason. A mutant's tests run
    fastest first (mutmut runs them with -x, in the order of a set): the first that fails ends them."""
    why = unrunnable()
    if why:
        for item in items:
            item.add_marker(pytest.mark.skip(reason=why))
    if MUTATION_HITS and os.environ.get('MUTANT_UNDER_TEST') not in (None, '', 'stats', 'none'):
        with open(os.path.join(os.environ['PGAD_MUTATION_DIR'], 'mutants', 'mutmut-stats.json')) as f:
            took = json.load(f)['duration_by_test']
        items.sort(key=lambda item: took.get(item.nodeid, 0.0))


def pytest_configure(config):
    if MUTATION_HITS:
        os.environ['PGOPTIONS'] = (f'-c mutmut.mutant={os.environ.get("MUTANT_UNDER_TEST", "")} '
                                   f'-c mutmut.hits={_hits_file()}')


@pytest.hookimpl(tryfirst=True)  # before mutmut's own, which takes the functions the test called
def pytest_runtest_teardown(item):
    """The functions the test called in the server join those it called in process; then those of modules whose
    mutants are not to run this test's file ([tool.pgad.mutation.tests] of the run's pyproject.toml) are dropped."""
    if not MUTATION_HITS or os.environ.get('MUTANT_UNDER_TEST') != 'stats':
        return
    import tomllib
    from mutmut.state import state
    try:
        with open(_hits_file(), 'r+') as hits:
            state()._stats.update(hits.read().split())
            hits.truncate(0)
    except FileNotFoundError:
        pass
    with open(os.path.join(os.environ['PGAD_MUTATION_DIR'], 'pyproject.toml'), 'rb') as f:
        files = tomllib.load(f)['tool']['pgad']['mutation']['tests']
    test_file = item.nodeid.split('::')[0]
    for name in list(state()._stats):
        module = name.rsplit('.', 1)[0]
        if module in files and test_file not in files[module]:
            state()._stats.discard(name)


def peak_bytes(call):
    """The most memory call() allocates (tracemalloc's peak) when run a second time: the first compiles."""
    call()
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@contextlib.contextmanager
def heard(db, whole=False):
    """The primary messages of the notices and warnings the connection db gets within the block (a list, filled as
    they come), or whole, each as (severity, message, detail, hint); the handler is removed after it."""
    said = []

    def hear(notice):
        said.append((notice.severity_nonlocalized, notice.message_primary, notice.message_detail,
                     notice.message_hint) if whole else notice.message_primary)
    db.add_notice_handler(hear)
    try:
        yield said
    finally:
        db.remove_notice_handler(hear)


def calls_of(monkeypatch, owner, name):
    """The arguments of each call of owner.name from here on (it still runs)."""
    calls, real = [], getattr(owner, name)

    def recorded(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)
    monkeypatch.setattr(owner, name, recorded)
    return calls


def used_two(told):
    """Did a kernel call split over two threads, by the messages threads.py told (not merely were two asked for)?"""
    return any(message.endswith(' on 2 threads') for message in told)


class Running:
    """A cluster that is already running on 127.0.0.1 at port (make mutation starts one for all its test processes)."""

    def __init__(self, port):
        self.settings = {'port': port}

    def conninfo(self, dbname='test', user='postgres'):
        return f'host=127.0.0.1 port={self.settings["port"]} dbname={dbname} user={user}'


@pytest.fixture(scope='session')
def cluster():
    """The session's cluster: a new one, or with PGAD_TEST_PORT set, the one running there (its tests' databases
    are dropped after them)."""
    if os.environ.get('PGAD_TEST_PORT'):
        yield Running(int(os.environ['PGAD_TEST_PORT']))
        return
    with Cluster(server_settings={'pgad.llvm_target': LLVM_TARGET} if LLVM_TARGET else None) as pg:
        yield pg


def new_database(cluster, prefix='pgad'):
    """The name of a new, empty database on cluster."""
    name = f'{prefix}_{uuid.uuid4().hex[:8]}'
    with psycopg.connect(cluster.conninfo('postgres'), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE {name}')
    return name


@contextlib.contextmanager
def restored(cluster, dbname):
    """A connection to a new database of cluster where database dbname's pg_dump was restored by psql (stopping at
    its first error); the database is dropped after."""
    target = new_database(cluster, 'restored')
    port = str(cluster.settings['port'])
    dump = subprocess.run(['pg_dump', '-h', '127.0.0.1', '-p', port, '-U', 'postgres', '-d', dbname],
                          capture_output=True, text=True, check=True).stdout
    try:
        subprocess.run(['psql', '-h', '127.0.0.1', '-p', port, '-U', 'postgres', '-d', target, '-v', 'ON_ERROR_STOP=1',
                        '-q'], input=dump, capture_output=True, text=True, check=True)
        with psycopg.connect(cluster.conninfo(target), autocommit=True) as copy:
            yield copy
    finally:
        with psycopg.connect(cluster.conninfo('postgres'), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE {target} WITH (FORCE)')


@pytest.fixture(scope='module')
def dbname(cluster):
    name = new_database(cluster)
    with psycopg.connect(cluster.conninfo(name), autocommit=True) as db:
        db.execute('CREATE EXTENSION pgad CASCADE')
    yield name
    if isinstance(cluster, Running):  # a cluster that outlives the session keeps no database of it
        with psycopg.connect(cluster.conninfo('postgres'), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE {name} WITH (FORCE)')


@pytest.fixture
def db(cluster, dbname):
    """A connection in autocommit mode to the module's database, where pgad is installed."""
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as conn:
        yield conn


@pytest.fixture
def thread_count():
    """threads.count asks for n threads (pgad.max_threads in the server), put back after; thread_count.told holds
    what the calls reported ('pgad: a kernel call over R rows on N threads')."""
    from pgad.jit import threads
    replaced = []

    def use(n):
        replaced.append(threads.on_count(lambda: n, use.told.append))
    use.told = []
    yield use
    for r in reversed(replaced[:1]):
        threads.on_count(*r)


@contextlib.contextmanager
def settings(db, values):
    """values ({setting: value}) SET on db for the with block, and RESET after it."""
    for name, value in values.items():
        db.execute(f"SET {name} = '{value}'")
    try:
        yield
    finally:
        for name in values:
            db.execute(f'RESET {name}')


def error_of(db, sql, params=None):
    """The psycopg error that running sql raises (the test fails if it raises none)."""
    with pytest.raises(psycopg.Error) as caught:
        db.execute(sql, params)
    return caught.value.diag
