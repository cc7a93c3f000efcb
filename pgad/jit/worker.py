"""Compiles in a child process that the backend can kill: LLVM IR → object code, a CUDA kernel's source → PTX.

LLVM's passes and numba's typing and NVVM run in C++ and cannot be interrupted, and how long they take grows faster
than the kernel and depends on its shapes (a loop kernel of 24 4 × 4 layers: 13 s of LLVM). So every compile that
is not provably small (compiler.in_process) runs here, in `python -m pgad.jit.worker`, started with the Python of
pgad's own environment. The backend (run()) hands it a request, plain data as JSON on stdin — the IR text, the
tier's levels and the CPU and features to compile for (targets.py), or the kernel's generated source, its constants,
argument types and target — and waits for the result on stdout, checking for interrupts every POLL_SECONDS: a
cancel, a statement_timeout or a termination kills the child's process group at once and is raised as it came; the
child dies with the backend too (PR_SET_PDEATHSIG), should the backend exit first. A child that crashes or runs out
of its memory (MEMORY_BYTES of address space) fails the call (58000), never the backend; one still compiling after
WALL_SECONDS is killed (54001).

The child inherits nothing of PostgreSQL's: a clean environment, no file descriptors but its three pipes, a session
of its own, SIGINT and SIGTERM at their defaults; its sys.path is pgad's folder and its Python's own, never its
working directory (-P). The disk cache stays in the backend: a hit starts nothing.

    python -P -s -S -B -m pgad.jit.worker PARENT_PID MEMORY_BYTES < request.json > response   (job 'llvm')
    python -P -s -B -m pgad.gpu.ptx PARENT_PID MEMORY_BYTES < request.json > response         (job 'ptx': main() there)
    response: one line of JSON, {"seconds": {stage: s, …}, "parts": [[name, bytes], …]}, then the parts' bytes
"""
import ctypes
import functools
import json
import os
import re
import resource
import selectors
import signal
import subprocess
import sys
import time

POLL_SECONDS = 0.01         # how often the backend checks for interrupts while the child compiles
WALL_SECONDS = 60           # a compile still running after this is killed: 54001
MEMORY_BYTES = 4 << 30      # the child's address space (RLIMIT_AS); the largest compiles measured: 300 MB resident
PIPE_BYTES = 1 << 16        # written or read at once
STDERR_BYTES = 2000         # of a failed child's message, kept for the DETAIL
CWD = '/'                   # the child's working directory, which is not on its path (command())


# --- the backend's side ---------------------------------------------------------------------------------------------

class Failed(Exception):
    """The child ended without a result: how (a message for the DETAIL)."""


def run(request, what, wall=WALL_SECONDS, entry=__name__):
    """({part: bytes}, {stage: seconds}) of request compiled in a child, `python -m entry` (this module, whose JOBS
    serve 'llvm'; a job module of its own for another job: gpu/ptx.py); `what` names the compile in errors. Waits
    checking for interrupts (limits.tick), and on any exception kills the child before raising it."""
    from ..errors import PgadError
    try:
        process = subprocess.Popen(command(entry), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, close_fds=True, start_new_session=True,
                                   env=environment(request), cwd=CWD)
    except OSError as e:
        raise PgadError('58000', f'{what} failed: its process could not start', detail=f'{interpreter()}: {e}.',
                        hint='pgad\'s Python environment is incomplete: reinstall pgad (make install).') from None
    try:
        out, err = exchange(process, json.dumps(request).encode(), wall, what)
    except BaseException:
        kill(process)
        raise
    finally:
        close(process)
    try:
        return parse(out)
    except Failed as failure:
        how = (f'its process was killed by signal {-process.returncode} ({signal.Signals(-process.returncode).name})'
               if process.returncode < 0 else f'its process exited with status {process.returncode}'
               if process.returncode else str(failure))
        message = err.decode(errors='replace').strip()[-STDERR_BYTES:]
        error = PgadError('58000', f'{what} failed: {how}', detail=message or None,
                          hint='The server is unaffected; this is a bug in pgad or LLVM if it happens again.')
        error.aborted = process.returncode in (-signal.SIGABRT, -signal.SIGSEGV)  # the compiler's own crash
        raise error from None


