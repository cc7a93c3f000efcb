"""pgad: automatic differentiation and gradient descent inside PostgreSQL.

A call flows: SQL shim (extension/sql) → api.py (arguments; calls.py, a call's stages) → loader.py (columns into
numpy) → lang.parser (text → DAG) → lang.forward / lang.reverse (derivative DAG) → backends.py (kernel) →
models/descent.py (iterations; models/training.py for pgad.train) → result.

Importing the package itself imports nothing heavy: the compiler process (`python -m pgad.jit.worker`) imports it
and needs only llvmlite. The lambda language, pgad/lambda/, is bound as pgad.lang by pgad/lang.py when first
imported.
"""
import signal
import sys

__version__ = '0.22.0'

# In a backend (PL/Python imports plpy before pgad), numpy comes first, with every signal blocked: numpy's BLAS
# starts its threads as numpy is first imported, and a thread starts with its starter's signal mask, so they never
# run the backend's signal handlers, as pgad's own threads never do (jit/threads.py)
if 'plpy' in sys.modules:
    _mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        import numpy  # noqa: F401
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, _mask)
