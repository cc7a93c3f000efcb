"""One pool of threads per process, over which a kernel call's rows are split (docs/design.md, Threads).

A call over `rows` rows on n threads is cut in pieces (pieces()): n·k shares of the rows, piece j the rows
rows·j//m … rows·(j+1)//m of m = n·k, each with sums of its own, and the pieces' sums are added in the order
j = 0 … m−1. k is 1 for a cheap kernel (its call is n shares, one a thread), more for a dear one: the fewest that keep
a piece within PIECE_NS by the cost a row estimated from the kernel itself (cost.py), never a clock, so the partition
depends on (rows, n, the kernel) alone and a given count gives bit-identical results run to run; different counts
group the additions differently and agree to rounding. The calling thread and n − 1 pool threads take the pieces in
turn (which thread runs a piece changes no bit: its sums have their own place); the calling thread checks for
interrupts after each of its own pieces, and at least every WAIT_SECONDS while it waits for the others. Whatever it
raises, the pool takes no more pieces and it first waits for those running to finish, since they read the call's
arrays: a cancel waits for about a piece, never for a whole call.

A pool thread does one thing: it calls a kernel's machine code through ctypes (which releases the GIL) on numpy
memory the calling thread owns and keeps alive until its pieces have finished. It calls nothing of PostgreSQL — no
plpy, no server.*, no palloc, no ereport, no interrupt check — and every signal is blocked in it from its first
instruction (it is started while the starting thread blocks them all, and inherits that mask), so the server's
signals (cancel, terminate, latches) reach the backend's own thread only. Pool threads are daemons, started when a
call first needs them and kept for the process's life; a call that needs more starts more. A child of fork() has
none of them (fork copies the calling thread alone): it forgets the parent's and starts its own.
"""
import math
import os
import queue
import signal
import threading

MAX_THREADS = 64        # the most a call may use (pgad.max_threads' bound, extension/module.c)
# The fewest rows a share takes: a call over fewer rows per thread runs in the calling thread. Handing shares to the
# pool and waiting for them costs 20–70 µs on the 2-core VM; a linear kernel at P = 8 (1 ns a row, the cheapest)
# broke even on 2 threads between 131K and 262K rows, a logistic one sooner (bench/threads.py); a loop kernel's row
# costs 100 ns or more
SHARE_ROWS = 65_536
LOOP_SHARE_ROWS = 4_096
WAIT_SECONDS = 0.1      # the longest the calling thread waits on the pool between interrupt checks
# The estimated time of a piece (cost.py), the most a cancel waits for on each thread: a dear kernel's call is cut in
# pieces of about this long. A piece's own cost is a few µs (its sums, its scratch buffer, the ctypes call); a piece
# estimated at PIECE_NS took a fifth of it to 1.3 times it on the 2-core VM (bench/cost.py, cost.py's comment)
PIECE_NS = 20_000_000

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


def pieces(rows, n, row_ns=0.0):
    """The (start, end) of each piece of a call over rows on n threads whose rows take row_ns nanoseconds each, as
    estimated from the kernel (cost.py): n·k shares of the rows, k the fewest that keep a piece's estimate within
    PIECE_NS, but no more pieces than rows. A cheap kernel's call is n pieces, its shares; a dear one's many, so that
    a cancel waits for at most a piece a thread. They depend on (rows, n, row_ns) alone."""
    m = n * max(1, math.ceil(rows * row_ns / (n * PIECE_NS)))
    return shares(rows, m if m <= rows else max(n, rows))


def combine(parts):
    """The sums of the pieces, added in piece order."""
    total = parts[0].copy()
    for part in parts[1:]:
        total += part
    return total


_PENDING = object()


