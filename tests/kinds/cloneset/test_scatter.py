"""scatterStrategy ordering as OpenKruise's scatter sorter (pkg/util/updatesort/scatter_sort.go): the rows
of its TestSort table (pod labels, strategy, expected order; the rows without nil pods), restated as
data."""

from __future__ import annotations

from typing import Any

import pytest

from services.kinds.cloneset.rules import model
from services.kinds.cloneset.rules.plan import plan
from services.kinds.cloneset.rules.scatter import scatter
from tests.planner.builders import IDS, cloneset, plan_input, revision_record, running_pod, with_image

ROWS: list[tuple[str, list[dict[str, str]], list[list[str]], list[int]]] = [
    ("a scattered pod + an ordinary pod", [{"labelA": "AAA", "labelB": "BBB"}], [["labelA", "AAA"]], [0]),
    ("all ordinary pods", [{}, {}, {}, {}, {}, {}], [], [0, 1, 2, 3, 4, 5]),
    (
        "one pod one label",
        [{}, {}, {}, {}, {"labelA": "AAA"}, {"labelA": "AAA"}],
        [["labelA", "AAA"]],
        [4, 0, 1, 2, 3, 5],
    ),
    (
        "one pod more labels",
        [
            {},
            {},
            {},
            {},
            {"sdfb": "eee"},
            {"dsf": "same"},
            {"labelB": "BBB"},
            {"labelA": "AAA"},
            {"labelA": "AAA"},
            {"labelA": "AAA", "labelB": "BBB"},
        ],
        [["labelB", "BBB"]],
        [6, 0, 1, 2, 3, 4, 5, 7, 8, 9],
    ),
    (
        "2 dimensions + one pod one label",
        [{"labelB": "BBB"}, {"labelB": "BBB"}, {}, {}, {"labelA": "AAA"}, {"labelA": "AAA"}],
        [["labelA", "AAA"], ["labelB", "BBB"]],
        [0, 4, 2, 3, 5, 1],
    ),
    (
        "2 dimensions + one pod more labels",
        [{}, {}, {}, {"labelB": "BBB"}, {"labelA": "AAA", "labelB": "BBB"}, {"labelA": "AAA"}],
        [["labelA", "AAA"], ["labelB", "BBB"]],
        [4, 0, 1, 2, 5, 3],
    ),
    (
        "2 dimensions + same label + sequence: A + B",
        [
            {},
            {},
            {},
            {},
            {"sdfb": "eee"},
            {"dsf": "same"},
            {"labelB": "BBB"},
            {"labelA": "AAA"},
            {"labelA": "AAA"},
            {"labelB": "BBB"},
        ],
        [["labelB", "BBB"], ["labelA", "AAA"]],
        [7, 6, 0, 1, 2, 3, 4, 5, 9, 8],
    ),
    (
        "2 dimensions + same label + sequence: B + A",
        [
            {},
            {},
            {},
            {},
            {"sdfb": "eee"},
            {"dsf": "same"},
            {"labelB": "BBB"},
            {"labelA": "AAA"},
            {"labelA": "AAA"},
            {"labelB": "BBB"},
        ],
        [["labelA", "AAA"], ["labelB", "BBB"]],
        [6, 7, 0, 1, 2, 3, 4, 5, 8, 9],
    ),
    (
        "2 dimensions + same pod same label + even scatter pods + even ordinary pods",
        [
            {},
            {},
            {},
            {},
            {"sdfb": "eee"},
            {"dsf": "same"},
            {"labelA": "AAA", "labelB": "BBB"},
            {},
            {},
            {"labelB": "BBB", "labelA": "AAA"},
        ],
        [["labelA", "AAA"], ["labelB", "BBB"]],
        [6, 0, 1, 2, 3, 4, 5, 7, 8, 9],
    ),
    (
        "2 dimensions + same pod same label + even scatter pods + odd ordinary pods",
        [
            {},
            {},
            {},
            {"sdfb": "eee"},
            {"dsf": "same"},
            {"labelA": "AAA", "labelB": "BBB"},
            {},
            {},
            {"labelB": "BBB", "labelA": "AAA"},
        ],
        [["labelA", "AAA"], ["labelB", "BBB"]],
        [5, 0, 1, 2, 3, 4, 6, 7, 8],
    ),
    (
        "2 dimensions + same pod same label + even scatter pods + even ordinary pods + more scatter pods",
        [
            {},
            {},
            {},
            {"labelA": "AAA"},
            {"sdfb": "eee", "labelA": "AAA"},
            {"dsf": "same"},
            {"labelA": "AAA", "labelB": "BBB"},
            {},
            {},
            {"labelB": "BBB", "labelA": "AAA"},
        ],
        [["labelA", "AAA"], ["labelB", "BBB"]],
        [6, 3, 0, 1, 4, 2, 5, 7, 8, 9],
    ),
    (
        "2 dimensions + same pod same label + even scatter pods + odd ordinary pods + more scatter pods",
        [
            {},
            {"labelA": "AAA"},
            {"labelA": "AAA"},
            {"sdfb": "eee"},
            {"dsf": "same"},
            {"labelA": "AAA", "labelB": "BBB"},
            {},
            {},
            {"labelB": "BBB", "labelA": "AAA"},
        ],
        [["labelA", "AAA"], ["labelB", "BBB"]],
        [5, 1, 0, 3, 2, 4, 6, 7, 8],
    ),
    (
        "3 dimensions + one pod one label",
        [
            {},
            {"labelA": "AAA"},
            {"labelA": "AAA"},
            {"labelB": "BBB"},
            {"labelB": "BBB"},
            {"labelC": "CCC"},
            {"labelC": "CCC"},
            {"labelC": "CCC"},
            {"labelC": "CCC"},
            {"labelC": "CCC"},
        ],
        [["labelA", "AAA"], ["labelB", "BBB"], ["labelC", "CCC"]],
        [3, 1, 5, 0, 6, 7, 8, 9, 2, 4],
    ),
    (
        "3 dimensions + one pod more label",
        [
            {},
            {"labelA": "AAA"},
            {"labelA": "AAA", "labelC": "CCC"},
            {"labelB": "BBB", "labelC": "CCC"},
            {"labelB": "BBB"},
            {},
            {},
            {"labelC": "CCC"},
            {"labelC": "CCC"},
            {"labelC": "CCC"},
        ],
        [["labelA", "AAA"], ["labelB", "BBB"], ["labelC", "CCC"]],
        [3, 2, 0, 7, 8, 5, 6, 9, 1, 4],
    ),
]


