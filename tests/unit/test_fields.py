"""``toolkit.fields.Fields``: one typed reader, whose errors each strategy words its own way.

A plain strategy here shows what the reader hands it (the path, what was expected, the
value or ``MISSING``); the run directory's and the node's strategies show that one reader
keeps each one's messages.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from toolkit.errors import ClusterError, RtkError, RunDirError
from toolkit.fields import MISSING, Errors, FieldPath, Fields, is_integer, is_number
from toolkit.nodeinfo.answer_errors import answer_fields
from toolkit.rundir.record_base import check_version, record_fields


class ReportedError(RtkError):
    """What the reader handed its strategy, kept as attributes to assert on."""

    def __init__(self, path: FieldPath, expected: str, value: Any) -> None:
        super().__init__(f"{path} {expected} {value!r}")
        self.path = path
        self.expected = expected
        self.value = value


class Plain(Errors):
    """A strategy that only reports, in the default words."""

    def error(self, path: FieldPath, expected: str, value: Any) -> ReportedError:
        """The report itself."""
        return ReportedError(path, expected, value)


def plain(data: Any) -> Fields:
    """``data`` as JSON would give it, to read with the plain strategy."""
    return Fields(json.loads(json.dumps(data)), Plain())


def reported(read: Callable[[], object]) -> ReportedError:
    """The report ``read`` raised."""
    with pytest.raises(ReportedError) as caught:
        read()
    return caught.value


RECORD = {
    "name": "n1",
    "count": 3,
    "ratio": 2,
    "ok": False,
    "tags": ["a", "b"],
    "ports": [1, 2],
    "links": [True, False],
    "limits": {"cpu": "4"},
    "gpus": {"GPU-1": {"index": 0}, "GPU-2": {"index": 1}},
    "none": None,
}


def test_each_type_is_read_as_given() -> None:
    f = plain(RECORD)
    assert f.text("name") == "n1"
    assert f.integer("count") == 3
    number = f.number("ratio")
    assert number == 2.0 and isinstance(number, float)
    assert f.flag("ok") is False
    assert f.texts("tags") == ("a", "b")
    assert f.integers("ports") == (1, 2)
    assert f.flags("links") == (True, False)
    assert f.obj("limits") == {"cpu": "4"}
    assert f.text_map("limits") == {"cpu": "4"}
    assert {k: g.integer("index") for k, g in f.children("gpus").items()} == {
        "GPU-1": 0,
        "GPU-2": 1,
    }


@pytest.mark.parametrize("key", ["none", "absent"])
def test_null_and_missing_read_as_none_or_empty_where_allowed(key: str) -> None:
    f = plain(RECORD)
    assert f.text_or_none(key) is None
    assert f.integer_or_none(key) is None
    assert f.number_or_none(key) is None
    assert f.flag_or_none(key) is None
    assert f.obj_or_none(key) is None
    assert f.nested_or_none(key) is None
    assert f.texts(key) == () and f.integers(key) == () and f.flags(key) == ()
    assert f.children(key) == {} and f.text_map(key) == {}


def test_has_tells_missing_from_null() -> None:
    f = plain(RECORD)
    assert f.has("none") and not f.has("absent")


REQUIRED: list[tuple[Callable[[Fields, str], object], str]] = [
    (Fields.text, "a string"),
    (Fields.integer, "an integer"),
    (Fields.number, "a number"),
    (Fields.flag, "true or false"),
    (Fields.obj, "an object"),
    (Fields.nested, "an object"),
    (lambda f, key: f.texts(key, required=True), "a list of strings"),
    (lambda f, key: f.integers(key, required=True), "a list of integers"),
    (lambda f, key: f.flags(key, required=True), "a list of booleans"),
]


@pytest.mark.parametrize(("read", "expected"), REQUIRED)
def test_a_required_field_may_be_neither_missing_nor_null(
    read: Callable[[Fields, str], object], expected: str
) -> None:
    f = plain(RECORD)
    missing = reported(lambda: read(f, "absent"))
    assert (missing.path, missing.expected, missing.value) == (("absent",), expected, MISSING)
    null = reported(lambda: read(f, "none"))
    assert (null.path, null.expected, null.value) == (("none",), expected, None)


WRONG: list[tuple[Callable[[Fields, str], object], object, str]] = [
    (Fields.text, 1, "a string"),
    (Fields.text_or_none, 1, "a string or null"),
    (Fields.integer, 1.5, "an integer"),
    (Fields.integer, True, "an integer"),
    (Fields.integer_or_none, False, "an integer or null"),
    (Fields.number, "1", "a number"),
    (Fields.number, True, "a number"),
    (Fields.number_or_none, [1], "a number or null"),
    (Fields.flag, 0, "true or false"),
    (Fields.flag_or_none, "yes", "true, false or null"),
    (Fields.obj, [], "an object"),
    (Fields.obj_or_none, "x", "an object or null"),
    (Fields.nested, 3, "an object"),
    (Fields.nested_or_none, 3, "an object or null"),
    (Fields.texts, "a", "a list of strings"),
    (Fields.integers, {"a": 1}, "a list of integers"),
    (Fields.flags, True, "a list of booleans"),
]


@pytest.mark.parametrize(("read", "value", "expected"), WRONG)
def test_a_field_of_another_type_is_reported_with_its_value(
    read: Callable[[Fields, str], object], value: object, expected: str
) -> None:
    got = reported(lambda: read(plain({"field": value}), "field"))
    assert (got.path, got.expected, got.value) == (("field",), expected, value)


def test_a_non_finite_number_is_not_a_number() -> None:
    f = Fields({"inf": float("inf"), "nan": float("nan")}, Plain())
    assert reported(lambda: f.number("inf")).expected == "a number"
    assert reported(lambda: f.number_or_none("nan")).expected == "a number or null"
    assert not is_number(float("nan")) and not is_number(True) and is_number(1)
    assert not is_integer(True) and not is_integer(1.0) and is_integer(0)


def test_a_wrong_item_is_reported_by_its_index() -> None:
    got = reported(lambda: plain({"ports": [1, "2", 3]}).integers("ports"))
    assert (got.path, got.expected, got.value) == (("ports", 1), "an integer", "2")
    got = reported(lambda: plain({"tags": ["a", None]}).texts("tags"))
    assert (got.path, got.expected, got.value) == (("tags", 1), "a string", None)


def test_a_nested_field_is_reported_by_its_whole_path() -> None:
    f = plain({"gpus": {"devices": {"GPU-1": {"links": [True, 1]}}}})
    devices = f.nested("gpus").children("devices")
    got = reported(lambda: devices["GPU-1"].flags("links"))
    assert got.path == ("gpus", "devices", "GPU-1", "links", 1)
    got = reported(lambda: f.nested("gpus").nested("devices").text("GPU-1"))
    assert (got.path, got.value) == (("gpus", "devices", "GPU-1"), {"links": [True, 1]})


def test_an_entry_of_children_that_is_no_object_is_reported_by_its_path() -> None:
    got = reported(lambda: plain({"reach": {"n2:gcs": 5}}).children("reach"))
    assert (got.path, got.expected, got.value) == (("reach", "n2:gcs"), "an object", 5)


def test_fail_reports_a_field_as_it_is() -> None:
    f = plain({"span": [1]})
    got = f.fail("span", "[low, high]")
    assert isinstance(got, ReportedError)
    assert (got.path, got.expected, got.value) == (("span",), "[low, high]", [1])
    absent = f.fail("absent", "x")
    assert isinstance(absent, ReportedError) and absent.value is MISSING


def test_what_is_no_object_is_reported_at_its_root() -> None:
    got = reported(lambda: plain([1, 2]))
    assert (got.path, got.expected, got.value) == ((), "an object", [1, 2])


# The run directory's strategy: the file first, a missing field shown as None, a list
# with a wrong item shown whole.


@pytest.mark.parametrize(
    ("data", "read", "message"),
    [
        ({}, lambda f: f.text("run_id"), "run.json: run_id: expected text, got None"),
        ({"run_id": 3}, lambda f: f.text("run_id"), "run.json: run_id: expected text, got 3"),
        (
            {"step": "1"},
            lambda f: f.integer_or_none("step"),
            "run.json: step: expected an integer or null, got '1'",
        ),
        (
            {"settled": 1},
            lambda f: f.flag_or_none("settled"),
            "run.json: settled: expected true, false or null, got 1",
        ),
        (
            {"command": ["rtk", 1]},
            lambda f: f.texts("command", required=True),
            "run.json: command: expected a list of text, got ['rtk', 1]",
        ),
        ({"v": 2}, lambda f: check_version(f, 1), "run.json: v: expected version 1, got 2"),
    ],
)
def test_a_record_error_names_the_file_and_the_key(
    data: dict[str, Any], read: Callable[[Fields], object], message: str
) -> None:
    with pytest.raises(RunDirError) as caught:
        read(record_fields(data, "run.json"))
    assert str(caught.value).endswith(message) and str(caught.value).startswith("run.json: ")


def test_a_record_that_is_no_object_is_named_as_such() -> None:
    with pytest.raises(RunDirError, match=r"^run\.json: expected a JSON object, got \[1\]$"):
        record_fields([1], "run.json")
    check_version(record_fields({}, "run.json"), 1)  # no version: the one supported


# The node's strategy: the node and the answer first, a dotted path, ``missing`` when
# absent, the value cut to 80 characters.


@pytest.mark.parametrize(
    ("data", "read", "message"),
    [
        ({}, lambda f: f.flag("ok"), "field 'ok' should be true or false, missing"),
        ({"ok": None}, lambda f: f.flag("ok"), "field 'ok' should be true or false, got None"),
        (
            {"gpus": {"devices": {"GPU-1": {"links": [1]}}}},
            lambda f: f.nested("gpus").children("devices")["GPU-1"].flags("links"),
            "field 'gpus.devices.GPU-1.links[0]' should be true or false, got 1",
        ),
        (
            {"gpus": 3},
            lambda f: f.nested_or_none("gpus"),
            "field 'gpus' should be an object, got 3",
        ),
        ({"mig": 1}, lambda f: f.flag_or_none("mig"), "field 'mig' should be true or false, got 1"),
        ({"name": "x" * 200}, lambda f: f.integer("name"), f"got '{'x' * 79}"),
    ],
)
def test_a_node_answer_error_names_the_node_and_the_field(
    data: dict[str, Any], read: Callable[[Fields], object], message: str
) -> None:
    with pytest.raises(ClusterError) as caught:
        read(answer_fields("n1", "probe answer", data))
    text = str(caught.value)
    assert text.startswith("n1: malformed probe answer from the node: field ")
    assert text.endswith(message), text


def test_a_node_answer_that_is_no_object_is_the_answer_itself() -> None:
    with pytest.raises(ClusterError, match=r"field '\(the answer\)' should be an object, got 'x'$"):
        answer_fields("n1", "probe answer", "x")
    with pytest.raises(ClusterError, match=r"field 'gpus' should be an object, got 'x'$"):
        answer_fields("n1", "GPU facts", "x", ("gpus",))


def test_a_list_of_objects_is_read_each_by_its_path() -> None:
    f = plain({"ranks": [{"rank": 0}, {"rank": "one"}], "none": None})
    ranks = f.objects("ranks")
    assert [r.path for r in ranks] == [("ranks", 0), ("ranks", 1)]
    assert ranks[0].integer("rank") == 0
    got = reported(lambda: ranks[1].integer("rank"))
    assert (got.path, got.value) == (("ranks", 1, "rank"), "one")
    assert f.objects("none") == [] and f.objects("absent") == []
    got = reported(lambda: plain({"ranks": 3}).objects("ranks"))
    assert (got.path, got.expected) == (("ranks",), "a list of objects")
    got = reported(lambda: plain({"ranks": [{}, 7]}).objects("ranks"))
    assert (got.path, got.expected, got.value) == (("ranks", 1), "an object", 7)
