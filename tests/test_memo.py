"""The per-process caches keep what fits their budget: the least recently used go first (pgad/memo.py)."""
from pgad.memo import bounded_cache


def test_the_least_recently_used_go_once_the_budget_is_passed():
    calls = []

    @bounded_cache(budget=10, weight=lambda result, args: args[0])
    def work(size):
        calls.append(size)
        return size

    for size in (4, 3, 2, 4, 5):  # the second 4 is a hit, and makes 4 the most recent; 5 makes 14: 3 and 2 go
        work(size)
    assert calls == [4, 3, 2, 5]
    work(4), work(5), work(3)
    assert calls == [4, 3, 2, 5, 3]  # 4 and 5 were kept, 3 was not
    work(50), work(50)
    assert calls[-1] == 50 and calls.count(50) == 1  # the newest is kept, whatever its weight
    work.cache_clear()
    work(50)
    assert calls.count(50) == 2
