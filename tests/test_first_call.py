"""What a session's first pgad call imports and starts (issue 38, docs/performance.md "The first call"): guarded by
what is imported, never by a timing.

- Importing the pgad package imports neither numpy nor llvmlite nor the lambda language: the compiler process
  (`python -m pgad.jit.worker`) imports the package, and its start is part of every first compile.
- The compiler process runs without the site module (-S): not the .pth files of pgad's environment (numba-cuda's
  redirectors), which took 40 ms of its start; its path is pgad's folder, llvmlite's and the standard library's.
- A first pgad.loss in a backend imports none of the stored models' modules (training, the catalog, summary,
  evaluate, forecast, importance) nor pgad.explain.
"""
import json
import subprocess
import sys

import psycopg

from pgad.jit import worker

HEAVY = ('numpy', 'llvmlite', 'numba', 'scipy', 'pgad.lambda', 'pgad.lang')
MODELS = ('pgad.models.training', 'pgad.models.catalog', 'pgad.models.summary', 'pgad.models.evaluate',
          'pgad.models.forecast', 'pgad.models.importance', 'pgad.explain')
REQUEST = {'job': 'llvm'}


def modules_of(argv, env=None, cwd=None):
    """The top of sys.modules after a Python program, argv, prints it as JSON."""
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=60)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout))


LIST = 'import sys, json; print(json.dumps(sorted(sys.modules)))'


def test_importing_pgad_imports_nothing_heavy():
    found = modules_of([sys.executable, '-c', 'import pgad, pgad.jit, pgad.jit.worker; ' + LIST])
    assert {'pgad', 'pgad.jit.worker'} <= found
    assert not {m for m in found if m.split('.')[0] in HEAVY or m.startswith(HEAVY)}


def test_pgad_lang_is_bound_when_first_imported():
    found = modules_of([sys.executable, '-c', 'import sys, pgad.lang.parser, pgad; '
                        'assert pgad.lang is sys.modules["pgad.lambda"]; '
                        'assert sys.modules["pgad.lang.rules"] is sys.modules["pgad.lambda.rules"]; ' + LIST])
    assert {'pgad.lambda.parser', 'pgad.lang.parser'} <= found


def test_the_compiler_process_starts_without_site_and_imports_only_its_own():
    """The child's own interpreter, flags, environment and working directory, running -c instead of -m."""
    argv = worker.command()
    flags = argv[:argv.index('-m')]
    assert '-S' in flags and flags[1:3] == ['-P', '-s']
    found = modules_of([*flags, '-c', 'import pgad.jit.worker; ' + LIST], env=worker.environment(REQUEST),
                       cwd=worker.CWD)
    assert 'pgad.jit.worker' in found and 'site' not in found
    assert not {m for m in found if 'redirector' in m or m.split('.')[0] in HEAVY or m.startswith(HEAVY)}


def test_the_ptx_compiler_process_keeps_its_site():
    """numba-cuda is found through its .pth redirector: the PTX job's child runs the site module."""
    assert '-S' not in worker.command('pgad.gpu.ptx')


def test_a_first_pgad_loss_imports_no_model_module(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute('CREATE TABLE IF NOT EXISTS first_points AS SELECT g::float8 AS x, 2 * g + 1 AS y '
                   'FROM generate_series(1, 300) g')
    notices = []
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:  # a new session
        db.add_notice_handler(lambda d: notices.append(d.message_primary))
        assert db.execute("SELECT pgad.loss('λ(d, w) (w.a*d.x + w.b - d.y)^2', 'first_points', "
                          "'{\"a\": 2, \"b\": 1}')").fetchone()[0] == 0
        db.execute('DO $$\nimport sys, json\nplpy.notice(json.dumps(sorted(sys.modules)))\n$$ LANGUAGE plpython3u')
    found = set(json.loads(notices[-1]))
    assert {'pgad.api', 'pgad.calls', 'numpy'} <= found  # the session's pgad, seen from the same interpreter
    assert not found & set(MODELS)


def test_a_first_pgad_loss_of_a_small_table_imports_no_llvm(cluster, dbname):
    """A single evaluation of a small table runs on python under 'auto' (backends.ONCE_COST): a new session's first
    pgad.loss and pgad.gradient import no llvmlite, and give the python backend's sums exactly."""
    loss, data, start = 'λ(d, w) (w.a*d.x + w.b - d.y)^2', 'first_small', '{"a": 1.5, "b": 0.25}'
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute('CREATE TABLE IF NOT EXISTS first_small AS SELECT g / 7.0::float8 AS x, sin(g)::float8 AS y '
                   'FROM generate_series(1, 300) g')
        python = db.execute("SELECT pgad.loss(%s, %s, %s), pgad.gradient(%s, %s, %s, backend => 'python')::text",
                            (loss, data, start, loss, data, start)).fetchone()
    notices = []
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:  # a new session
        db.add_notice_handler(lambda d: notices.append(d.message_primary))
        got = db.execute("SELECT pgad.loss(%s, %s, %s), pgad.gradient(%s, %s, %s)::text",
                         (loss, data, start, loss, data, start)).fetchone()
        db.execute('DO $$\nimport sys, json\nplpy.notice(json.dumps(sorted(sys.modules)))\n$$ LANGUAGE plpython3u')
    assert got == python
    found = set(json.loads(notices[-1]))
    assert 'pgad.api' in found and not {m for m in found if m.startswith(('llvmlite', 'pgad.jit.compiler'))}
