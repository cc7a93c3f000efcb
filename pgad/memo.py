"""A per-process cache bounded by the size of what it keeps, not by a count: a backend's memory must not grow
with the lambdas its user sends (a program of 100,000 nodes holds about 32 MB).

    @bounded_cache(budget=250_000, weight=lambda program, args: len(program.graph))

is functools.lru_cache(maxsize=…) with the least recently used results dropped once their weights (of the result
and the call's positional arguments) together pass the budget; the newest result is always kept.
"""
import functools
from collections import OrderedDict


def bounded_cache(budget, weight):
    def decorate(function):
        entries, held = OrderedDict(), [0]

        @functools.wraps(function)
        def cached(*args, **kwargs):
            key = (args, tuple(sorted(kwargs.items())))
            if key in entries:
                entries.move_to_end(key)
                return entries[key][0]
            result = function(*args, **kwargs)
            entries[key] = (result, weight(result, args))
            held[0] += entries[key][1]
            while held[0] > budget and len(entries) > 1:
                held[0] -= entries.popitem(last=False)[1][1]
            return result

        def cache_clear():
            entries.clear()
            held[0] = 0
        cached.cache_clear = cache_clear
        return cached
    return decorate
