"""Kernel source → a kernel on the GPU, with numba-cuda; the columns copied to the device once per fit.

numba.cuda is imported on first use, never with pgad: without numba-cuda, or with numba's own deprecated
numba.cuda, `backend => 'cuda'` says how to install it; without a GPU or a driver, it says so. Under numba's CUDA
simulator (NUMBA_ENABLE_CUDASIM=1 in the server's environment, read when numba is first imported) the same source
runs in Python threads on the CPU, with numpy's math in place of libdevice's: that is how the tests prove the kernels
without a GPU (docs/testing.md). The simulator is never chosen by 'auto'.

A Kernel is called as every backend's is, kernel(columns, rows, weights) → sums. Given numpy columns it copies
them to the device for that call; place(columns) copies them once and returns the device's copies, which later
calls take as they are: then only the weights (in) and the sums (out) cross the bus per call, in one io array each
way. numba compiles the source for this GPU when the kernel is built, an uninterruptible step: kernels larger than
MAX_NODES are not built ('auto' runs those on the CPU), and a kernel is built only after a trial compile to PTX in
the compiler process (jit/worker.py, which a cancel stops at once) has taken at most IN_PROCESS_SECONDS. PTX alone
(pgad.explain) is compiled there and nowhere else.
"""
import builtins
import ctypes
import functools
import glob
import importlib
import importlib.util
import os
import site
import math
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from ..errors import PgadError
from ..jit import worker
from . import codegen

THREADS = 256          # a block's threads
BLOCKS_PER_SM = 8      # blocks per multiprocessor, at most: enough resident warps to hide the memory's latency
SIMULATED = (4, 2)     # the simulator's threads and blocks: each thread a Python thread; both sums exercised
MAX_NODES = 500        # the largest kernel compiled: numba's typing and NVVM take about 1 s for it (docs/security.md)
# A GPU's kernel is compiled in the backend only when its trial compile to PTX in the compiler process took at most
# IN_PROCESS_SECONDS (check_compile_time); 'auto' picks cuda for at most AUTO_OUTPUTS outputs, whose kernels take
# 0.1 to 0.8 s there (numba's typing and NVVM grow with the outputs: 33 took 0.9 to 1.1 s, 65 took 1.9 to 2.5 s)
IN_PROCESS_SECONDS, AUTO_OUTPUTS = 1.0, 16
PRECISIONS = {'float64': np.float64, 'float32': np.float32}
INSTALL = 'make install CUDA=1 installs numba-cuda and the CUDA libraries into pgad\'s Python environment.'


def cuda():
    """numba-cuda's numba.cuda, or SQLSTATE 0A000 saying how to install it."""
    _as_site()
    try:
        module = importlib.import_module('numba.cuda')
    except ImportError as e:
        raise PgadError('0A000', 'the cuda backend is not installed', detail=f'numba.cuda cannot be imported: {e}.',
                        hint=INSTALL) from None
    if getattr(module, 'implementation', None) != 'NVIDIA':
        raise PgadError('0A000', 'the cuda backend is not installed',
                        detail='numba-cuda is missing: only numba\'s own deprecated numba.cuda is there.', hint=INSTALL)
    return module


# The CUDA libraries of the nvidia-* wheels that numba-cuda loads (NVRTC, nvJitLink, NVVM, the runtime), by their
# paths in the environment numba-cuda is installed in.
WHEEL_LIBRARIES = ('nvidia/cuda_nvrtc/lib/libnvrtc.so.*', 'nvidia/nvjitlink/lib/libnvJitLink.so.*',
                   'nvidia/cuda_nvcc/nvvm/lib64/libnvvm.so*', 'nvidia/cuda_runtime/lib/libcudart.so.*')


@functools.lru_cache(maxsize=None)
def _as_site():
    """Make the environment numba-cuda is installed in work as it would had Python started in it. The server puts
    pgad's environment on sys.path itself (the SQL shims), so its .pth files have not run — numba-cuda's redirects
    numba.cuda to it — and cuda-pathfinder, which looks for the wheels' CUDA libraries in site.getsitepackages()
    (Debian's Python lists its dist-packages there, never a virtual environment's), cannot find them: they are
    loaded here from the environment's own files, where pathfinder finds them loaded. Nothing where Python
    started in the environment."""
    spec = importlib.util.find_spec('numba_cuda')
    if spec is None or not spec.submodule_search_locations:
        return
    packages = os.path.dirname(list(spec.submodule_search_locations)[0])
    if packages in site.getsitepackages():
        return
    site.addsitedir(packages)
    for pattern in WHEEL_LIBRARIES:
        for path in sorted(glob.glob(os.path.join(packages, pattern)))[:1]:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)


