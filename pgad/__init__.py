"""pgad: automatic differentiation and gradient descent inside PostgreSQL.

A call flows: SQL shim (extension/sql) → api.py (arguments; calls.py, a call's stages) → loader.py (columns into
numpy) → lang.parser (text → DAG) → lang.forward / lang.reverse (derivative DAG) → backends.py (kernel) →
models/descent.py (iterations; models/training.py for pgad.train) → result.
"""
import importlib
import signal
import sys

__version__ = '0.17.0'

# numpy's BLAS starts its threads as numpy is first imported, and a thread starts with its starter's signal mask:
# imported with every signal blocked, they never run the backend's signal handlers, as pgad's own threads never do
# (jit/threads.py)
_mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
try:
    import numpy  # noqa: F401
finally:
    signal.pthread_sigmask(signal.SIG_SETMASK, _mask)

# The lambda language lives in pgad/lambda/, and `lambda` is a Python keyword: bind it once, here, as pgad.lang.
# Every stage module is registered under both names, so pgad.lang.rules is the very module pgad.lambda.rules.
lang = importlib.import_module(__name__ + '.lambda')
for _name, _module in list(sys.modules.items()):
    if _name == __name__ + '.lambda' or _name.startswith(__name__ + '.lambda.'):
        sys.modules[_name.replace('.lambda', '.lang', 1)] = _module
