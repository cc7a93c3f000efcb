"""LLVM IR → machine code for the target CPU, called through ctypes; compiled kernels cached on disk.

optimise() runs llvmlite's new pass manager for the target (targets.py: the host CPU and its features by default,
or a level of x86-64), and the target machine emits an object file, which the disk cache (cache.py) keeps, keyed by
the program's DAG, pgad's code generator, the llvmlite and LLVM versions and the target: a new connection that meets
a lambda it has seen before loads the object and compiles nothing.

LLVM's passes cannot be interrupted, so only a kernel that is provably small (in_process: tens of milliseconds)
is compiled in the server process; every other compile runs in a process of its own (worker.py), which the backend
kills as soon as statement_timeout, pg_cancel_backend or pg_terminate_backend acts, and after worker.WALL_SECONDS.
The optimisation level is chosen by the kernel's size, in tiers (tiers.py), so that a kernel's compile stays in
seconds: loop vectorisation is the costly part (it grows much faster than the kernel: 129 outputs took 2.5 s, 129 exp
terms 14 s), then O3's scheduling of many accumulators. A kernel larger than the last tier is not compiled: 'auto'
runs it on python.
"""
import ctypes
import functools
import glob
import hashlib
import os
import sys
import threading
import time
from dataclasses import dataclass, field, replace

import llvmlite
import llvmlite.binding as llvm
import numpy as np

from . import cache as disk, codegen, cost, frames, loops, targets, threads, tiers, worker
from .. import limits
from ..errors import PgadError
from ..lang import printer
from .codegen import kernel_ir
from .tiers import LOOP_NODES, TIERS, Tier, form, required_tier, tier_of  # noqa: F401  (compiler.X as before)


# The largest kernel compiled in the backend itself (in_process): at most about 60 ms of LLVM on the 2-core VM, where
# starting the compiler process costs 125 ms more than compiling in place (bench/compile.py --worker measures both)
IN_PROCESS_NODES, IN_PROCESS_PRODUCT = 400, 2000


@dataclass
class Compiled:
    kernel: object                              # kernel(columns, rows, weights) → sums, as every backend gives
    tier: Tier = TIERS[0]                       # how it was compiled
    ir: str = ''                                # the IR as generated ('' when loaded from the disk cache)
    optimized_ir: str = ''                      # the IR after optimisation (likewise)
    ms: dict = field(default_factory=dict)      # milliseconds per stage: 'IR generation', 'optimisation', …
    cached: bool = False                        # loaded from the disk cache


def target_machine(level=3):
    """The current target's machine (targets.py) at a code generation level, for optimising and emitting code."""
    target = targets.current()
    return worker.target_machine(level, target.cpu, target.features)


def new_target_machine(level=3):
    """A target machine of its own, for the execution engine, which takes ownership of it and frees it. The engine
    only links the object code it is given, compiled for whichever target: its machine is the host's."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    codegen.link_math()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    return target.create_target_machine(cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(),
                                        opt=level, codemodel='jitdefault', jit=True)


def optimise(ir_text, tier=TIERS[0]):
    """The module of ir_text, optimised in place for the current target at the tier's level (in this process)."""
    target = targets.current()
    return worker.optimise(ir_text, tier.speed_level, tier.vectorise, target.cpu, target.features)


def _toolchain():
    """What else decides the machine code: pgad's code generator and compiler, llvmlite, LLVM, and the target."""
    return _sources() + '\n' + targets.current().key()


@functools.lru_cache(maxsize=None)
def _sources():
    sources = hashlib.sha256()
    package = os.path.dirname(loops.__file__)
    for path in (codegen.__file__, *sorted(glob.glob(os.path.join(package, '*.py'))), frames.__file__, tiers.__file__,
                 worker.__file__, targets.__file__, __file__):
        with open(path, 'rb') as f:
            sources.update(f.read())
    return '\n'.join([sources.hexdigest(), llvmlite.__version__, '.'.join(map(str, llvm.llvm_version_info))])


