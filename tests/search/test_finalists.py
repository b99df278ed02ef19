"""The finalist rules shared by the strategies that end in exact verification
(`workbench.search.finalists`): a share from screening, then the knockouts' order."""

from __future__ import annotations


def test_pick_finalists_takes_a_share_from_screening_then_the_knockouts():
    from workbench.search.finalists import pick_finalists

    a, b, c, d, e, f = [(0, i) for i in range(6)]
    # k = 5, share 0.25: ceil(1.25) = 2 screening heads, then the knockouts' order without
    # repeats
    assert pick_finalists([a, b, c], [c, b, d, e, f], 5, 0.25) == [a, b, c, d, e]
    assert pick_finalists([a, b, c], [c, b, d, e, f], 5, 0.0) == [c, b, d, e, f]
    assert pick_finalists([a, b, c], [c, d], 5, 0.25) == [a, b, c, d]  # all there are
    assert pick_finalists([a, b], [c], 3, 1.0) == [a, b, c]  # screening runs out first
    assert pick_finalists([a], [], 3, 0.25) == [a]