def exchange(process, data, wall, what):
    """(stdout, stderr) of the child once it has exited, given data on its stdin: the pipes served as they are ready,
    with a check for interrupts at least every POLL_SECONDS; 54001 once it has run for `wall` seconds."""
    from .. import limits
    from ..errors import PgadError
    output = {process.stdout: [], process.stderr: []}
    view, at, deadline = memoryview(data), 0, time.monotonic() + wall
    os.set_blocking(process.stdin.fileno(), False)
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdin, selectors.EVENT_WRITE)
        for pipe in output:
            selector.register(pipe, selectors.EVENT_READ)
        while selector.get_map() or process.poll() is None:
            if not selector.get_map():  # every pipe closed: the child is exiting
                time.sleep(POLL_SECONDS)
            for key, _ in selector.select(POLL_SECONDS) if selector.get_map() else ():
                if key.fileobj is process.stdin:
                    try:
                        at += os.write(key.fd, view[at:at + PIPE_BYTES])
                    except BrokenPipeError:
                        at = len(view)
                    if at >= len(view):
                        selector.unregister(process.stdin)
                        process.stdin.close()
                    continue
                chunk = os.read(key.fd, PIPE_BYTES)
                output[key.fileobj].append(chunk)
                if not chunk:
                    selector.unregister(key.fileobj)
            limits.tick(limits.TICKS)
            if time.monotonic() > deadline:
                raise PgadError('54001', f'{what} took more than {wall} s', detail=(
                    'A compile runs in a process of its own, which is stopped past this time.'),
                    hint="Use backend => 'python', or a smaller lambda.")
    return b''.join(output[process.stdout]), b''.join(output[process.stderr])


def kill(process):
    """End the child and its process group now, and reap it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


def close(process):
    """Close the pipes to and from the child (an open one left to the garbage collector is a ResourceWarning, which
    the server reports as a WARNING)."""
    for pipe in (process.stdin, process.stdout, process.stderr):
        try:
            pipe.close()
        except OSError:
            pass


def parse(out):
    """({part: bytes}, {stage: seconds}) from the child's stdout; Failed if it is not a whole response."""
    header, newline, rest = out.partition(b'\n')
    try:
        head = json.loads(header)
        parts, at = {}, 0
        for name, size in head['parts']:
            parts[name], at = rest[at:at + size], at + size
    except (ValueError, KeyError, TypeError):
        raise Failed('it gave no result') from None
    if not newline or at != len(rest):
        raise Failed('its result was cut short')
    return parts, head['seconds']


def command(entry=__name__):
    """The child's command line, `python -m entry`: pgad's Python, isolated — -P: neither its working directory
    nor a script's folder on sys.path (`python -m` puts the working directory first, where a planted `pgad/` or
    `json.py` would be imported in its place), -s: no user site-packages; its environment is environment()'s alone,
    so PYTHONPATH is pgad's folder — and -B: no bytecode written. This module's own job, LLVM's, also runs without
    the site module (-S): its path is then PYTHONPATH's folders and the standard library's alone, and it does not
    run the .pth files of pgad's environment (numba-cuda's redirectors: 40 ms of the child's start, which PTX needs)."""
    return [interpreter(), '-P', '-s', *(['-S'] if entry == __name__ else []), '-B', '-m', entry, str(os.getpid()),
            str(MEMORY_BYTES)]


@functools.lru_cache(maxsize=None)
def interpreter():
    """The Python of pgad's environment. Outside the server, this process's own; in the server, sys.executable is
    postgres: the environment is the virtual environment whose site-packages pgad was imported from (the SQL shims
    put it on sys.path), else the Python of the same version that the embedded one came with."""
    if re.fullmatch(r'python[0-9.]*', os.path.basename(sys.executable)):
        return sys.executable
    folder = packages()
    while os.path.dirname(folder) != folder:
        if os.path.isfile(os.path.join(folder, 'pyvenv.cfg')):
            return os.path.join(folder, 'bin', 'python3')
        folder = os.path.dirname(folder)
    return os.path.join(sys.base_prefix, 'bin', f'python{sys.version_info[0]}.{sys.version_info[1]}')