def simulated():
    """Does numba.cuda run on numba's CUDA simulator in this process?"""
    from numba.core import config
    return bool(config.ENABLE_CUDASIM)


@functools.lru_cache(maxsize=None)
def _simulator_shares_one_array_per_block():
    """Make the simulator's cuda.shared.array give every thread of a block the same array. numba-cuda's simulator
    (0.30) looks the block's array up by the caller's line and, when it is missing, creates it, with no lock between
    the two: a thread switched out between them (likelier the more loaded the machine) lets another thread create a
    second array, the block's threads then write to two arrays, and the block's sum reads uninitialised memory — a
    wrong loss or gradient, once in a while (tests/test_gpu.py::test_a_blocks_threads_share_one_array_on_the_simulator).
    The same lookup, under a lock; arrays of dynamic size (shape 0) and an alignment go to the simulator's own."""
    from numba.core import types
    from numba.cuda.simulator import kernelapi
    from numba.np import numpy_support
    simulators, lock = kernelapi.FakeCUDAShared.array, threading.Lock()

    def array(self, shape, dtype, alignment=None):
        if shape == 0 or alignment is not None:
            return simulators(self, shape, dtype, alignment)
        caller = sys._getframe(1)
        where = (caller.f_code.co_filename, caller.f_lineno)
        with lock:
            found = self._allocations.get(where)
            if found is None:
                kind = numpy_support.as_dtype(dtype) if isinstance(dtype, types.Type) else dtype
                found = self._allocations[where] = np.empty(shape, kind)
        return found
    kernelapi.FakeCUDAShared.array = array


def device():
    """numba.cuda, once it has a GPU to run on (or the simulator); SQLSTATE 58000 where there is none."""
    module = cuda()
    if not module.is_available():
        why = module.cuda_error() or 'no CUDA GPU was found.'
        raise PgadError('58000', 'no CUDA GPU is available to the server', detail=f'CUDA says: {why}'.rstrip('.') + '.',
                        hint="Use backend => 'llvm' (or 'auto', which runs on the CPU where there is no GPU).")
    return module


def check_size(program):
    """SQLSTATE 54001 where program's kernel is too large to compile within the bound (too_large)."""
    error = too_large(program)
    if error:
        raise error


def too_large(program):
    """The error for a kernel larger than MAX_NODES, or None."""
    nodes = len(program.graph.ancestors(program.outputs))
    if nodes > MAX_NODES:
        return PgadError('54001', f'lambda is too large for the cuda backend: {nodes} nodes with its derivatives',
                         detail=f'The cuda backend compiles at most {MAX_NODES}: numba cannot be interrupted while it '
                                'compiles, and a larger kernel would take it more than a second.',
                         hint="Use backend => 'python', or 'auto'.")
    return None


def namespace(module, precision, constants):
    """The globals the kernel source names: the math, the precision's types and constants, the k<n> constants."""
    real = PRECISIONS[precision]
    if simulated():  # numpy's scalars: NaN and infinity where Python's math would raise
        math_names = dict(exp=np.exp, log=np.log, log10=np.log10, log1p=np.log1p, sqrt=np.sqrt, cbrt=np.cbrt,
                          fabs=np.fabs, fmod=np.fmod, sin=np.sin, cos=np.cos, tan=np.tan, asin=np.arcsin,
                          acos=np.arccos, atan=np.arctan, atan2=np.arctan2, sinh=np.sinh, cosh=np.cosh, tanh=np.tanh)
        cast, float64 = real, np.float64
    else:
        import numba
        math_names = {name: getattr(math, name) for name in codegen.MATH if name != 'cbrt'}
        from numba.cuda import libdevice  # numba types cuda.cbrt only as an attribute of the module cuda
        math_names['cbrt'] = libdevice.cbrtf if precision == 'float32' else libdevice.cbrt
        cast, float64 = getattr(numba, precision), numba.float64
    names = dict(math_names, cuda=module, real=cast, float64=float64, zero=real(0), one=real(1),
                 zero64=np.float64(0))
    assert set(names) == set(codegen.NAMES)
    names.update({k: v if isinstance(v, bool) else real(v) for k, v in constants.items()})
    return names


