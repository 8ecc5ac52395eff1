"""Each check at its boundary (issue 51, class (b) of the mutation pass: checks tested only
with clearly wrong values let a boundary value through unseen): the last value in, the first
out, zero, negative, the largest and smallest float, booleans where numbers belong, NaN/inf.
Each case's id says what it pins; the expectation is the check's documented range.
"""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, MetricRecord, RecordDict

from server_math.node_reports import MAX_PARTITIONS, check_node_report
from server_math.records import REPORTED_METRICS, ReplyMetric
from server_math.reply_screen import BadUpdate, check_metric, check_norms, check_reply

MAX, TINY = sys.float_info.max, 5e-324  # the largest float, the smallest (subnormal) one
NEXT_UP = math.nextafter

# --- node reports: (client-id, num-clients), 0 <= id < N <= MAX_PARTITIONS, plain ints ------

NODE_REPORTS = [  # (client-id, num-clients, refused: the words of the refusal, or None)
    (0, 1, None),  # the smallest federation: one client, id 0
    (0, 0, "outside [1,"),  # N = 0
    (0, -1, "outside [1,"),  # N negative
    (-1, 4, "outside [0,"),  # id one below the range
    (3, 4, None),  # the last id
    (4, 4, "outside [0,"),  # one past the last id
    (0, MAX_PARTITIONS, None),  # the largest N
    (0, MAX_PARTITIONS + 1, "outside [1,"),  # one past it
    (2 ** 63, 2 ** 64, "outside [1,"),  # past int64
    (True, 4, "not an integer"),  # a bool is no id (True == 1 in Python)
    (0, True, "not an integer"),
    (1.0, 4, "not an integer"),  # a whole float is no integer either
    (0, 4.0, "not an integer"),
    (float("nan"), 4, "not an integer"),
    (0, float("inf"), "not an integer"),
    ("1", 4, "not an integer"),
    (None, 4, "not an integer"),
]


@pytest.mark.parametrize("pid, nparts, refused", NODE_REPORTS,
                         ids=[f"{p!r}-of-{n!r}" for p, n, _ in NODE_REPORTS])
def test_node_report_at_its_boundaries(pid, nparts, refused):
    why = check_node_report(pid, nparts)
    if refused is None:
        assert why is None
    else:
        assert why is not None and refused in why, why


# --- client replies: the weight, the rule's metrics, the update norm ------------------------

PHI = {"w": torch.zeros(3)}


def reply(n, **metrics) -> RecordDict:
    return RecordDict({"arrays": ArrayRecord({"w": torch.ones(3)}),
                       "metrics": MetricRecord({"num-examples": n, **metrics})})


WEIGHTS = [  # (claimed num-examples, accepted)
    (0, True),  # zero: allowed (weighs nothing)
    (0.0, True),
    (-0.0, True),  # negative zero is zero
    (TINY, True),  # the smallest positive float
    (-TINY, False),  # the smallest negative one
    (-1, False),
    (MAX, True),  # the largest finite float (capped later by limit_influence)
    (2 ** 63 - 1, True),  # the largest int64 a MetricRecord holds
    (float("inf"), False),
    (float("-inf"), False),
    (float("nan"), False),
    (True, None),  # a bool where a number belongs: Flower's MetricRecord refuses it itself
    (False, None),
]


@pytest.mark.parametrize("n, ok", WEIGHTS, ids=[repr(n) for n, _ in WEIGHTS])
def test_reply_weight_at_its_boundaries(n, ok):
    if ok is None:  # no reply can carry it (the screen checks is_number all the same)
        with pytest.raises(TypeError, match="valid type"):
            reply(n)
    elif ok:
        assert check_reply(reply(n), PHI, "num-examples")[1] == float(n)
    else:
        with pytest.raises(BadUpdate, match="num-examples.*finite number >= 0"):
            check_reply(reply(n), PHI, "num-examples")


