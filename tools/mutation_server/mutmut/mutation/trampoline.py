"""mutmut's trampoline (mutmut/mutation/trampoline.py of mutmut 3.8.1, which each mutated module imports), as a
backend of the server of `make mutation MUTATION_SCOPE=models` runs it (see ../../sitecustomize.py).

Which mutant runs is the connection's setting mutmut.mutant (tests/conftest.py passes MUTANT_UNDER_TEST there in
PGOPTIONS), read once, when the first mutated module is imported: a backend serves one connection, whose options do
not change. Its values are mutmut's: '' (the original code), 'fail' (every mutated function fails: mutmut checks that
the tests see it), 'stats' (the original code, and the name of each function called is written to the file that
the setting mutmut.hits names, which tests/conftest.py hands to mutmut as the test's hits), or a mutant's name.

A mutant may loop forever (bisection's `while high - low > 1e-6` made `high + low`), in Python code that never
reaches a PostgreSQL interrupt check, where statement_timeout and pg_cancel_backend cannot stop it, and the backend
would outlive the test process mutmut kills: a thread of the backend raises TimeoutError in it once a call of a
mutated function has run for LIMIT seconds (and every 5 s after, if the code catches it), so that the call ends with an
ERROR.
"""
import ctypes
import inspect
import os
import signal
import threading
import time
from functools import wraps
from typing import Annotated, Callable

MutantDict = Annotated[dict[str, Callable], 'Mutant']
LIMIT = float(os.environ.get('PGAD_MUTATION_CALL_LIMIT', '60'))  # seconds


def _settings():
    """(mutant, hits file) of this backend's connection; outside a backend, MUTANT_UNDER_TEST and no file."""
    try:
        import plpy
        row = plpy.execute("SELECT pg_catalog.current_setting('mutmut.mutant', true) AS mutant, "
                           "pg_catalog.current_setting('mutmut.hits', true) AS hits")[0]
    except ImportError:
        return os.environ.get('MUTANT_UNDER_TEST', ''), None
    os.environ['MUTANT_UNDER_TEST'] = row['mutant'] or ''  # for any process the backend starts
    return row['mutant'] or '', row['hits'] or None


MUTANT, HITS = _settings()


class _Calls:
    """The outermost call of a mutated function running now in this backend's main thread: when it started."""
    depth = 0
    since = None
    main = threading.get_ident()
    last_hit = None
    hits = None


def _watch():
    signal.pthread_sigmask(signal.SIG_BLOCK, set(signal.Signals))  # the backend's signals stay the main thread's
    while True:
        time.sleep(1)
        if _Calls.since is not None and time.monotonic() - _Calls.since > LIMIT:
            _Calls.since += 5  # again in 5 s, if the code caught it
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(_Calls.main), ctypes.py_object(TimeoutError))


threading.Thread(target=_watch, name='mutmut watch', daemon=True).start()


def _hit(name):
    """Record that the function name was called (MUTANT 'stats'), once in a row."""
    if HITS is None or name == _Calls.last_hit:
        return
    if _Calls.hits is None:
        _Calls.hits = os.open(HITS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(_Calls.hits, (name + '\n').encode())
    _Calls.last_hit = name


def _call(function, args, kwargs):
    _Calls.depth += 1
    if _Calls.depth == 1:
        _Calls.since = time.monotonic()
    try:
        return function(*args, **kwargs)
    finally:
        _Calls.depth -= 1
        if _Calls.depth == 0:
            _Calls.since = None


def wrap_in_trampoline(mutants_dict, is_classmethod=False):
    """The decorator mutmut puts on each mutated function: calls go to the original or to the mutant MUTANT."""
    def mutmut_mutated(decorated):
        module = decorated.__module__

        def trampoline(*args, **kwargs):
            original = mutants_dict['_mutmut_orig']
            call_args = list(args)
            if is_classmethod:
                call_args = call_args[1:]
                original = getattr(args[0], original.__name__)
            if MUTANT == 'fail':
                raise RuntimeError('mutmut: a mutated function was called (the check that the tests see a failure)')
            if MUTANT == 'stats':
                _hit(f'{module}.{original.__name__.partition("__mutmut_")[0]}')
            owner, _, name = MUTANT.rpartition('.')
            function = mutants_dict.get(name) if owner == module else None
            if function is None:
                function = original
            elif is_classmethod:
                function = getattr(args[0], function.__name__)
            return _call(function, call_args, kwargs)

        if inspect.isgeneratorfunction(decorated):
            @wraps(decorated)
            def wrapper(*args, **kwargs):
                return (yield from trampoline(*args, **kwargs))
        else:
            @wraps(decorated)
            def wrapper(*args, **kwargs):
                return trampoline(*args, **kwargs)
        return wrapper

    return mutmut_mutated