class _Call:
    """A call's pieces, taken in order by whichever of its threads is free (take): each piece's result goes in its
    own place, so which thread ran it changes nothing. With add, the results are summed as they come, in piece
    order (total: ((r0 + r1) + r2) + …, as combine() adds them), so that a call of many pieces holds few of them.
    stop() has the threads take no more pieces."""

    def __init__(self, work, parts, add=False):
        self.work, self.parts, self.add = work, parts, add
        self.results = [_PENDING] * len(parts)
        self.total, self.added = None, 0
        self.error = None
        self.taken = 0
        self.stopped = False
        self.lock = threading.Lock()

    def take(self):
        """The next piece's index, or None when there is none left or the call is stopped."""
        with self.lock:
            if self.stopped or self.taken == len(self.parts):
                return None
            self.taken += 1
            return self.taken - 1

    def stop(self):
        with self.lock:
            self.stopped = True

    def run(self, k):
        result = self.work(*self.parts[k])
        with self.lock:
            self.results[k] = result
            while self.add and self.added < len(self.results) and self.results[self.added] is not _PENDING:
                part, self.results[self.added] = self.results[self.added], None
                if self.total is None:
                    self.total = part.copy()
                else:
                    self.total += part
                self.added += 1


class _Helper:
    """A pool thread's part in a call: pieces until there are none (or the call stops), then done."""
    __slots__ = ('call', 'done')

    def __init__(self, call):
        self.call = call
        self.done = threading.Event()


def _serve():
    """A pool thread: help with calls as they come, forever."""
    while True:
        helper = _jobs.get()
        call = helper.call
        try:
            while (k := call.take()) is not None:
                call.run(k)
        except BaseException as e:  # noqa: BLE001 (handed to the calling thread, which raises it)
            call.error = call.error or e
            call.stop()
        helper.call = call = None  # nothing of the call kept while this thread waits for the next
        helper.done.set()


def started(target, name):
    """A daemon thread running target(), started with every signal blocked: the starting thread blocks them all,
    starts it, and restores its own mask (a signal that arrives meanwhile stays pending for this thread). Every thread
    pgad starts in a backend is started so, and calls nothing of PostgreSQL."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    return thread


def _grow(n):
    """At least n pool threads, each started with every signal blocked (started)."""
    while len(_pool) < n:
        _pool.append(started(_serve, f'pgad kernel {len(_pool) + 1}'))


def run(work, rows, n, interrupts=None, row_ns=0.0):
    """[work(start, end) for each of pieces(rows, n, row_ns)], in piece order: this thread and n − 1 of the pool take
    the pieces in turn, this one checking interrupts() after each of its own, and at least every WAIT_SECONDS once
    none is left while it waits for the others. Whatever is raised here (an interrupt, a piece's error), the pool
    takes no more pieces and every piece running has finished first."""
    return _run(work, rows, n, interrupts, row_ns, False)[0]


def sums(work, rows, n, interrupts=None, row_ns=0.0):
    """combine(run(work, rows, n, interrupts, row_ns)), the same bits, each piece's sums added as soon as those
    before it are: a call holds the sums of the pieces running and of few more, however many it has."""
    return _run(work, rows, n, interrupts, row_ns, True)[1]


def _forget_pool():
    """In a child of fork(): the parent's pool threads are not there, and its queue may hold what they had not
    taken; the child's first call that needs threads starts its own (without this it waits for them for ever)."""
    global _jobs
    _pool.clear()
    _jobs = queue.SimpleQueue()


os.register_at_fork(after_in_child=_forget_pool)


def _run(work, rows, n, interrupts, row_ns, add):
    """(the pieces' results, their sum where add) of run and sums."""
    if n > 1:
        try:
            _grow(n - 1)
        except RuntimeError:  # the system would start no more threads (its limit on processes): those there are
            n = len(_pool) + 1
    n = max(1, n)
    parts = pieces(rows, n, row_ns)
    if len(parts) == 1:  # most calls: no more to it than the work (a call costs a few µs more each way)
        result = work(*parts[0])
        return [result], result
    call = _Call(work, parts, add)
    if n > 1 and _tell is not None and n not in _told:
        _told.add(n)
        _tell(f'pgad: a kernel call over {rows} rows on {n} threads')
    helpers = [_Helper(call) for _ in range(n - 1)]
    for helper in helpers:
        _jobs.put(helper)
    try:
        while (k := call.take()) is not None:
            call.run(k)
            if interrupts is not None:
                interrupts()
        for helper in helpers:
            while not helper.done.wait(WAIT_SECONDS):
                if interrupts is not None:
                    interrupts()
    finally:
        call.stop()
        for helper in helpers:
            helper.done.wait()
    if call.error is not None:
        raise call.error
    return call.results, call.total
