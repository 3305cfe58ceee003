"""Subscriptions: tag expressions, SQL92 validation, the client's tag re-check, JSON form."""

from __future__ import annotations

import json
import time

import pytest

from rocketmesh.filter import (
    ExpressionType,
    FilterSyntaxError,
    SubscriptionData,
    build_subscription,
)
from rocketmesh.model.codec import tags_hash_code


@pytest.mark.parametrize("expression,tags", [
    ("TagA", {"TagA"}),
    ("TagA || TagB", {"TagA", "TagB"}),
    ("TagA||TagB", {"TagA", "TagB"}),
    ("  TagA ||TagB||  ", {"TagA", "TagB"}),
    ("TagA || || TagB", {"TagA", "TagB"}),
    ("TagA || TagA", {"TagA"}),
    ("\tTagA\n|| TagB", {"TagA", "TagB"}),
    ("Tag A || Tag B", {"Tag A", "Tag B"}),
    ("TagA || *", {"TagA", "*"}),  # only "*" alone means everything
    ("TagA|||TagB", {"TagA", "|TagB"}),  # split as Java's split("\\|\\|") does
])
def test_tag_expressions_split_on_double_bar(expression, tags):
    sub = build_subscription("TopicTest", expression)
    assert sub.topic == "TopicTest"
    assert sub.expression_type is ExpressionType.TAG
    assert sub.sub_string == expression  # kept as written, as RocketMQ does
    assert sub.tags_set == frozenset(tags)
    assert sub.code_set == frozenset(tags_hash_code(t) for t in tags)
    assert not sub.matches_all()


@pytest.mark.parametrize("expression", [None, "", "*"])
def test_star_empty_and_none_subscribe_to_everything(expression):
    sub = build_subscription("TopicTest", expression)
    assert sub.sub_string == "*"
    assert sub.matches_all()
    assert sub.tags_set == frozenset() and sub.code_set == frozenset()
    assert sub.is_tag_matched("anything") and sub.is_tag_matched(None)


@pytest.mark.parametrize("expression", ["||", "||||", " || ", "   ", "\t"])
def test_an_expression_naming_no_tag_is_refused(expression):
    with pytest.raises(FilterSyntaxError, match="names no tag"):
        build_subscription("TopicTest", expression)


def test_code_set_is_java_string_hash_codes():
    sub = build_subscription("T", "Aa || TagA")
    assert tags_hash_code("Aa") == 2112  # Java: "Aa".hashCode()
    assert sub.code_set == {2112, tags_hash_code("TagA")}


def test_is_tag_matched_checks_the_tag_itself():
    sub = build_subscription("T", "TagA || TagB")
    assert sub.is_tag_matched("TagA") and sub.is_tag_matched("TagB")
    assert not sub.is_tag_matched("TagC")
    assert not sub.is_tag_matched("taga")
    assert not sub.is_tag_matched(None)  # a message without a tag never matches a tag set
    assert not sub.is_tag_matched("")


def test_hash_collisions_are_caught_by_the_client_check():
    sub = build_subscription("T", "Aa")
    assert tags_hash_code("BB") == tags_hash_code("Aa")
    assert tags_hash_code("BB") in sub.code_set  # the broker's code check lets "BB" through
    assert not sub.is_tag_matched("BB")
    assert sub.is_tag_matched("Aa")


@pytest.mark.parametrize("expression_type", [ExpressionType.TAG, "TAG", None, ""])
def test_tag_type_spellings(expression_type):
    sub = build_subscription("T", "TagA", expression_type)
    assert sub.expression_type is ExpressionType.TAG and sub.tags_set == {"TagA"}


@pytest.mark.parametrize("expression_type", ["SQL", "tag", "sql92", "XPATH", "CLASS"])
def test_unknown_expression_types_are_refused(expression_type):
    with pytest.raises(FilterSyntaxError, match="unknown expression type"):
        build_subscription("T", "TagA", expression_type)


@pytest.mark.parametrize("expression_type", [ExpressionType.SQL92, "SQL92"])
def test_sql_subscription_is_validated_and_has_no_tags(expression_type):
    sub = build_subscription("T", "a > 5 AND TAGS IN ('TagA')", expression_type)
    assert sub.expression_type is ExpressionType.SQL92
    assert sub.sub_string == "a > 5 AND TAGS IN ('TagA')"
    assert sub.tags_set == frozenset() and sub.code_set == frozenset()
    assert not sub.matches_all()
    # The broker evaluated the selector already: the client takes what it is sent.
    assert sub.is_tag_matched("TagZ") and sub.is_tag_matched(None)


