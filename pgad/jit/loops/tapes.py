"""What the reverse sweep reads of the forward values, kept one of three ways (the tape): 'store' (a tile's records,
read back), 'recompute' (each row's forward sweep run again), 'reversible' (each value the reverse of a step reads
recovered exactly before it: plan_recovery()). one_tile() runs a tile of rows one by one under each; a 'store' tile
of more rows runs lane by lane (lanes.py).
"""
from llvmlite import ir

from ...errors import PgadError
from ...lang import vectors
from ...lang.parser import caret
from ...lang.rules import PRIMITIVES
from ..codegen import I64
from .layout import EXTRA, size_of
from .operations import READS, partial_programs
from .simd import REDUCE

TAPES = ('store', 'recompute', 'reversible')

# How a step runs backwards, exactly: given its value and the other arguments, the argument at each position. Only
# negation is exact for every double: x = out − y, x = out / y, ln(exp(x)), atanh(tanh(x)), logit(sigmoid(x)) round,
# and lose the value outright where the step did (x + y with |y| ≫ |x|, x·0, exp underflowing to 0 or overflowing,
# tanh and sigmoid saturating at ±1): a gradient from such a value is wrong or NaN, so those steps are not run
# backwards (plan_recovery()).
INVERSES = {
    ('neg', 0): lambda e, out, x: e.b.fneg(out),
}
LEAVES = ('const', 'weight', 'column')


class Tapes:
    """A tile's rows one by one under each tape, and the reversible tape's recovery (a mixin of kernel._Kernel)."""

    def one_tile(self, t):
        """Tile t, a row at a time: each row's forward sweep (into the tile's records for 'store'), then each row's
        reverse sweep, its values read back ('store'), computed again ('recompute') or recovered ('reversible')."""
        b = self.b
        start = b.mul(t, ir.Constant(I64, self.tile))
        left = b.sub(self.rows_arg, start)
        count = b.select(b.icmp_signed('<', left, ir.Constant(I64, self.tile)), left, ir.Constant(I64, self.tile))
        record = self.lay.record

        def forward_row(r):
            self.values = self.gep(self.tape_base, b.mul(r, ir.Constant(I64, record))) if self.tape == 'store' \
                else self.tape_base
            self.forward(b.add(start, r))
            b.store(b.fadd(b.load(self.loss), self.val(self.program.tensor.root, 0), flags=REDUCE), self.loss)

        def reverse_row(r):
            if self.tape == 'store':
                self.values = self.gep(self.tape_base, b.mul(r, ir.Constant(I64, record)))
                self.adjoints = self.gep(self.adjoint_base, b.mul(r, ir.Constant(I64, self.lay.adjoints)))
            elif self.tape == 'recompute':
                self.values = self.tape_base
                self.forward(b.add(start, r))  # redundant execution: the row's forward sweep again
            else:  # reversible: nothing of the forward sweep but the loss; the inputs read again
                root = self.program.tensor.root
                loss = self.val(root, 0)
                self.values = self.recovery
                for i in self.lay.columns:
                    self.forward_node(i, b.add(start, r))
                if root in self.lay.value:
                    self.put(root, 0, loss)
            self.reverse(b.add(start, r))
        self.loop(count, forward_row)
        if self.gradient:
            self.loop(count, reverse_row)

    def recover(self, i):
        """Make the values node i's reverse reads available, as plan_recovery() planned: each recomputed by its own
        step from values at hand, or recovered from its consumer's value by an exact inverse."""
        for action in self.recovery_plan.get(i, ()):
            if action[0] == 'recompute':
                self.forward_node(action[1], self.row)
                continue
            _, a, consumer, position = action
            node = self.graph.nodes[consumer]
            invert = INVERSES[(node.op, position)]
            self.loop(size_of(self.lay.shape[a]), lambda k: self.put(a, k, invert(
                self.e, self.val(consumer, k), *[self.val(x, k) for x in node.args])))

    def check_reversible(self):
        """The plan of what the reverse sweep recovers before each step, or the error for the first value it cannot
        recover exactly."""
        self.recovery_plan = plan_recovery(self.program.tensor, self.lay)


def reads(graph, lay, i):
    """The nodes whose values (i itself: its value and its extra slots) the reverse of node i reads."""
    node = graph.nodes[i]
    if node.op in PRIMITIVES:
        pgraph, partials = partial_programs(node.op)
        found = []
        for a, p in zip(node.args, partials):
            if p is None or not lay.live[a]:
                continue
            for j in pgraph.ancestors([p]):
                leaf = pgraph.nodes[j]
                if leaf.op == 'weight':
                    found.append(i if leaf.value == '#out' else node.args[int(leaf.value[1:])])
        return list(dict.fromkeys(found))
    return READS[node.op](lay, node.args, i)


def plan_recovery(lam, lay):
    """For the 'reversible' tape: {node: [action, …]}, what the reverse sweep does before node's reverse so that every
    value it reads is exact — ('recompute', a): a's own step again, its arguments at hand (leaves, the loss's value,
    or values recovered before); ('invert', a, consumer, position): a from its consumer's value by an exact inverse
    (INVERSES). Else the 0A000 error naming the step whose reverse needs a value that neither gives."""
    graph = lam.graph
    have = {i for i in lay.order if graph.nodes[i].op in LEAVES}
    if graph.nodes[lam.root].op not in EXTRA:
        have.add(lam.root)  # the loss's value crosses from the forward sweep (a logsumexp's extra slots do not)
    consumers = {}
    for i in lay.order:
        for position, a in enumerate(graph.nodes[i].args):
            consumers.setdefault(a, []).append((i, position))
    plan = {}
    for i in reversed(lay.order):
        node = graph.nodes[i]
        if not lay.live[i] or node.op in LEAVES:
            continue
        for a in reads(graph, lay, i):
            if a in have:
                continue
            if all(x in have for x in graph.nodes[a].args):
                plan.setdefault(i, []).append(('recompute', a))
                have.add(a)
                continue
            way = next(((c, position) for c, position in consumers.get(a, ()) if c in have
                        and (graph.nodes[c].op, position) in INVERSES and lay.shape[a] == lay.shape[c]
                        and all(x in have for k, x in enumerate(graph.nodes[c].args) if k != position)), None)
            if way is None:  # named: the step that would have to run backwards (a's consumer at hand), else i
                step = next((c for c, _ in consumers.get(a, ()) if c in have), i)
                pos = lam.places.get(step)
                what = vectors.SYMBOLS.get(graph.nodes[step].op, graph.nodes[step].op)
                raise PgadError('0A000', f'tape "reversible" cannot run "{what}" backwards',
                                detail=None if pos is None else caret(lam.text, pos),
                                hint="The reverse sweep of this step reads a value that is neither recomputed from "
                                     "values at hand nor recovered exactly (only negation inverts exactly: x = out "
                                     "− y, ln(exp(x)), atanh(tanh(x)) round or lose the value): use tape 'store' "
                                     "or 'recompute'.")
            plan.setdefault(i, []).append(('invert', a, *way))
            have.add(a)
    return plan
