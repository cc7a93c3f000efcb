"""Bounds on the work a lambda's text can cause: its size, and the interrupt checks inside the work.

Every stage from text to machine code takes time and memory that grow with the lambda, inside a backend that other
sessions share. Two settings bound it (defined in extension/module.c, changed by a superuser only, read per call by
server.settings()): pgad.max_lambda_bytes, checked on the text before anything is parsed, and
pgad.max_lambda_nodes, checked as the DAG grows, derivatives included. Past either: SQLSTATE 54001.

Work that grows with the lambda calls tick() once per unit (a node built, visited, printed, emitted). Every
TICKS units it looks at the clock, and once CHECK_SECONDS have passed it calls the interrupt check that
server.entry installs, so statement_timeout, pg_cancel_backend and pg_terminate_backend act within a fraction of a
second. Outside the server nothing is installed, and tick() only counts.
"""
import time
from dataclasses import dataclass

from .errors import PgadError

STATEMENT_TOO_COMPLEX = '54001'
TICKS = 64
CHECK_SECONDS = 0.02


@dataclass(frozen=True)
class Limits:
    lambda_bytes: int = 1 << 20     # pgad.max_lambda_bytes
    lambda_nodes: int = 100_000     # pgad.max_lambda_nodes


DEFAULT = Limits()


def too_large(message, setting, limit, unit=''):
    """The error past a limit: what was too large, and the setting that holds the limit."""
    return PgadError(STATEMENT_TOO_COMPLEX, message, detail=f'The limit, {setting}, is {limit}{unit}.',
                     hint=f'Write a smaller lambda, or have a superuser raise {setting}.')


def check_text(text, limits):
    """The lambda's text must fit pgad.max_lambda_bytes: checked before anything else is done with it."""
    size = len(text.encode('utf-8', 'surrogatepass'))
    if size > limits.lambda_bytes:
        raise too_large(f'lambda is too long: {size} bytes', 'pgad.max_lambda_bytes', limits.lambda_bytes, ' bytes')


_interrupts = None
_count = 0
_checked = 0.0


def on_interrupts(check):
    """Have tick() call check() (server.check_interrupts inside the server), or nothing when check is None; returns
    the check it replaces, for a caller to put back."""
    global _interrupts
    replaced, _interrupts = _interrupts, check
    return replaced


def check():
    """Check for interrupts now: the check on_interrupts installed, or nothing."""
    if _interrupts is not None:
        _interrupts()


def tick(units=1):
    """units of work done: now and then, a check for interrupts."""
    global _count, _checked
    _count += units
    if _count >= TICKS and _interrupts is not None:
        _count = 0
        now = time.monotonic()
        if now - _checked >= CHECK_SECONDS:
            _checked = now
            _interrupts()