def arguments(columns, precision, combine='atomic'):
    """The kernel's argument types for numba: rows, io, the columns (contiguous, of the precision), the partials."""
    return (['int64', 'float64[::1]'] + [f'{precision}[::1]'] * columns +
            (['float64[:, ::1]'] if combine == 'partials' else []))


def signature(columns, precision, combine='atomic'):
    return f'void({", ".join(arguments(columns, precision, combine))})'


def _scope(module, program, threads, precision, combine):
    """(source, the functions it defines with their globals) of program's kernel."""
    source, constants = codegen.kernel_source(program, threads, combine)
    return source, functions(source, namespace(module, precision, constants))


def functions(source, names):
    """The Python functions the generated source defines, with names as their globals. The source holds only
    generated identifiers (codegen.py): no user text is executed."""
    scope = dict(names)
    exec(builtins.compile(source, '<pgad cuda kernel>', 'exec'), scope)  # noqa: S102 — generated source only
    return scope


@dataclass
class Compiled:
    kernel: object                              # the Kernel
    source: str                                 # its Python source
    ms: dict = field(default_factory=dict)      # milliseconds per stage: 'source generation', 'compilation'


def compile(program, precision='float64', combine='atomic'):
    """The Compiled kernel of program for this GPU (or the simulator), summing in float64 either way."""
    check_size(program)
    module = device()
    sim = simulated()
    threads = SIMULATED[0] if sim else THREADS
    ms, started = {}, time.perf_counter()
    source, scope = _scope(module, program, threads, precision, combine)
    ms['source generation'] = (time.perf_counter() - started) * 1e3
    started = time.perf_counter()
    columns = len(program.columns)
    if sim:
        _simulator_shares_one_array_per_block()
        launch = module.jit(scope[codegen.KERNEL])
        combine_kernel = module.jit(scope[codegen.COMBINE]) if combine == 'partials' else None
    else:
        check_compile_time(program, module.get_current_device().compute_capability, precision, combine)
        launch = module.jit(signature(columns, precision, combine))(scope[codegen.KERNEL])
        combine_kernel = (module.jit('void(float64[:, ::1], float64[::1])')(scope[codegen.COMBINE])
                          if combine == 'partials' else None)
    ms['compilation'] = (time.perf_counter() - started) * 1e3
    kernel = Kernel(module, launch, combine_kernel, len(program.weights), len(program.outputs), precision, threads,
                    SIMULATED[1] if sim else _blocks(module))
    return Compiled(kernel, source, ms)


def device_name(module):
    if simulated():
        return "numba's CUDA simulator"
    name = module.get_current_device().name
    return name.decode() if isinstance(name, bytes) else name


def _blocks(module):
    return module.get_current_device().MULTIPROCESSOR_COUNT * BLOCKS_PER_SM


def ptx(program, cc, precision='float64', combine='atomic'):
    """The kernel's PTX for compute capability cc, e.g. (9, 0): numba's NVVM needs no GPU for this. Compiled in the
    compiler process (jit/worker.py), which a cancel stops at once."""
    cuda()
    parts, _ = _in_worker(program, cc, precision, combine)
    return parts['ptx'].decode()


def _in_worker(program, cc, precision, combine):
    """({'ptx': bytes}, {'PTX': seconds}) of program's kernel, compiled to PTX for cc in the compiler process."""
    return worker.run(ptx_request(program, cc, precision, combine), 'compiling the cuda kernel',
                      entry=__package__ + '.ptx')


def ptx_request(program, cc, precision='float64', combine='atomic'):
    """What compiling program's kernel to PTX for cc needs, as plain data: the generated source, its constants, the
    argument types and the target; nothing of the user's text."""
    source, constants = codegen.kernel_source(program, THREADS, combine)
    return dict(job='ptx', source=source, constants=constants, precision=precision, cc=list(cc),
                types=f'({", ".join(arguments(len(program.columns), precision, combine))})')