@pytest.mark.parametrize(("desc", "labels", "terms", "expected"), ROWS, ids=[r[0] for r in ROWS])
def test_scatter_sort_rows(
    desc: str, labels: list[dict[str, str]], terms: list[list[str]], expected: list[int]
) -> None:
    indexes = list(range(len(labels)))
    strategy = [{"key": k, "value": v} for k, v in terms]
    assert scatter(indexes, indexes, strategy, lambda i: labels[i]) == expected


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        # TestScatterPodsByRule rows (one term labelA=AAA; "A" = a pod carrying it)
        (["", "", "", "", "A", "A"], [4, 0, 1, 2, 3, 5]),
        (["", "", "", "A", "A", "A"], [3, 0, 1, 4, 2, 5]),
        (["", "", "", "A", "", "", "A"], [3, 0, 1, 2, 4, 5, 6]),
        (["", "", "", "", "", "", "A", "A", "A"], [6, 0, 1, 2, 7, 3, 4, 5, 8]),
        (["", "", "A", "A", "A", "A"], [2, 3, 0, 4, 1, 5]),
        (["", "", "A", "", "A", "A", "A", "A", "A"], [2, 4, 0, 5, 6, 1, 7, 3, 8]),
        (["", "A", "", "A", "", "", "A", "A", "A"], [1, 0, 3, 2, 6, 4, 7, 5, 8]),
    ],
)
def test_scatter_by_one_term(labels: list[str], expected: list[int]) -> None:
    pods = [{"labelA": "AAA"} if value == "A" else {} for value in labels]
    indexes = list(range(len(pods)))
    assert scatter(indexes, indexes, [{"key": "labelA", "value": "AAA"}], lambda i: pods[i]) == expected


def test_planner_spreads_update_candidates_by_zone() -> None:
    strategy: dict[str, Any] = {
        "type": "ReCreate",
        "maxUnavailable": 6,
        "scatterStrategy": [{"key": "zone", "value": "a"}],
    }
    v1 = cloneset(replicas=6, strategy=strategy)
    pods = [running_pod(v1, i) for i in IDS[:6]]
    for pod in pods[:2]:
        pod["metadata"]["labels"]["zone"] = "a"
    v2 = with_image(v1, "nginx:2")
    result = plan(plan_input(v2, pods, [revision_record(v1, 1)]))
    order = [a.pod for a in result.actions if isinstance(a, model.RecreatePod)]
    zone_a = {p["metadata"]["name"] for p in pods[:2]}
    assert len(order) == 6 and order[-1] in zone_a and order[0] in zone_a  # spread: first and last