UNIT = ReplyMetric(0.0, 1.0)
WHOLE = ReplyMetric(0.0, 10.0, integer=True)
METRICS = [  # (spec, value, accepted)
    (UNIT, 0.0, True),  # the low end, in
    (UNIT, 1.0, True),  # the high end, in
    (UNIT, NEXT_UP(1.0, 2.0), False),  # one float past the high end
    (UNIT, NEXT_UP(0.0, -1.0), False),  # one float below the low end (-TINY)
    (UNIT, -0.0, True),
    (UNIT, 1, True),  # an int in range
    (UNIT, True, False),  # a bool, == 1
    (UNIT, False, False),  # a bool, == 0
    (UNIT, float("nan"), False),
    (ReplyMetric(), float("inf"), False),  # unbounded range: inf is still no finite number
    (ReplyMetric(), -MAX, True),
    (UNIT, None, False),  # missing
    (UNIT, [0.5], False),  # a list
    (WHOLE, 10, True),
    (WHOLE, 10.0, True),  # a whole float counts as whole
    (WHOLE, 11, False),  # one past the end
    (WHOLE, 0.5, False),
    (WHOLE, NEXT_UP(3.0, 4.0), False),  # not quite whole
]


@pytest.mark.parametrize("spec, value, ok", METRICS,
                         ids=[f"{i}-{v!r}" for i, (_, v, _) in enumerate(METRICS)])
def test_rule_metric_at_its_boundaries(spec, value, ok):
    record = {} if value is None else {"x": value}  # (a mapping: a bool as a rule might get)
    if ok:
        check_metric(record, "x", spec)
    else:
        with pytest.raises(BadUpdate, match="metric 'x' = .*expected a finite"):
            check_metric(record, "x", spec)


def test_reported_metrics_ranges_hold_their_ends():
    """train-acc 1.0 is kept, the next float above it is out (the ranges are closed)."""
    spec = REPORTED_METRICS["train-acc"]
    check_metric(MetricRecord({"train-acc": 1.0}), "train-acc", spec)
    with pytest.raises(BadUpdate):
        check_metric(MetricRecord({"train-acc": NEXT_UP(1.0, 2.0)}), "train-acc", spec)


NORMS = [  # (update norm, max-update-norm, accepted)
    (2.0, 2.0, True),  # at the bound: kept (the bound is <=)
    (NEXT_UP(2.0, 3.0), 2.0, False),  # one float past it
    (MAX, 0.0, True),  # 0 = no bound: the largest finite norm is kept
    (0.0, TINY, True),  # a zero update under the smallest bound
]


@pytest.mark.parametrize("norm, bound, ok", NORMS, ids=["at", "one-past", "off", "zero"])
def test_update_norm_bound_at_its_boundaries(norm, bound, ok):
    model = {"w": torch.zeros(3)}
    if ok:
        assert check_norms(model, PHI, norm, bound) == norm
    else:
        with pytest.raises(BadUpdate, match="max-update-norm"):
            check_norms(model, PHI, norm, bound)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_update_values_are_named(value):
    """A NaN or Inf in the update makes its norm non-finite: refused, naming the tensor."""
    model = {"w": torch.tensor([0.0, value, 0.0])}
    with pytest.raises(BadUpdate, match="'w' has 1 NaN/Inf"):
        check_norms(model, PHI, float(torch.linalg.vector_norm(model["w"])), 0.0)


def test_finite_values_whose_norm_overflows_are_refused():
    """float32 values each finite (the largest) whose norm overflows: refused as too large."""
    big = torch.finfo(torch.float32).max
    model = {"w": torch.tensor([big, big, 0.0])}
    with pytest.raises(BadUpdate, match="too large"):
        check_norms(model, PHI, float("inf"), 0.0)


# --- own data's labels: class indices in [0, classes), in every format ----------------------

LABELS = [  # (stored labels, the class indices read, or the words of the refusal)
    ([0, 2], [0, 2]),  # the first and the last class of 3
    ([3], "outside dataset 'custom''s 3 classes"),  # one past the last
    ([-1], "outside dataset 'custom''s 3 classes"),  # one below the first
    ([2 ** 63 - 1], "outside dataset 'custom''s 3 classes"),  # the largest int64
    ([-2 ** 63], "outside dataset 'custom''s 3 classes"),  # the smallest
    ([True, False], [1, 0]),  # booleans are 0 / 1 (docs/data.md#labels)
    ([1.0, -0.0], [1, 0]),  # whole floats, negative zero
    ([1.5], "not a class index"),
    ([float("nan")], "not a class index"),
    ([float("inf")], "not a class index"),
    ([2.0 ** 63], "not a class index"),  # a whole float beyond int64
    ([None], "no label"),
    (["1"], "not a class index"),
]


def image_cells(n: int) -> list:
    from test_hostile_files import cell, grey, pil_bytes

    from PIL import Image
    return [cell(pil_bytes(Image.fromarray(grey(7 * i)))) for i in range(n)]


