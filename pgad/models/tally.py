"""One message per call for its groups (issue 46, item 7). A training of one model warns of each thing it finds
(a fit that did not converge, a loss that diverged), naming the model; a training of many groups counts the groups
of each kind in one WARNING that names a few of them, says why in its DETAIL and gives the commonest hint. Weights
that sit at a bound (the best fit within the bounds: converged) are told in a NOTICE, counted alike, or in the
WARNING where there is one. Each group's status is in its row of pgad.model_versions: converged, gradient_norm and
options->'at_bounds'.
"""
from collections import Counter

from .. import server

SHOWN = 3                           # the groups a message names of each kind
UNCONVERGED = 'did not converge'    # the kinds, as the message counts them: "3 of 500 groups did not converge"
WARNED = 'warned'
AT_BOUND = 'have a weight at a bound'
OUTSIDE = 'have a smoothing parameter outside [0, 1]'  # sequence.py's: the cause its hint names comes first


class Tally:
    """The messages of one call's fits: add(kind, group, message, hint) for each as it comes, group the group's key
    (None for a model of one group); flush() sends them."""
    def __init__(self, name, groups):
        self.name, self.groups = name, groups
        self.found = {}  # kind → [(group, message, hint)], in the order added

    def add(self, kind, group, message, hint=None):
        self.found.setdefault(kind, []).append((group, message, hint))

    def take(self, other, group):
        """The entries of group in the Tally other, added here."""
        for kind, entries in other.found.items():
            for entry in entries:
                if entry[0] == group:
                    self.add(kind, *entry)

    def warner(self, kind, group):
        """add for kind and group, as descent.Clock's warning(message, hint) takes it."""
        return lambda message, hint: self.add(kind, group, message, hint)

    def bounds(self, group, fitted, held):
        """An AT_BOUND entry where fitted weights ({name: value}) sit at a bound: those held names
        (descent.at_bounds)."""
        if held:
            self.add(AT_BOUND, group, ', '.join(f'"{n}" = {fitted[n]:g}' for n in held) +
                     (' sits at its bound' if len(held) == 1 else ' sit at their bounds'))

    def flush(self):
        """The messages: each alone, naming its group, where the call has one group or they are one group's; else
        one WARNING counting each kind's groups. Weights at a bound alone: a NOTICE, counted alike."""
        bounded = self.found.pop(AT_BOUND, [])
        if self.groups <= 1 or len({entry[0] for entries in self.found.values() for entry in entries}) <= 1:
            for entries in self.found.values():
                for group, message, hint in entries:
                    server.warning(f'{self._where(group)}: {message}', hint)
            if len(bounded) == 1:
                server.notice(f'{self._where(bounded[0][0])}: {bounded[0][1]}')
            elif bounded:
                message, _, detail = self._counted({AT_BOUND: bounded})
                server.notice(f'{message}: {detail}')
        else:
            server.warning(*self._counted({**self.found, **({AT_BOUND: bounded} if bounded else {})}))
        self.found = {}

    def _counted(self, found):
        """(message, hint, detail) of one message for the entries found ({kind: entries}): each kind's groups
        counted, a few of each named with what it found, the commonest hint."""
        counts = ', '.join(f'{len(entries)} of {self.groups} groups {kind}' if n == 0 else f'{len(entries)} {kind}'
                           for n, (kind, entries) in enumerate(found.items()))
        named = []
        for entries in found.values():
            named += [f'Group {group}: {message}.' for group, message, _ in entries[:SHOWN]]
            if len(entries) > SHOWN:
                named.append(f'And {len(entries) - SHOWN} more.')
        named.append("Each group's converged, gradient_norm and options->'at_bounds' are in pgad.model_versions.")
        hints = Counter(hint for entries in found.values() for _, _, hint in entries if hint)
        hint = found[OUTSIDE][0][2] if OUTSIDE in found else hints.most_common(1)[0][0] if hints else None
        return f'model "{self.name}": {counts}', hint, ' '.join(named)

    def _where(self, group):
        return f'model "{self.name}"' + (f', group {group}' if group else '')