def cache_key(program):
    """The disk cache's key for program's kernel: its DAG (a loop kernel's: the parsed DAG, the shapes and the
    tape), its column and weight order, and the toolchain."""
    kind = form(program)
    if kind == 'unrolled':
        listing = printer.to_listing(program.graph, program.outputs)
    else:
        listing = '\n'.join([printer.to_listing(program.tensor.graph, [program.tensor.root]), repr(program.dims),
                             kind, str(loops.layout.TILE)])
    what = '\n'.join([listing, repr(program.outputs), repr(program.columns), repr(program.weights), _toolchain()])
    return hashlib.sha256(what.encode()).hexdigest()


def compile(program, cache=disk.NONE):
    """The Compiled kernel of program: from the disk cache when there, else generated, optimised and cached."""
    tier = required_tier(program)
    ms = {}
    started = time.perf_counter()
    key = cache_key(program)
    name = f'pgad_{key[:24]}'  # one name per kernel: every kernel of the process shares one execution engine
    data = cache.get(key)
    ir_text = optimized = ''
    if data is not None:
        ms['cache hit'] = (time.perf_counter() - started) * 1e3
    else:
        kind = form(program)
        ir_text = kernel_ir(program, name) if kind == 'unrolled' else loops.kernel_ir(program, name, kind)
        ms['IR generation'] = (time.perf_counter() - started) * 1e3
        data, optimized = machine_code(program, ir_text, tier, ms)
        frames.check(optimized)  # the stack frame its allocas take: at most frames.MAX_FRAME, else 54001
        cache.put(key, data)
    started = time.perf_counter()
    row_ns = cost.per_row(program, form(program), tier)  # the pieces a call is cut in (threads.py)
    if form(program) == 'unrolled':
        kernel = _load(data, name, len(program.columns), len(program.outputs), row_ns=row_ns)
    else:  # a loop kernel takes an array column as one row-major block
        scalars, arrays = loops.column_arguments(program)
        inner = _load(data, name, len(scalars) + len(arrays), len(program.outputs),
                      scratch=loops.scratch_doubles(program, form(program)), widths=loops.widths(program),
                      share_rows=threads.LOOP_SHARE_ROWS, row_ns=row_ns)
        to_arguments = loops.blocks(program)
        kernel = lambda columns, rows, weights: inner(to_arguments(columns), rows, weights)  # noqa: E731
    ms['load'] = (time.perf_counter() - started) * 1e3
    return Compiled(kernel, tier, ir_text, optimized, ms, cached=not optimized)


def in_process(program):
    """Is program's kernel provably small enough for LLVM to compile it in the backend itself, within tens of
    milliseconds? An unrolled kernel (straight-line code in one loop over the rows) of at most IN_PROCESS_NODES nodes
    and IN_PROCESS_PRODUCT nodes × outputs. Every other compile runs in a process of its own (worker.py), which a
    cancel stops at once; a loop kernel always does: LLVM unrolls and vectorises its loops by their trip counts, so
    its time depends on the shapes (24 layers of 4 × 4 matrices, 76 nodes: 13 s)."""
    if form(program) != 'unrolled' or in_backend():
        return False
    nodes = len(program.graph.ancestors(program.outputs))
    return nodes <= IN_PROCESS_NODES and nodes * len(program.outputs) <= IN_PROCESS_PRODUCT


def in_backend():
    """Is this process a PostgreSQL backend (PL/Python imports plpy before pgad)? There every compile runs in the
    compiler process, however small: LLVM fails assertions on some small kernels and aborts its process (its SLP
    vectoriser, on a 5-weight softmax in forward mode: tests/test_crash_fuzz.py), and a backend that aborts takes
    every session of the server with it."""
    return 'plpy' in sys.modules


def machine_code(program, ir_text, tier, ms, here=None):
    """(object code, the optimised IR) of ir_text at the tier: in this process where `here` (by default
    in_process(program)), else in the compiler process. Adds the milliseconds of each stage to ms."""
    if in_process(program) if here is None else here:
        started = time.perf_counter()
        module = optimise(ir_text, tier)
        optimized = str(module)
        ms['optimisation'] = (time.perf_counter() - started) * 1e3
        started = time.perf_counter()
        data = target_machine(tier.codegen_level).emit_object(module)
        ms['machine code'] = (time.perf_counter() - started) * 1e3
        return data, optimized
    started = time.perf_counter()
    try:
        parts, seconds = worker.run(request(ir_text, tier, optimised_ir=True), 'compiling the kernel')
    except PgadError as e:
        if not getattr(e, 'aborted', False) or not tier.vectorise:
            raise
        # LLVM aborted (an assertion), and its vectorisers are where such crashes were found: the same kernel
        # without them, once
        parts, seconds = worker.run(request(ir_text, replace(tier, vectorise=False), optimised_ir=True),
                                    'compiling the kernel')
    for stage, s in seconds.items():
        ms[stage] = s * 1e3
    ms['compiler process'] = (time.perf_counter() - started) * 1e3 - sum(seconds.values()) * 1e3
    return parts['object'], parts['optimised_ir'].decode()


