"""pgad.explain: every stage of turning a lambda into machine code, with what it made and the time it took.

One row per stage — parse, differentiate, IR generation, optimisation, machine code — so forward and reverse
mode can be compared as the Umbra paper compares them: the derivative DAG, the LLVM IR before and after
optimisation, instruction counts, and the milliseconds each stage took. Nothing is taken from a cache here.
"""
import re
import time

from . import lang
from .lang import printer
from .limits import DEFAULT
from .program import Program


def stages(text, mode, limits=DEFAULT):
    """[(stage, detail, ms)] for lambda `text` differentiated by `mode` and compiled by the llvm backend."""
    from .jit import codegen, compiler
    rows = []
    chars = printer.budget(limits)

    def timed(stage, work, detail):
        started = time.perf_counter()
        result = work()
        rows.append((stage, detail(result), (time.perf_counter() - started) * 1e3))
        return result

    lam = timed('parse', lambda: lang.parse(text, limits), lambda lam: (
        f'{len(lam.graph)} nodes; columns: {", ".join(lam.columns) or "none"}; weights: '
        f'{", ".join(lam.weights) or "none"}\nloss: {printer.to_lambda(lam, lam.root, chars)}'))
    grad = timed('differentiate', lambda: lang.gradient(lam, tuple(lam.weights), mode), lambda grad: (
        f'{mode} mode: {len(lam.graph)} nodes with the derivatives\n' +
        '\n'.join(f'∂/∂{w} = {text}' for w, text in zip(grad, printer.to_lambdas(lam, list(grad.values()), chars))) +
        '\n\n' + printer.to_listing(lam.graph, [lam.root, *grad.values()])))
    program = Program(lam, (lam.root, *grad.values()), tuple(lam.weights))
    tier = compiler.required_tier(program)
    ir_text = timed('IR generation', lambda: codegen.kernel_ir(program),
                    lambda ir: f'{ir_instructions(ir)} IR instructions\n{ir}')
    module = timed('optimisation', lambda: compiler.optimise(ir_text, tier),
                   lambda m: f'{ir_instructions(str(m))} IR instructions after {tier.name} for '
                             f'{compiler.llvm.get_host_cpu_name()}\n{m}')
    timed('machine code', lambda: compiler.target_machine(tier.codegen_level).emit_assembly(module),
          lambda asm: f'{machine_instructions(asm)} machine instructions\n{asm}')
    return rows


def ir_instructions(ir_text):
    """Instructions in the function bodies of an IR module: every line that is not a label, brace or comment."""
    body = re.findall(r'^define[^{]*\{(.*?)^\}', ir_text, re.MULTILINE | re.DOTALL)
    return sum(1 for part in body for line in part.splitlines()
               if line.strip() and not line.strip().endswith(':') and not line.lstrip().startswith(';'))


def machine_instructions(asm):
    return sum(1 for line in asm.splitlines()
               if line.startswith('\t') and not line.lstrip().startswith(('.', '#')) and line.strip())
