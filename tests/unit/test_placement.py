"""Placement: live nodes only, fewest sessions first, a deterministic tie-break."""

from __future__ import annotations

import random

from runtime.cluster.placement import Candidate, natural_key, place


def test_fewest_sessions_first() -> None:
    assert place([Candidate("n1", True, 3), Candidate("n2", True, 1),
                  Candidate("n3", True, 2)]) == "n2"


def test_dead_nodes_never_get_a_session_however_empty() -> None:
    assert place([Candidate("n1", False, 0), Candidate("n2", True, 9)]) == "n2"
    assert place([Candidate("n1", False, 0)]) is None
    assert place([]) is None


def test_ties_go_to_the_lowest_id_in_natural_order_whatever_the_input_order() -> None:
    nodes = [Candidate(f"n{i}", True, 1) for i in (10, 2, 3)] + [Candidate("n1", False, 1)]
    for _ in range(20):
        random.shuffle(nodes)
        assert place(nodes) == "n2"
    assert sorted(["n10", "n9", "n1"], key=natural_key) == ["n1", "n9", "n10"]


def test_sessions_placed_one_after_another_spread_evenly() -> None:
    counts = {"n1": 0, "n2": 0, "n3": 0}
    order = []
    for _ in range(7):
        chosen = place([Candidate(k, True, v) for k, v in counts.items()])
        assert chosen is not None
        counts[chosen] += 1
        order.append(chosen)
    assert order == ["n1", "n2", "n3", "n1", "n2", "n3", "n1"]
