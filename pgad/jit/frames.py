"""The stack frame a kernel may take: checked on its optimised IR before machine code is emitted.

A kernel runs on the backend's own stack (8 MB at most, shared with the executor, PL/Python and whatever called
pgad), where a frame past the guard page kills the backend by a signal and PostgreSQL restarts every session. The
loop kernels (loops/) carve every buffer that grows with the shapes out of a scratch buffer on the heap and keep
only scalar accumulators on the stack; the unrolled kernels (codegen.py) have no alloca at all. check() enforces
that: what the optimised IR still allocates on the stack — the allocas LLVM did not turn into registers — must have
a size known at compile time, and all of them together at most MAX_FRAME bytes, else SQLSTATE 54001, before any
machine code is emitted.

What the IR does not show is the register allocator's spill slots. They grow with the values live at once, which
the compiler's tiers bound (tiers.TIERS: at most 8,000 nodes, the largest at O0, whose fast register allocator
spills the most): measured with emitted_frame() on this x86-64 VM, the largest kernel of each tier takes 1–7 KB at
O3 (2,500 nodes) and 32–127 KB at O0 (8,000 nodes: `poly` 127,336 bytes, `linear` 106,208, `expsum` 84,776); a loop
kernel's frame is a few hundred bytes (the issue's outer product: 184 bytes, where its tape on the stack took
9,446,600). tests/test_crash_fuzz.py measures the largest O0 kernel against MAX_FRAME.

MAX_FRAME is 256 KiB: twice the largest spill measured, and half of the 512 kB PostgreSQL keeps between
max_stack_depth and the stack's limit (STACK_DEPTH_SLOP: the depth it checks is its own, not a kernel's frame).
"""
import re

from ..errors import PgadError

MAX_FRAME = 256 << 10

_ALLOCA = re.compile(r'=\s*alloca\s+(?:inalloca\s+)?(?P<type>.+?)(?:,\s*(?P<count_type>i\d+)\s+(?P<count>[^,\s]+))?'
                     r'(?:,\s*align\s+\d+)?(?:,\s*addrspace\(\d+\))?\s*(?:,\s*!.*)?$')
_SIZES = {'double': 8, 'float': 4, 'i1': 1, 'i8': 1, 'i16': 2, 'i32': 4, 'i64': 8, 'ptr': 8, 'half': 2}


def type_bytes(text):
    """The bytes of an LLVM IR type written as text (scalars, pointers, vectors and arrays of them), or None."""
    text = text.strip()
    if text in _SIZES:
        return _SIZES[text]
    if text.endswith('*'):
        return 8
    nested = re.fullmatch(r'([<\[])\s*(\d+)\s+x\s+(.+?)\s*[>\]]', text)
    if nested:
        inner = type_bytes(nested.group(3))
        return None if inner is None else int(nested.group(2)) * inner
    return None


def allocas(ir_text):
    """Each alloca of the IR: (its instruction, its bytes — None where its size is not known at compile time)."""
    found = []
    for line in ir_text.splitlines():
        if ' alloca ' not in line:
            continue
        m = _ALLOCA.search(line.strip())
        if m is None:
            found.append((line.strip(), None))
            continue
        size = type_bytes(m.group('type'))
        count = m.group('count')
        if count is not None:
            size = size * int(count) if size is not None and re.fullmatch(r'\d+', count) else None
        found.append((line.strip(), size))
    return found


def frame_bytes(ir_text):
    """The bytes the IR's allocas take on the stack, or None where one's size is not known at compile time."""
    sizes = [size for _, size in allocas(ir_text)]
    return None if None in sizes else sum(sizes)


def check(ir_text, limit=None):
    """Nothing if the kernel's stack frame, as its optimised IR allocates it, fits MAX_FRAME (or limit); else the
    54001 error naming its size and the bound."""
    limit = MAX_FRAME if limit is None else limit
    size = frame_bytes(str(ir_text))
    if size is not None and size <= limit:
        return
    what = 'a size known only at run time' if size is None else f'{size} bytes'
    raise PgadError('54001', f'kernel\'s stack frame is too large: {what}, at most {limit} bytes',
                    detail='A kernel runs on the backend\'s stack, shared with PostgreSQL; its buffers belong on the '
                           'heap.',
                    hint="Use smaller shapes, or backend => 'python'.")


def emitted_frame(assembly):
    """The bytes x86-64 machine code reserves below its pushes (`subq $N, %rsp`, the largest in the listing), from
    the target machine's emit_assembly; None for another architecture's listing."""
    sizes = [int(n) for n in re.findall(r'\bsub[lq]?\s+\$(\d+),\s*%rsp', assembly)]
    if sizes:
        return max(sizes)
    return 0 if '%rsp' in assembly or '%rip' in assembly else None
