"""Problem folders load, and every defect is reported with the file and the field."""
import json

import pytest

from corpora.problem import ProblemError, load_problem
from tests.conftest import KERNELS


def test_shipped_examples_load():
    for name in ("vector_add", "tiled_matmul"):
        p = load_problem(KERNELS / name)
        assert p.name == name
        assert len(p.workloads) >= 3
        assert p.solution.entry == name
        assert "def run" in p.reference_source


def test_const_axes_and_flashinfer_workloads(tmp_path, problem_copy):
    root = problem_copy("vector_add")
    d = json.loads((root / "definition.json").read_text())
    d["axes"]["V"] = {"type": "const", "value": 4}
    (root / "definition.json").write_text(json.dumps(d))
    (root / "workloads.jsonl").write_text(json.dumps({"workload": {"axes": {"N": 10}}}) + "\n")
    p = load_problem(root)
    assert p.workloads[0].axes == {"N": 10, "V": 4}


@pytest.mark.parametrize("mutate, needle", [
    (lambda d: d.pop("outputs"), "definition.json: outputs"),
    (lambda d: d["inputs"]["a"].update(dtype="float8"), "inputs.a.dtype"),
    (lambda d: d["inputs"]["a"].update(shape=["Q"]), "axis 'Q' is not in 'axes'"),
    (lambda d: d.update(reference="x = 1"), "must define run"),
    (lambda d: d.update(reference="def run(:\n"), "reference: line 1"),
])
def test_definition_errors_name_file_and_field(problem_copy, mutate, needle):
    root = problem_copy("vector_add")
    d = json.loads((root / "definition.json").read_text())
    mutate(d)
    (root / "definition.json").write_text(json.dumps(d))
    with pytest.raises(ProblemError) as exc:
        load_problem(root)
    assert needle in str(exc.value)
    assert str(root / "definition.json") in str(exc.value)


@pytest.mark.parametrize("lines, needle", [
    ('{"axes": {"N": 10}\n', "workloads.jsonl:1: invalid JSON"),
    ('{"axes": {}}\n', "axes.N: missing value"),
    ('{"axes": {"N": -3}}\n', "non-negative integer"),
    ('{"axes": {"N": 0}}\n', "violates constraint 'N >= 1'"),
    ('{"axes": {"N": 5, "Z": 1}}\n', "unknown axis 'Z'"),
    ("", "no workloads"),
])
def test_workload_errors(problem_copy, lines, needle):
    root = problem_copy("vector_add")
    (root / "workloads.jsonl").write_text(lines)
    with pytest.raises(ProblemError) as exc:
        load_problem(root)
    assert needle in str(exc.value)


def test_missing_files(problem_copy, tmp_path):
    root = problem_copy("vector_add")
    (root / "solution.toml").unlink()
    with pytest.raises(ProblemError, match="solution.toml: missing"):
        load_problem(root)
    with pytest.raises(ProblemError, match="not a problem folder"):
        load_problem(tmp_path / "nope")


def test_per_file_solution_overrides():
    p = load_problem(KERNELS / "vector_add")
    assert "vector_load" in p.solution.carriers
    assert p.solution.for_file("naive.cu").carriers == []
    assert p.solution.for_file("naive.cu").entry == "vector_add"


def test_constraints_membership_in_a_literal_tuple():
    """`K in (256, 512)` is data like any comparison; a tuple anywhere else, or of non-numbers, is refused."""
    from corpora.constraints import ConstraintError, evaluate, parse

    tree = parse("K in (256, 512, 1024) and N not in (0,)")
    assert evaluate(tree, {"K": 512, "N": 3}) is True
    assert evaluate(tree, {"K": 300, "N": 3}) is False
    assert evaluate(tree, {"K": 256, "N": 0}) is False
    for bad in ("K in K", "(1, 2) == K", "K in ('a',)", "K in (1, K)", "K in (1, __import__)"):
        with pytest.raises(ConstraintError):
            parse(bad)