def own_labels(folder, labels, label_type=None):
    """The labels read from a parquet local copy of custom (3 classes, 1x4x4) with `labels`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from feddata.own_data import read_own_data
    from feddata.specs import spec_of
    from test_hostile_files import custom, settings_of

    struct_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = pa.table({"image": pa.array(image_cells(len(labels)), type=struct_type),
                      "label": pa.array(labels, type=label_type)})
    (folder / "data").mkdir(parents=True)
    pq.write_table(table, folder / "data" / "train-00000-of-00001.parquet")
    return read_own_data(str(folder), spec_of(settings_of(custom(3))), "custom").y.tolist()


@pytest.mark.parametrize("labels, want", LABELS, ids=[repr(v) for v, _ in LABELS])
def test_own_data_labels_at_their_boundaries(tmp_path, labels, want):
    from feddata.own_data import OwnDataError

    if isinstance(want, list):
        assert own_labels(tmp_path, labels) == want
    else:
        with pytest.raises(OwnDataError, match=want):
            own_labels(tmp_path, labels)


@pytest.mark.parametrize("label, want", [
    (2, [2]), (3, "outside"), (2 ** 63, "not a class index"), (2 ** 64 - 1, "not a class index"),
], ids=["last", "one-past", "2^63", "uint64-max"])
def test_own_data_unsigned_labels_beyond_int64_are_refused_not_wrapped(tmp_path, label, want):
    """An unsigned label column: 2^64 - 1 was read as -1 (the cast to int64 wrapped) and
    refused naming a label the file does not hold; now refused as no class index."""
    import pyarrow as pa

    from feddata.own_data import OwnDataError

    if isinstance(want, list):
        assert own_labels(tmp_path, [label], pa.uint64()) == want
    else:
        with pytest.raises(OwnDataError, match=want):
            own_labels(tmp_path, [label], pa.uint64())


@pytest.mark.parametrize("values, want", [
    (np.array([2 ** 64 - 1], dtype=np.uint64), None), ([2 ** 63], None),
    (np.array([2 ** 63 - 1], dtype=np.uint64), [2 ** 63 - 1]), (np.array([], np.uint64), []),
    (np.array([255], dtype=np.uint8), [255]),
], ids=["uint64-max", "python-2^63", "uint64-int64-max", "empty", "uint8-max"])
def test_class_indices_never_wrap(values, want):
    """decode.class_indices (every hub format's labels): exact or refused, never wrapped."""
    from feddata.decode import LabelRefused, class_indices

    if want is None:
        with pytest.raises(LabelRefused, match="not a class index"):
            class_indices(values)
    else:
        assert class_indices(values).tolist() == want


@pytest.mark.parametrize("label, ok", [(9, True), (10, False), (255, False)],
                         ids=["last", "one-past", "byte-max"])
def test_own_data_idx_labels_at_their_boundaries(tmp_path, label, ok):
    """IDX label bytes (0 .. 255) against fashion-mnist's 10 classes."""
    from feddata.idx import IdxRefused, read_idx_split

    (tmp_path / "train-images-idx3-ubyte").write_bytes(
        bytes([0, 0, 8, 3, 0, 0, 0, 1, 0, 0, 0, 28, 0, 0, 0, 28]) + bytes(28 * 28))
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(
        bytes([0, 0, 8, 1, 0, 0, 0, 1, label]))
    if ok:
        _, y = read_idx_split(tmp_path, "train", "fashion-mnist")
        assert y.tolist() == [label]
    else:
        with pytest.raises(IdxRefused, match=f"has label {label}, outside"):
            read_idx_split(tmp_path, "train", "fashion-mnist")


# --- results files: results.json's fields and rows ------------------------------------------

def results(config=None, rows=None, **fields) -> dict:
    return {"config": {"num-server-rounds": 2, **(config or {})},
            **({"rounds": rows} if rows is not None else {}), **fields}


RESULTS_CASES = [  # (results.json's content, the words of the problem, or None)
    (results(), None),
    (results({"num-server-rounds": 0}), None),  # zero rounds: a run that trained nothing
    (results({"num-server-rounds": -1}), "num-server-rounds"),
    (results({"num-server-rounds": True}), "num-server-rounds"),  # a bool where an int goes
    (results({"num-server-rounds": 2.0}), "num-server-rounds"),  # a float where an int goes
    (results(rows=[{"round": 0}]), None),  # round 0 (the initial evaluation)
    (results(rows=[{"round": -1}]), "row 0 has round -1"),
    (results(rows=[{"round": 1}, {"round": 1}]), "row 1 has round 1"),  # not rising
    (results(rows=[{"round": True}]), "row 0 has round True"),
    (results(rows=[{"round": 1, "acc": 1.7976931348623157e308}]), None),  # the largest float
    (results(rows=[{"round": 1, "acc": None}]), None),  # null: not measured
    (results(rows=[{"round": 1, "acc": True}]), "'acc' = True"),
    (results(rows=[{"round": 1, "acc": "0.5"}]), "'acc' = '0.5'"),
    (results(**{"flower-run-id": 2 ** 63}), None),
    (results(**{"flower-run-id": False}), "flower-run-id"),
    (results(**{"flower-run-ids": [1, True]}), "flower-run-ids"),
    (results(summary={"complete": 1}), "complete"),  # 1 is no boolean
    (results(summary={"final-acc": True}), "final-acc"),
    (results(summary={"final-acc": None}), None),
    ([], "JSON list"),
]


@pytest.mark.parametrize("data, problem", RESULTS_CASES,
                         ids=[f"{i}" for i in range(len(RESULTS_CASES))])
def test_results_file_fields_at_their_boundaries(data, problem):
    from reporting.results_file import results_problem

    got = results_problem(data)
    if problem is None:
        assert got is None
    else:
        assert got is not None and problem in got, got


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity"])
def test_results_file_with_a_non_finite_number_is_refused_naming_it(tmp_path, text):
    """JSON's NaN / Infinity (Python writes them, JSON has none): refused, naming the file."""
    from fileio.errors import UnusableFile
    from reporting.results_file import read_results

    (tmp_path / "results.json").write_text(
        '{"config": {"num-server-rounds": 1}, "rounds": [{"round": 1, "acc": %s}]}' % text)
    with pytest.raises(UnusableFile, match="results.json is not valid JSON"):
        read_results(tmp_path)


# --- bounded file reads: the size limit, and a file that changes while read -------------------

@pytest.mark.parametrize("size, limit, ok", [
    (0, 0, True),  # an empty file under a zero limit
    (10, 10, True),  # exactly the limit
    (11, 10, False),  # one byte past it
    (1, 0, False),
], ids=["empty-at-zero", "at-limit", "one-past", "one-past-zero"])
def test_bounded_read_at_its_limit(tmp_path, size, limit, ok):
    from fileio.errors import UnusableFile
    from fileio.reading import read_bounded

    path = tmp_path / "f"
    path.write_bytes(b"x" * size)
    if ok:
        assert read_bounded(path, limit) == b"x" * size
    else:
        with pytest.raises(UnusableFile, match=f"more than the {limit} bytes"):
            read_bounded(path, limit)


def test_bounded_read_of_a_file_that_grows_while_read(tmp_path, monkeypatch):
    """The size is taken once (fstat), then read: bytes beyond it mean the file grew in between
    (here: the size taken before a writer appended 5 bytes); refused, not half read."""
    import os

    from fileio import reading
    from fileio.errors import UnusableFile

    path = tmp_path / "f"
    path.write_bytes(b"x" * 10)
    real_fstat = os.fstat

    def fstat_then_append(fd):
        st = real_fstat(fd)
        with open(path, "ab") as f:
            f.write(b"y" * 5)
        return st

    monkeypatch.setattr(reading.os, "fstat", fstat_then_append)
    with pytest.raises(UnusableFile, match="grew while it was read"):
        reading.read_bounded(path, 100)


def test_bounded_read_of_a_file_that_shrinks_while_read(tmp_path, monkeypatch):
    """A file cut short after its size was taken: what is there is read, never more than the
    limit (the JSON reader then refuses the cut text as no valid JSON, naming the file)."""
    import os

    from fileio import reading
    from fileio.errors import UnusableFile

    path = tmp_path / "results.json"
    path.write_text('{"config": {"num-server-rounds": 1}}')
    real_fstat = os.fstat

    def fstat_then_cut(fd):
        st = real_fstat(fd)
        os.truncate(path, 10)
        return st

    monkeypatch.setattr(reading.os, "fstat", fstat_then_cut)
    with pytest.raises(UnusableFile, match="results.json is not valid JSON"):
        reading.read_json_bounded(path, 100)
