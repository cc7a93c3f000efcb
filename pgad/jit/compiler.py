"""LLVM IR → machine code for this CPU, called through ctypes; compiled kernels cached on disk.

optimise() runs llvmlite's new pass manager at speed level 3 with loop and SLP vectorisation, for the host CPU
and its features. machine_code() emits an object file, which the disk cache keeps, keyed by the IR, the llvmlite
and LLVM versions and the CPU: a new connection that meets a lambda it has seen before loads the object and
compiles nothing. The cache directory is $PGAD_CACHE_DIR, else /var/cache/pgad (made by `make install`, owned
by the server's OS user); where it cannot be written, kernels are simply compiled again.
"""
import ctypes
import functools
import hashlib
import os
import time
from dataclasses import dataclass, field

import llvmlite
import llvmlite.binding as llvm
import numpy as np

from . import codegen
from ..lang import printer
from .codegen import kernel_ir

CACHE_DIR = os.environ.get('PGAD_CACHE_DIR', '/var/cache/pgad')


@dataclass
class Compiled:
    kernel: object                              # kernel(columns, rows, weights) → sums, as every backend gives
    ir: str = ''                                # the IR as generated ('' when loaded from the disk cache)
    optimized_ir: str = ''                      # the IR after optimisation (likewise)
    ms: dict = field(default_factory=dict)      # milliseconds per stage: 'IR generation', 'optimisation', …
    cached: bool = False                        # loaded from the disk cache


@functools.lru_cache(maxsize=None)
def target_machine():
    """The host CPU's target machine, for optimising and emitting code (one per process)."""
    return new_target_machine()


def new_target_machine():
    """A target machine of its own, for an execution engine, which takes ownership of it and frees it."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    codegen.link_math()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    return target.create_target_machine(cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(),
                                        opt=3, codemodel='jitdefault', jit=True)


def optimise(ir_text):
    """The module of ir_text, optimised in place for this CPU (O3, loop and SLP vectorisation)."""
    module = llvm.parse_assembly(ir_text)
    module.verify()
    tm = target_machine()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    builder = llvm.create_pass_builder(tm, pto)
    builder.getModulePassManager().run(module, builder)
    return module


@functools.lru_cache(maxsize=None)
def _toolchain():
    """What else decides the machine code: pgad's code generator, llvmlite, LLVM, and this CPU."""
    with open(codegen.__file__, 'rb') as f:
        generator = hashlib.sha256(f.read()).hexdigest()
    return '\n'.join([generator, llvmlite.__version__, '.'.join(map(str, llvm.llvm_version_info)),
                      llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()])


def cache_key(program):
    """The disk cache's key for program's kernel: its DAG, its column and weight order, and the toolchain."""
    listing = printer.to_listing(program.graph, program.outputs)
    what = '\n'.join([listing, repr(program.outputs), repr(program.columns), repr(program.weights), _toolchain()])
    return hashlib.sha256(what.encode()).hexdigest()


def _read_cache(key):
    try:
        with open(os.path.join(CACHE_DIR, key + '.o'), 'rb') as f:
            return f.read()
    except OSError:
        return None


def _write_cache(key, data):
    try:
        os.makedirs(CACHE_DIR, mode=0o700, exist_ok=True)
        path = os.path.join(CACHE_DIR, key + '.o')
        temporary = f'{path}.{os.getpid()}.tmp'
        with open(temporary, 'wb') as f:
            f.write(data)
        os.replace(temporary, path)  # whole or not at all, even with two backends compiling at once
    except OSError:
        pass


def compile(program):
    """The Compiled kernel of program: from the disk cache when there, else generated, optimised and cached."""
    ms = {}
    started = time.perf_counter()
    key = cache_key(program)
    name = f'pgad_{key[:24]}'  # one name per kernel: every kernel of the process shares one execution engine
    data = _read_cache(key)
    ir_text = optimized = ''
    if data is not None:
        ms['cache hit'] = (time.perf_counter() - started) * 1e3
    else:
        ir_text = kernel_ir(program, name)
        ms['IR generation'] = (time.perf_counter() - started) * 1e3
        started = time.perf_counter()
        module = optimise(ir_text)
        optimized = str(module)
        ms['optimisation'] = (time.perf_counter() - started) * 1e3
        started = time.perf_counter()
        data = target_machine().emit_object(module)
        ms['machine code'] = (time.perf_counter() - started) * 1e3
        _write_cache(key, data)
    started = time.perf_counter()
    kernel = _load(data, name, len(program.columns), len(program.outputs))
    ms['load'] = (time.perf_counter() - started) * 1e3
    return Compiled(kernel, ir_text, optimized, ms, cached=not optimized)


@functools.lru_cache(maxsize=None)
def engine():
    """The process's one execution engine, into which every kernel's object code is loaded."""
    return llvm.create_mcjit_compiler(llvm.parse_assembly(''), new_target_machine())


_loaded = {}


def _load(object_code, name, columns, outputs):
    """A Python callable for the kernel `name` in object_code: kernel(columns, rows, weights) → sums."""
    if name not in _loaded:
        engine().add_object_file(llvm.ObjectFileRef.from_data(object_code))
        engine().finalize_object()
        _loaded[name] = engine().get_function_address(name)
    signature = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                                 *[ctypes.c_void_p] * columns)
    function = signature(_loaded[name])

    def kernel(column_arrays, rows, weights):
        w = np.ascontiguousarray(weights, dtype=np.float64)
        sums = np.zeros(outputs, dtype=np.float64)
        function(rows, w.ctypes.data, sums.ctypes.data, *[c.ctypes.data for c in column_arrays])
        return sums
    return kernel
