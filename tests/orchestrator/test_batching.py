"""Algorithm 2 on the paper's Figure-7 example, both depth directions, FIFO, PO and TO sizing."""
from __future__ import annotations

import pytest

from conftest import make_graph
from orchestrator.batching import Blind, Pending, PerInvocation, TopologyAware, make_policy
from orchestrator.engines.profiles import LinearProfile, TableProfile, max_efficient_batch
from orchestrator.primitives import Kind, Lit, Node, Ref


def _llm(nid, *srcs):
    return Node(nid, Kind.PREFILLING, "c", "llm", {"segments": tuple(Ref(s) for s in srcs) or (Lit("x"),)},
                {"kv_chain": nid})


def _other(nid, *srcs):
    return Node(nid, Kind.RERANKING, "c", "rr", {"parts": tuple(Ref(s) for s in srcs)})


def figure7():
    """Query 1: A -> C -> F and B -> E <- D (D unfinished); query 2: G -> I -> J and H -> K.
    A, B, G, H wait on the LLM. Depth (backwards from outputs): A 2, B 1, G 2, H 1."""
    q1 = make_graph([_llm("A"), _llm("B"), _other("D"), _other("C", "A"), _other("F", "C"), _other("E", "B", "D")],
                    outputs=("F", "E"))
    q2 = make_graph([_llm("G"), _llm("H"), _other("I", "G"), _other("J", "I"), _other("K", "H")],
                    outputs=("J", "K"))
    pend, seq = [], 0
    for qid, (g, names, arrival) in enumerate([(q1, "AB", 0.0), (q2, "GH", 0.1)]):
        for n in names:
            seq += 1
            pend.append(Pending(qid, arrival, 0.2, seq, g.depth[n], 1, n))
    return q1, q2, pend


def test_figure7_depths():
    q1, q2, _ = figure7()
    assert (q1.depth["A"], q1.depth["B"], q2.depth["G"], q2.depth["H"]) == (2, 1, 2, 1)


def test_figure7_topology_aware_picks_A_G_blind_picks_A_B():
    _, _, pend = figure7()
    assert {p.node_id for p in TopologyAware(direction="highest").select(pend, capacity=2)} == {"A", "G"}
    assert {p.node_id for p in Blind().select(pend, capacity=2)} == {"A", "B"}


def test_figure7_lowest_depth_direction_picks_B_H():
    _, _, pend = figure7()
    assert {p.node_id for p in TopologyAware(direction="lowest").select(pend, capacity=2)} == {"B", "H"}


def test_topology_aware_orders_buckets_by_arrival_and_fills_rounds():
    _, _, pend = figure7()
    order = [p.node_id for p in TopologyAware(direction="highest").select(pend, capacity=4)]
    assert order == ["A", "G", "B", "H"]
    assert [p.node_id for p in TopologyAware(direction="highest").select(pend, capacity=1)] == ["A"]


def test_po_takes_one_invocation_and_sizes_are_respected():
    _, _, pend = figure7()
    assert [p.node_id for p in PerInvocation().select(pend, capacity=8)] == ["A"]
    big = [Pending(0, 0.0, 0.0, i, 0, 5, f"n{i}") for i in range(3)]
    assert len(Blind().select(big, capacity=8)) == 1          # 5 + 5 > 8
    assert len(Blind().select(big[:1], capacity=2)) == 1      # an oversized primitive still runs alone


def test_unknown_policy_and_direction_fail_loudly():
    with pytest.raises(KeyError, match="known"):
        make_policy("greedy")
    with pytest.raises(ValueError):
        TopologyAware(direction="deepest")


def test_to_batch_size_doubles_until_throughput_stops_improving():
    # throughput b / (10 + b): doubling gains 1.83 1.71 1.56 1.38 1.22 1.12 1.07 | 1.04 -> 128
    prof = LinearProfile(base_ms=10.0, per_item_ms=1.0)
    assert max_efficient_batch(lambda b: prof.batch_s(b, 0)) == 128
    assert max_efficient_batch(lambda b: prof.batch_s(b, 0), min_gain=1.5) == 8
    assert max_efficient_batch(lambda b: prof.batch_s(b, 0), limit=16) == 16
    flat = TableProfile((1, 2, 4, 8), (256,), ((8.0, 10.0, 16.0, 29.0),))   # 2/10 vs 1/8: 1.6x; 4/16 1.25x; 8/29 1.10x
    assert max_efficient_batch(lambda b: flat.batch_s(b, 256), limit=8) == 8
    assert max_efficient_batch(lambda b: flat.batch_s(b, 256), min_gain=1.2) == 4
    linear = LinearProfile(base_ms=0.0, per_item_ms=1.0)     # no gain from batching at all
    assert max_efficient_batch(lambda b: linear.batch_s(b, 0)) == 1


def _linear(fixed_s: float, per_item_s: float):
    return lambda batch: fixed_s + per_item_s * sum(p.size for p in batch)


def test_topology_aware_trim_merges_other_queries_only_while_it_pays_in_latency():
    """Invocations of w = 0.1 s each: with a fixed cost of 0.04 s the second query waits to run
    alone (sum of completions 0.14 + 0.28 < 2 x 0.24); with 0.15 s it joins (2 x 0.35 < 0.25 +
    0.5) and a third does not (it would delay two others by 0.1 s each to save 0.15 s)."""
    pend = [Pending(q, 0.0, 0.0, q, 0, 10, f"n{q}") for q in range(3)]
    topo = TopologyAware()
    assert topo.trim(list(pend), _linear(0.04, 0.01)) == pend[:1]
    assert topo.trim(list(pend), _linear(0.15, 0.01)) == pend[:2]
    assert topo.trim(list(pend), _linear(0.3, 0.01)) == pend           # 2 x 0.1 < 0.3: all three


def test_topology_aware_trim_keeps_a_querys_own_primitives_together():
    same = [Pending(7, 0.0, 0.0, i, 0, 10, f"n{i}") for i in range(3)]
    assert TopologyAware().trim(list(same), _linear(0.0, 0.01)) == same   # no other query delayed


def test_fifo_and_per_invocation_never_trim():
    pend = [Pending(q, 0.0, 0.0, q, 0, 10, f"n{q}") for q in range(3)]
    assert Blind().trim(list(pend), _linear(0.0, 0.01)) == pend
