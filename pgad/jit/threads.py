"""One pool of threads per process, over which a kernel call's rows are split (docs/design.md, Threads).

A call over `rows` rows on n threads is n shares: share k takes the rows rows·k//n … rows·(k+1)//n, with sums of its
own, and the shares' sums are added in the order k = 0 … n−1. The partition depends on (rows, n) alone, so a given
count gives bit-identical results run to run; different counts group the additions differently and agree to
rounding. The calling thread runs share 0 itself and the pool the others, then waits for them, checking for
interrupts at least every WAIT_SECONDS; whatever it raises, it first waits for every share to finish, since they
read the call's arrays.

A pool thread does one thing: it calls a kernel's machine code through ctypes (which releases the GIL) on numpy
memory the calling thread owns and keeps alive until its share has finished. It calls nothing of PostgreSQL — no
plpy, no server.*, no palloc, no ereport, no interrupt check — and every signal is blocked in it from its first
instruction (it is started while the starting thread blocks them all, and inherits that mask), so the server's
signals (cancel, terminate, latches) reach the backend's own thread only. Pool threads are daemons, started when a
call first needs them and kept for the process's life; a call that needs more starts more.
"""
import queue
import signal
import threading

MAX_THREADS = 64        # the most a call may use (pgad.max_threads' bound, extension/pgad.c)
# The fewest rows a share takes: a call over fewer rows per thread runs in the calling thread. Handing shares to the
# pool and waiting for them costs 20–70 µs on the 2-core VM; a linear kernel at P = 8 (1 ns a row, the cheapest)
# broke even on 2 threads between 131K and 262K rows, a logistic one sooner (bench/threads.py); a loop kernel's row
# costs 100 ns or more
SHARE_ROWS = 65_536
LOOP_SHARE_ROWS = 4_096
WAIT_SECONDS = 0.1      # the longest the calling thread waits on the pool between interrupt checks

_ask = None             # a function giving the threads a call may use (server.thread_count in the server); None: 1
_tell = None            # a function that reports what a call used (server.debug), or None
_count = None           # _ask's answer, asked at the first call large enough to split, kept until on_count
_told = set()           # the counts reported since on_count
_jobs = queue.SimpleQueue()
_pool = []


def on_count(ask, tell=None):
    """Have the calls that follow split their rows over ask() threads (asked once, by the first call with enough
    rows), telling tell(message) the first time each count is used; None: one thread. Returns what it replaces, for
    a caller to put back."""
    global _ask, _tell, _count
    replaced = (_ask, _tell)
    _ask, _tell, _count = ask, tell, None
    _told.clear()
    return replaced


def count(rows, share_rows=SHARE_ROWS):
    """The threads a call over rows uses: the count asked for, fewer where a share would have under share_rows."""
    global _count
    most = rows // share_rows
    if most < 2 or _ask is None:
        return 1
    if _count is None:
        _count = max(1, min(int(_ask()), MAX_THREADS))
    return max(1, min(_count, most))


def shares(rows, n):
    """The (start, end) of each of n shares of rows: share k is rows·k//n … rows·(k+1)//n."""
    return [(rows * k // n, rows * (k + 1) // n) for k in range(n)]


def combine(parts):
    """The sums of the shares, added in share order."""
    total = parts[0].copy()
    for part in parts[1:]:
        total += part
    return total


class _Share:
    """One share's work for the pool: work(start, end), its result or the exception it raised, and done."""
    __slots__ = ('work', 'start', 'end', 'result', 'error', 'done')

    def __init__(self, work, start, end):
        self.work, self.start, self.end = work, start, end
        self.result = self.error = None
        self.done = threading.Event()


def _serve():
    """A pool thread: run shares as they come, forever."""
    while True:
        share = _jobs.get()
        try:
            share.result = share.work(share.start, share.end)
        except BaseException as e:  # noqa: BLE001 (handed to the calling thread, which raises it)
            share.error = e
        share.done.set()


def _grow(n):
    """At least n pool threads, each started with every signal blocked: the starting thread blocks them all, starts
    it, and restores its own mask (a signal that arrives meanwhile stays pending for this thread)."""
    while len(_pool) < n:
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        try:
            thread = threading.Thread(target=_serve, name=f'pgad kernel {len(_pool) + 1}', daemon=True)
            thread.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        _pool.append(thread)


def run(work, rows, n, interrupts=None):
    """[work(start, end) for each of n shares of rows], in share order: share 0 in this thread, the others in the
    pool, while this thread checks interrupts() at least every WAIT_SECONDS once its own share is done. Whatever is
    raised here, every share has finished first."""
    if n > 1:
        try:
            _grow(n - 1)
        except RuntimeError:  # the system would start no more threads (its limit on processes): those there are
            n = len(_pool) + 1
    if n <= 1:
        return [work(0, rows)]
    if _tell is not None and n not in _told:
        _told.add(n)
        _tell(f'pgad: a kernel call over {rows} rows on {n} threads')
    first, *rest = shares(rows, n)
    pending = [_Share(work, start, end) for start, end in rest]
    for share in pending:
        _jobs.put(share)
    try:
        results = [work(*first)]
        for share in pending:
            while not share.done.wait(WAIT_SECONDS):
                if interrupts is not None:
                    interrupts()
    finally:
        for share in pending:
            share.done.wait()
    for share in pending:
        if share.error is not None:
            raise share.error
        results.append(share.result)
    return results