def packages():
    """The folder pgad was imported from (its parent's): first on the child's path."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@functools.lru_cache(maxsize=None)
def search_path():
    """The child's PYTHONPATH: pgad's folder, then llvmlite's where that is another (pgad installed in development
    mode, outside its environment's site-packages), found without importing llvmlite."""
    import importlib.util
    spec = importlib.util.find_spec('llvmlite')
    folders = [packages()]
    if spec is not None and spec.origin:
        folders.append(os.path.dirname(os.path.dirname(os.path.abspath(spec.origin))))
    return os.pathsep.join(dict.fromkeys(folders))


def environment(request):
    """The child's whole environment: where pgad is, and for PTX numba's real CUDA target and the CUDA settings."""
    env = {'PATH': '/usr/bin:/bin', 'LC_ALL': 'C', 'PYTHONPATH': search_path()}
    if request['job'] == 'ptx':
        env.update({k: v for k, v in os.environ.items() if k.startswith(('CUDA_', 'NUMBA_'))})
        env['NUMBA_ENABLE_CUDASIM'] = '0'
    return env


# --- the child's side -----------------------------------------------------------------------------------------------

def optimise(ir_text, speed_level, vectorise, cpu, features):
    """The module of ir_text, optimised in place for the CPU `cpu` with `features` (LLVM's names: targets.py) at
    speed_level (3: O3), loop and SLP vectorisation on or off."""
    import llvmlite.binding as llvm
    module = llvm.parse_assembly(ir_text)
    module.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=speed_level)
    pto.loop_vectorization = pto.slp_vectorization = vectorise
    builder = llvm.create_pass_builder(target_machine(3, cpu, features), pto)
    builder.getModulePassManager().run(module, builder)
    return module


@functools.lru_cache(maxsize=None)
def target_machine(level, cpu, features):
    """The target machine of the CPU `cpu` with `features` at a code generation level, for optimising and emitting
    code."""
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    return target.create_target_machine(cpu=cpu, features=features, opt=level, codemodel='jitdefault', jit=True)


def llvm_job(request):
    """IR → the optimised IR (if asked) and the object code or the assembly, with the seconds of each stage."""
    started = time.perf_counter()
    module = optimise(request['ir'], request['speed_level'], request['vectorise'], request['cpu'], request['features'])
    seconds, parts = {'optimisation': time.perf_counter() - started}, []
    if request.get('optimised_ir'):
        parts.append(('optimised_ir', str(module).encode()))
    started = time.perf_counter()
    machine = target_machine(request['codegen_level'], request['cpu'], request['features'])
    parts.append(('assembly', machine.emit_assembly(module).encode()) if request.get('assembly') else
                 ('object', machine.emit_object(module)))
    seconds['machine code'] = time.perf_counter() - started
    return parts, seconds


JOBS = {'llvm': llvm_job}  # this module's; a job module of its own serves others (gpu/ptx.py: 'ptx')


def _die_with(parent):
    """Be killed when the backend exits, however it exits (Linux's PR_SET_PDEATHSIG); exit now if it already has."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)


def main(argv, jobs):
    """The child: the request on stdin, served by jobs[request['job']], the response on stdout; the exit status."""
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
        signal.signal(number, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])  # nothing blocked that the backend had blocked
    _die_with(int(argv[1]))
    memory = int(argv[2])
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (2 * WALL_SECONDS, 2 * WALL_SECONDS))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    try:
        request = json.loads(sys.stdin.buffer.read())
        parts, seconds = jobs[request['job']](request)
    except MemoryError:
        sys.stderr.write(f'out of memory: the compile needed more than {memory >> 20} MB\n')
        return 3
    except Exception as e:  # noqa: BLE001 — reported to the backend as a message, which fails the call
        message = str(e).strip().splitlines()
        sys.stderr.write(f'{type(e).__name__}: {message[0] if message else ""}'[:STDERR_BYTES] + '\n')
        return 2
    header = json.dumps({'seconds': seconds, 'parts': [[name, len(data)] for name, data in parts]})
    sys.stdout.buffer.write(header.encode() + b'\n' + b''.join(data for _, data in parts))
    sys.stdout.buffer.flush()
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv, JOBS))
