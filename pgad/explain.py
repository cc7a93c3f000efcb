"""pgad.explain: every stage of turning a lambda into machine code, with what it made and the time it took.

One row per stage — parse, differentiate, backend (which one runs, and why), then the backend's: for llvm IR
generation, optimisation, machine code; for cuda kernel source, PTX, compilation — so forward and reverse
mode can be compared as the Umbra paper compares them: the derivative DAG, the LLVM IR before and after
optimisation, instruction counts, and the milliseconds each stage took. Nothing is taken from a cache here. With
data, a last row says where the data's rows are computed (shards.describe).
"""
import re
import time

from . import backends, gpu, lang, program as programs, shards
from .lang import printer, tensors, vectors
from .limits import DEFAULT
from .program import Program


def stages(text, mode, limits=DEFAULT, backend='auto', rows=None, data=None, shapes=None, weights=None, tape='auto'):
    """[(stage, detail, ms)] for lambda `text` differentiated by `mode` and compiled by the backend that `backend`
    gives for `rows` rows (None: not known, the CPU's choice); with `data`, a last row of where its rows are
    computed (shards.describe). A lambda with vectors takes its shapes (a vectors.Shapes) and its weights' names
    from the call, and has a row of its own for unrolling them (and, past its size, the loop kernel by tape)."""
    rows_out = []
    chars = printer.budget(limits)

    def timed(stage, work, detail, ms=None):
        """work's result, with its row: the time it took, or ms where it was done elsewhere (in the compiler
        process)."""
        started = time.perf_counter()
        result = work()
        rows_out.append((stage, detail(result), (time.perf_counter() - started) * 1e3 if ms is None else ms))
        return result

    lam = timed('parse', lambda: lang.parse(text, limits), lambda lam: (
        f'{len(lam.graph)} nodes; columns: {", ".join(lam.columns) or "none"}; weights: '
        f'{", ".join(lam.weights) or "none"}\nloss: {printer.to_lambda(lam, lam.root, chars)}'))
    if shapes or vectors.needed(lam):
        return _vector_stages(text, lam, mode, limits, backend, rows, data, shapes, weights, tape, timed, rows_out)
    grad = timed('differentiate', lambda: lang.gradient(lam, tuple(lam.weights), mode), lambda grad: (
        f'{mode} mode: {len(lam.graph)} nodes with the derivatives\n' +
        '\n'.join(f'∂/∂{w} = {text}' for w, text in zip(grad, printer.to_lambdas(lam, list(grad.values()), chars))) +
        '\n\n' + printer.to_listing(lam.graph, [lam.root, *grad.values()])))
    program = Program(lam, (lam.root, *grad.values()), tuple(lam.weights))
    chosen = timed('backend', lambda: backends.choose(program, backend, rows),
                   lambda chosen: _why(program, backend, rows, chosen))
    {'llvm': _llvm, 'cuda': _cuda, 'python': lambda program, timed: None}[chosen](program, timed)
    if data is not None:
        timed('data', lambda: shards.describe(data, lam.columns, len(lam.weights)), lambda where: where)
    return rows_out


def _vector_stages(text, lam, mode, limits, backend, rows, data, shapes, weights, tape, timed, rows_out):
    shapes = shapes or vectors.Shapes()
    weights = lam.weights if weights is None else weights
    """The stages after parse of a lambda with vectors: the program at its shapes (unrolled, and its kernel), the
    derivatives as vector expressions, the backend and its own stages."""
    chars = printer.budget(limits)
    program = timed('vectors', lambda: programs.build(text, tuple(weights), mode, True, limits, shapes, tape),
                    lambda p: (f'shapes: ' + ', '.join(f'{n} {vectors.describe(s)[2:] if s else "number"}'
                                                        for n, s in p.shapes) +
                               ''.join(f'; {c} a vector of {k}' for c, k in shapes.columns) +
                               f'\nunrolled: {len(p.graph)} nodes with the derivatives ({mode} mode); llvm kernel: '
                               + _kernel(p)))
    grown = lam.copy()
    timed('differentiate', lambda: tensors.gradient(grown, shapes), lambda found: (
        'reverse mode over the vectors, as vector expressions\n' + '\n'.join(
            f'∂/∂{w} = {t}' for w, t in zip(found, printer.to_lambdas(grown, list(found.values()), chars)))))
    chosen = timed('backend', lambda: backends.choose(program, backend, rows),
                   lambda chosen: _why(program, backend, rows, chosen))
    {'llvm': _llvm, 'cuda': _cuda, 'python': lambda program, timed: None}[chosen](program, timed)
    if data is not None:
        timed('data', lambda: None, lambda _: 'here: the rows are loaded into this backend (a lambda with vectors '
                                              'pulls the rows of a sharded table too)')
    return rows_out