@pytest.mark.parametrize("expression", ["a >", "a = NULL", "", None, "*"])
def test_bad_sql_fails_at_subscribe_time(expression):
    with pytest.raises(FilterSyntaxError):
        build_subscription("T", expression, ExpressionType.SQL92)


def test_non_string_expression_is_refused():
    with pytest.raises(FilterSyntaxError):
        build_subscription("T", 5)  # type: ignore[arg-type]


def test_sub_version_is_a_millisecond_clock_that_only_grows():
    before = int(time.time() * 1000)
    versions = [build_subscription("T", "*").sub_version for _ in range(50)]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    assert before - 1000 <= versions[0] <= int(time.time() * 1000) + 1000


def test_json_has_rocketmq_keys_and_round_trips():
    sub = build_subscription("TopicTest", "TagB || TagA")
    d = sub.to_json()
    assert d == {
        "topic": "TopicTest",
        "subString": "TagB || TagA",
        "expressionType": "TAG",
        "tagsSet": ["TagA", "TagB"],
        "codeSet": sorted([tags_hash_code("TagA"), tags_hash_code("TagB")]),
        "subVersion": sub.sub_version,
        "classFilterMode": False,
    }
    assert SubscriptionData.from_json(json.loads(json.dumps(d))) == sub


@pytest.mark.parametrize("expression,expression_type", [("*", "TAG"), ("a IS NOT NULL", "SQL92"), ("Aa||BB", "TAG")])
def test_round_trip_of_each_kind(expression, expression_type):
    sub = build_subscription("T", expression, expression_type)
    assert SubscriptionData.from_json(sub.to_json()) == sub


def test_from_json_of_a_java_client_heartbeat_entry():
    d = {"classFilterMode": False, "codeSet": [2598919], "expressionType": "TAG", "subString": "TagA",
         "subVersion": 1700000000000, "tagsSet": ["TagA"], "topic": "TopicTest"}
    sub = SubscriptionData.from_json(d)
    assert sub == SubscriptionData("TopicTest", "TagA", ExpressionType.TAG, frozenset({"TagA"}),
                                   frozenset({2598919}), 1700000000000)


def test_from_json_fills_what_is_missing():
    sub = SubscriptionData.from_json({"topic": "T", "subString": "TagA || TagB"})
    assert sub.expression_type is ExpressionType.TAG
    assert sub.tags_set == {"TagA", "TagB"}
    assert sub.code_set == {tags_hash_code("TagA"), tags_hash_code("TagB")}
    assert sub.sub_version > 0
    assert SubscriptionData.from_json({"topic": "T"}).matches_all()


@pytest.mark.parametrize("d,error,message", [
    ({"subString": "*"}, ValueError, "topic"),
    ({"topic": "", "subString": "*"}, ValueError, "topic"),
    ({"topic": "T", "subString": 5}, ValueError, "subString"),
    ({"topic": "T", "subString": "*", "expressionType": "XPATH"}, FilterSyntaxError, "unknown expression type"),
    ({"topic": "T", "subString": "a >", "expressionType": "SQL92"}, FilterSyntaxError, "position 3"),
    ({"topic": "T", "expressionType": "SQL92"}, ValueError, "subString"),
    ({"topic": "T", "subString": "A", "tagsSet": "A"}, ValueError, "tagsSet must be a list"),
    ({"topic": "T", "subString": "A", "tagsSet": [1]}, ValueError, "tagsSet holds 1"),
    ({"topic": "T", "subString": "A", "codeSet": ["65"]}, ValueError, "codeSet holds '65'"),
    ({"topic": "T", "subString": "A", "codeSet": [True]}, ValueError, "codeSet holds True"),
    ({"topic": "T", "subString": "A", "subVersion": "v1"}, ValueError, "subVersion"),
    ({"topic": "T", "subString": "A", "classFilterMode": True}, ValueError, "class filter mode"),
    (["topic", "T"], ValueError, "JSON object"),
])
def test_from_json_refuses_malformed_input(d, error, message):
    with pytest.raises(error, match=message):
        SubscriptionData.from_json(d)


def test_dataclass_coerces_plain_collections_and_type_names():
    sub = SubscriptionData("T", "A", "TAG", {"A"}, [65], 1)  # type: ignore[arg-type]
    assert sub.expression_type is ExpressionType.TAG
    assert sub.tags_set == frozenset({"A"}) and isinstance(sub.tags_set, frozenset)
    assert sub.code_set == frozenset({65}) and isinstance(sub.code_set, frozenset)
