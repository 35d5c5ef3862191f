import pytest

from services.model.labels import SelectorError, matches, validate_selector


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        (None, {"a": "1"}, True),
        ({}, {}, True),
        ({"matchLabels": {"app": "sample"}}, {"app": "sample", "x": "y"}, True),
        ({"matchLabels": {"app": "sample"}}, {"app": "other"}, False),
        ({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, {"app": "nginx"}, True),
        ({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, {"b": "1"}, False),
        ({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, {"b": "1"}, True),
        ({"matchExpressions": [{"key": "env", "operator": "In", "values": ["a", "b"]}]}, {"env": "b"}, True),
        ({"matchExpressions": [{"key": "env", "operator": "In", "values": ["a"]}]}, {}, False),
        ({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["a"]}]}, {}, True),
        ({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["a"]}]}, {"env": "a"}, False),
    ],
)
def test_matches(selector, labels, expected):
    assert matches(selector, labels) is expected


@pytest.mark.parametrize(
    ("selector", "field"),
    [
        (
            {"matchExpressions": [{"key": "a", "operator": "Near"}]},
            "spec.selector.matchExpressions[0].operator",
        ),
        ({"matchExpressions": [{"key": "a", "operator": "In"}]}, "spec.selector.matchExpressions[0].values"),
        ({"matchLabels": ["a"]}, "spec.selector.matchLabels"),
    ],
)
def test_invalid_selector_names_field(selector, field):
    with pytest.raises(SelectorError) as err:
        validate_selector(selector)
    assert err.value.field == field