def ptx_here(request):
    """(PTX text, seconds of numba's typing and NVVM) of a ptx_request, compiled in this process: the compiler
    process's job (gpu/ptx.py), and tests/ptx_report.py's, in a process of its own."""
    module = cuda()
    started = time.perf_counter()
    constants = {k: (v if isinstance(v, bool) else float(v)) for k, v in request['constants'].items()}
    scope = functions(request['source'], namespace(module, request['precision'], constants))
    text, _ = module.compile_ptx(scope[codegen.KERNEL], request['types'], cc=tuple(request['cc']))
    return text, time.perf_counter() - started


def check_compile_time(program, cc, precision, combine):
    """SQLSTATE 54001 unless the kernel compiles (typing and NVVM, in the compiler process, where a cancel stops it)
    within IN_PROCESS_SECONDS: what numba then takes again in the backend, where nothing can stop it."""
    check_request_time(ptx_request(program, cc, precision, combine))


def check_request_time(request):
    """check_compile_time's check of a ptx_request's kernel (gpu/scatter.py makes its own request)."""
    _, seconds = worker.run(request, 'compiling the cuda kernel', entry=__package__ + '.ptx')
    if seconds['PTX'] > IN_PROCESS_SECONDS:
        raise PgadError('54001', f'lambda is too large for the cuda backend: its kernel took {seconds["PTX"]:.1f} s '
                                 'to compile',
                        detail=f'numba compiles the kernel in the backend, where it cannot be interrupted, only when '
                               f'a trial compile takes at most {IN_PROCESS_SECONDS} s.',
                        hint="Use backend => 'llvm', or 'auto'.")


class OnDevice(list):
    """Columns copied to the device (Kernel.place): a kernel takes them without copying."""


class Kernel:
    """kernel(columns, rows, weights) → the sums over the rows of the program's outputs, computed on the GPU."""
    whole = True  # descent.evaluate gives it all the rows in one call: a GPU pass over 1e8 rows takes milliseconds

    def __init__(self, module, launch, combine, weights, outputs, precision, threads, blocks):
        self.module, self.launch, self.combine = module, launch, combine
        self.weights, self.outputs, self.precision = weights, outputs, precision
        self.threads, self.blocks = threads, blocks
        self.io = np.zeros(weights + outputs)  # the weights in, the sums out: the bus carries this alone per call

    def place(self, columns):
        """The columns on the device, as the kernel's precision: copied once, for every later call."""
        if isinstance(columns, OnDevice):
            return columns
        arrays = [np.ascontiguousarray(c, dtype=PRECISIONS[self.precision]) for c in columns]
        need = sum(a.nbytes for a in arrays)
        free, total = self.module.current_context().get_memory_info()
        if need > 0.9 * free:
            raise PgadError('53200', f'the data needs {need >> 20} MB on the GPU, more than the {int(free) >> 20} MB '
                                     'free there', hint="Use backend => 'llvm', or train on fewer rows.")
        return OnDevice(self.module.to_device(a) for a in arrays)

    def __call__(self, columns, rows, weights):
        if rows == 0:
            return np.zeros(self.outputs)
        columns = self.place(columns)
        if any(len(c) < rows for c in columns):
            raise ValueError(f'a column has fewer than {rows} rows')
        self.io[:self.weights] = weights
        self.io[self.weights:] = 0.0
        io = self.module.to_device(self.io)
        blocks = max(1, min(self.blocks, -(-rows // self.threads)))
        with warnings.catch_warnings():  # the simulator's numpy scalars warn of the NaN and infinity a GPU gives
            warnings.simplefilter('ignore', RuntimeWarning)
            if self.combine is None:
                self.launch[blocks, self.threads](rows, io, *columns)
            else:
                partials = self.module.device_array((blocks, self.outputs))
                self.launch[blocks, self.threads](rows, io, *columns, partials)
                self.combine[1, min(1024, max(32, self.outputs))](partials, io)
        io.copy_to_host(self.io)
        return self.io[self.weights:].copy()


@functools.lru_cache(maxsize=None)
def present():
    """Is a real GPU (not the simulator) there for 'auto' to pick? Cheap where there is none: numba.cuda is not
    imported unless the NVIDIA driver's device files are there."""
    if not os.path.exists('/dev/nvidiactl'):
        return False
    try:
        module = cuda()
        return not simulated() and module.is_available()
    except PgadError:
        return False