def request(ir_text, tier, optimised_ir=False, assembly=False):
    """What the compiler process is sent for ir_text at the tier (worker.llvm_job): plain data."""
    target = targets.current()
    return dict(job='llvm', ir=ir_text, speed_level=tier.speed_level, vectorise=tier.vectorise,
                codegen_level=tier.codegen_level, cpu=target.cpu, features=target.features,
                optimised_ir=optimised_ir, assembly=assembly)


@functools.lru_cache(maxsize=None)
def engine():
    """The process's one execution engine, into which every kernel's object code is loaded."""
    return llvm.create_mcjit_compiler(llvm.parse_assembly(''), new_target_machine())


_loaded = {}


def address(object_code, name, names=()):
    """The address of function `name` of object_code (and of each of names, its other functions), loaded into the
    process's execution engine the first time name is asked for."""
    if name not in _loaded:
        engine().add_object_file(llvm.ObjectFileRef.from_data(object_code))
        engine().finalize_object()
        for n in (name, *names):
            _loaded[n] = engine().get_function_address(n)
    return _loaded[name]


def _load(object_code, name, columns, outputs, scratch=None, widths=None, share_rows=threads.SHARE_ROWS, row_ns=0.0):
    """A Python callable for the kernel `name` in object_code: kernel(columns, rows, weights) → sums. Argument k
    holds widths[k] doubles a row (None: one each). A loop kernel takes a scratch buffer of `scratch` doubles as its
    last argument: allocated here, on the heap, once a call and thread (its buffers grow with the shapes, and a
    backend's stack is 8 MB), and freed with the call, error or not.

    A call's rows are split over the pool's threads (threads.py) where each share has at least share_rows rows, and
    cut in pieces of about threads.PIECE_NS by row_ns, a row's estimated nanoseconds (cost.py), so that a cancel
    waits for a piece, not the call: each piece calls the machine code on its own rows — each argument's address
    offset by its first row — with sums of its own and its thread's scratch buffer, and the pieces' sums are added
    in order."""
    address(object_code, name)
    signature = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                                 *[ctypes.c_void_p] * (columns + (scratch is not None)))
    function = signature(_loaded[name])
    widths = widths or [1] * columns

    def kernel(column_arrays, rows, weights):
        w = np.ascontiguousarray(weights, dtype=np.float64)
        # the machine code reads `rows` float64s in a row from each column's address: a strided view is copied
        # (the loader's and descent's columns are contiguous already, and pass through as they are)
        arrays = [np.ascontiguousarray(c, dtype=np.float64) for c in column_arrays]
        if any(len(a) < rows * width for a, width in zip(arrays, widths)):
            raise ValueError(f'a column has fewer than {rows} rows')
        addresses = [a.ctypes.data for a in arrays]
        # a thread's scratch buffer serves each piece it runs (the kernel sets what it reads of it): a new buffer a
        # piece cost its page faults, 3–4 ns a double, 0.4 ms a piece for 32 × 32 matrix products
        buffers = {}  # a thread's id → its buffer (a dict's get and set are atomic)

        def piece(start, end):  # may run in a pool thread: numpy and the machine code only (threads.py)
            sums = np.zeros(outputs, dtype=np.float64)
            pointers = [address + 8 * start * width for address, width in zip(addresses, widths)]
            if scratch is not None:
                buffer = buffers.get(threading.get_ident())
                if buffer is None:  # freed with the call
                    buffer = buffers[threading.get_ident()] = np.empty(max(1, scratch), dtype=np.float64)
                pointers.append(buffer.ctypes.data)
            function(end - start, w.ctypes.data, sums.ctypes.data, *pointers)
            return sums
        return threads.sums(piece, rows, threads.count(rows, share_rows), limits.check, row_ns)
    return kernel