def _kernel(program):
    from .jit import compiler
    kind = compiler.form(program)
    return 'unrolled' if kind == 'unrolled' else f'loops, tape "{kind}"'


def _why(program, backend, rows, chosen):
    """The backend row's detail: which backend runs, and why."""
    if backend != 'auto':
        return f'{chosen}: asked for'
    gpu_rule = (f'cuda from {backends.GPU_ROWS} rows on a GPU' if gpu.fits(program) else
                'not cuda: the kernel is too large for it')
    where = 'a GPU is there' if gpu.present() else 'no GPU is there'
    return (f'{chosen}: auto, for {"rows not given" if rows is None else f"{rows} rows"}; {where} ({gpu_rule}, '
            f'else llvm, or python for a kernel too large for llvm)')


def _llvm(program, timed):
    """The llvm backend's stages: IR generation, optimisation and machine code, as compiler.compile makes them (in
    this process for a kernel that is provably small, else in the compiler process, whose times the rows show)."""
    from .jit import codegen, compiler, loops, worker
    tier = compiler.required_tier(program)
    kind = compiler.form(program)
    ir_text = timed('IR generation', lambda: codegen.kernel_ir(program) if kind == 'unrolled' else
                    loops.kernel_ir(program, codegen.NAME, kind),
                    lambda ir: f'{ir_instructions(ir)} IR instructions\n{ir}')
    optimised = (lambda m: f'{ir_instructions(str(m))} IR instructions after {tier.name} for '
                           f'{compiler.targets.current().cpu}\n{m}')
    assembly = lambda asm: f'{machine_instructions(asm)} machine instructions\n{asm}'  # noqa: E731
    if compiler.in_process(program):
        module = timed('optimisation', lambda: compiler.optimise(ir_text, tier), optimised)
        timed('machine code', lambda: compiler.target_machine(tier.codegen_level).emit_assembly(module), assembly)
        return
    parts, seconds = worker.run(compiler.request(ir_text, tier, optimised_ir=True, assembly=True),
                                'compiling the kernel')
    timed('optimisation', lambda: parts['optimised_ir'].decode(), optimised, seconds['optimisation'] * 1e3)
    timed('machine code', lambda: parts['assembly'].decode(), assembly, seconds['machine code'] * 1e3)


def _cuda(program, timed):
    """The cuda backend's stages: the kernel's source, its PTX (numba's NVVM, for this GPU or, with none, for
    compute capability 8.0), and numba's compilation for this GPU where there is one."""
    from .gpu import codegen as gpu_codegen, compiler as gpu_compiler
    module = gpu_compiler.cuda()
    gpu_compiler.check_size(program)
    timed('kernel source', lambda: gpu_codegen.kernel_source(program, gpu_compiler.THREADS)[0],
          lambda source: f'{len(source.splitlines())} lines of Python for numba-cuda\n{source}')
    on_gpu = module.is_available()
    if gpu_compiler.simulated():
        timed('PTX', lambda: None, lambda _: 'none: numba\'s CUDA simulator runs the source in Python')
    else:
        cc = module.get_current_device().compute_capability if on_gpu else (8, 0)
        timed('PTX', lambda: gpu_compiler.ptx(program, cc), lambda ptx: (
            f'{ptx_instructions(ptx)} PTX instructions for sm_{cc[0]}{cc[1]}\n{ptx}'))
    if on_gpu:
        timed('compilation', lambda: gpu_compiler.compile(program), lambda compiled: (
            f'numba-cuda for {gpu_compiler.device_name(module)}: ' +
            ', '.join(f'{stage} {ms:.1f} ms' for stage, ms in compiled.ms.items())))
    else:
        timed('compilation', lambda: None, lambda _: f'none: no CUDA GPU is available to the server '
                                                     f'({module.cuda_error() or "no GPU found"})')


def ir_instructions(ir_text):
    """Instructions in the function bodies of an IR module: every line that is not a label, brace or comment."""
    body = re.findall(r'^define[^{]*\{(.*?)^\}', ir_text, re.MULTILINE | re.DOTALL)
    return sum(1 for part in body for line in part.splitlines()
               if line.strip() and not line.strip().endswith(':') and not line.lstrip().startswith(';'))


def machine_instructions(asm):
    return sum(1 for line in asm.splitlines()
               if line.startswith('\t') and not line.lstrip().startswith(('.', '#')) and line.strip())


def ptx_instructions(ptx):
    """Instructions in PTX text: the lines inside a function's body that end with a semicolon and are no directive."""
    return sum(1 for line in ptx.splitlines()
               if line.startswith('\t') and line.rstrip().endswith(';') and not line.lstrip().startswith(('.', '//')))
