"""A lambda with vectors and matrices → LLVM IR with a loop per vector operation, and a tape strategy.

The kernel has codegen.kernel_ir's signature and meaning — void kernel(i64 rows, double *weights, double *sums,
double *column0, …), the columns and weights those of the unrolled Program (an array column's elements, each
weight's elements row-major) — so the loader, the descent and the disk cache see a kernel like any other. Where the
unrolled kernel grows with the shapes, this one grows with the lambda: each node of the parsed DAG is a buffer of its
shape's size, and each operation a loop nest over it (the products written out in SIMD: dot, axpy).

Reverse mode only (forward mode carries a tangent per weight element: it runs unrolled). For each row the forward
sweep fills the nodes' value buffers; the reverse sweep zeroes the adjoint buffers, sets the loss's to 1, and walks the
nodes backwards, each operation's vector-Jacobian product a loop nest (VJP below): the matrix's cotangent in
W @ x is the outer product ḡxᵀ, accumulated straight into the weight's gradient sums, which live across rows (no
allocation per row: every buffer is allocated once per call). An elementwise primitive's partials come from the
rules table, emitted per element with codegen.EMIT.

What the reverse sweep reads of the forward values is the tape, kept one of three ways (`tape`):
- 'store': the forward sweep of a tile of TILE rows writes every node's value, and the reverse sweep of the tile
  reads them back. A tile of 1 is the fused kernel, the row's values one record, in L1. A tile of more rows keeps
  them lane by lane (structure-of-arrays: each element of each value the tile's rows side by side) and runs each
  step for all the tile's rows before the next (lanes_tile), the rows the innermost loop, which LLVM vectorises: a
  SIMD register holds one element of 8 rows (AVX-512), as in the unrolled kernel. W @ x, W a weight matrix, is
  then a small matrix product over the tile, blocked (lane_product: 4 outputs by 2 registers of rows, each weight
  broadcast once for them, the sums in registers), and so are its VJPs, Wᵀȳ the same way and W̄ += Σ_t ȳ_t x_tᵀ
  as sums along the lanes (lane_gradient), or along an array column's row-major block (block_gradient).
- 'recompute': no tape. The tile's forward sweep computes the loss alone, and its reverse sweep runs each row's
  forward sweep again before its reverse (Futhark's redundant execution): one row's buffers, twice the forward work.
- 'reversible': the forward sweep keeps only the loss's value; before each step's reverse, the reverse sweep recovers
  exactly each value that reverse reads (plan_recovery()): by running its own step again where its arguments are at
  hand (leaves, the loss, values recovered before), or from the value of a step that consumed it by running that step
  backwards where the inverse is exact (NiLang; in doubles only negation is: x = out − y, ln(exp(x)) round, and lose
  the value where exp underflows, tanh saturates or y ≫ x). Where neither gives the value, the kernel is refused with
  the step named (0A000).

Every buffer that grows with the shapes (the tape, the adjoints, the weights' lanes, the gradient sums) is carved
out of one scratch buffer, the kernel's last argument, which its caller allocates on the heap once a call
(scratch_doubles), but the first that fit in STACK_BYTES, which stay on the stack (LLVM keeps small ones in
registers); the stack keeps those and a few scalar accumulators (frames.py checks it).

Where each part is:
- layout.py: the tile planning — each node's place in a row's records (Layout), the slots an operation keeps past
  its value (EXTRA), a 'store' tile's rows (rows_of), which buffers stay on the stack.
- calling.py: the calling convention — the columns a kernel takes (column_arguments, widths) and their blocks.
- kernel.py: the kernel's IR (_Kernel): its buffers and loops, values and adjoints, the forward and reverse sweeps;
  kernel_ir(), and the scratch buffer it takes (scratch_doubles, buffer_bytes).
- operations.py: every vector operation registered in one place (FORWARD, REVERSE, READS, LANES_FORWARD,
  LANES_REVERSE), beside rules.OPERATIONS; its steps in products.py (matmul, dot, outer), reductions.py (sum,
  logsumexp, softmax) and structure.py (stack, index, transpose).
- tapes.py: the three tapes (a tile row by row under each) and the reversible tape's recovery (plan_recovery).
- lanes.py: a 'store' tile kept lane by lane, and its blocked products.
- simd.py: the explicit SIMD helpers (dot, axpy, vector exp, lanes' loads and stores).
"""
from .calling import blocks, column_arguments, widths
from .kernel import _Kernel, buffer_bytes, kernel_ir, scratch_doubles
from .layout import STACK_BYTES, TAPE_BYTES, TILE, rows_of
from .tapes import TAPES

__all__ = ['TAPES', 'TILE', 'TAPE_BYTES', 'STACK_BYTES', '_Kernel', 'kernel_ir', 'scratch_doubles', 'buffer_bytes',
           'rows_of', 'column_arguments', 'widths', 'blocks']
