"""Skill cards an agent can act on: lifting a real step of a real expert kernel (mining/lift.py)
into a card (skills/skillmd.py) whose example is code people wrote, whose preconditions name the
code shape the optimization needs, whose effects are the step's own, and which the Agent Skills
reference validator (`skills-ref`) accepts; retrieval checks those conditions against query code."""
from pathlib import Path

import pytest
import yaml

from mining.lift import StepContext, artefact_smem, lift_step, static_effects
from mining.operators import get_operator
from skills.skillmd import export_skills

KERNELS = Path(__file__).resolve().parents[2] / "corpora" / "kernels"


def _step(problem: str, op_name: str, source: str, index: int = 1, expert: str = "", static=({}, {})) -> StepContext:
    op = get_operator(op_name)
    site = op.find_sites(source)[0]
    simpler = op.apply(source, site)
    return StepContext(index=index, operator=op.name, carrier=op.carrier, proposer="deterministic", description="",
                       variant="", optimized=source, simpler=simpler, site_start=site.start_byte,
                       site_end=site.end_byte, static_optimized=static[0], static_simpler=static[1],
                       function=site.function, axes=["N"], expert=expert or source,
                       problem_dir=str(KERNELS / problem))


def _lift(ctx: StepContext, problem: str):
    return lift_step(ctx, problem=problem, op_type="elementwise", lineage_id="ln-test", kernel_hash="ab" * 32,
                     executor="cpu", workloads=["w0"], seeds=[0], tolerances={"y": [1e-5, 1e-6]},
                     dtypes=["float32"], gate_log=["cpu gate: 3/3 cases pass"])


def test_vector_load_card_shows_real_code_and_the_conditions(tmp_path):
    expert = (KERNELS / "vector_add" / "kernel.cu").read_text()
    skill = _lift(_step("vector_add", "vector_load_to_scalar", expert), "vector_add")
    ex = skill.example
    # "after": the expert's function as written: the cast, the n/4 bound and the scalar tail
    for line in ("const float4* a4 = reinterpret_cast<const float4*>(a);", "int n4 = n / 4;",
                 "i < n4; i += stride", "for (int i = n4 * 4 + blockIdx.x * blockDim.x + threadIdx.x; i < n;"):
        assert line in ex["after"], line
    assert "carrier:" not in ex["after"] and "expert kernel" in ex["after_from"]
    # "before": the hand-written naive kernel, not the operator's make_float4((a)[4 * (i)], ...)
    assert "if (i < n) y[i] = a[i] + b[i];" in ex["before"] and "naive.cu" in ex["before_from"]
    assert "make_float4((" not in ex["before"] + ex["after"]
    kinds = {(p.kind, p.value, p.status) for p in skill.preconditions}
    assert ("contiguous", 0, "required") in kinds and ("alignment", 16, "required") in kinds

    (path,) = export_skills([skill], tmp_path)
    text = path.read_text()
    desc = yaml.safe_load(text.split("---\n")[1])["description"]
    assert "plain form" not in desc and "unit stride" in desc and "Buys:" in desc
    assert "### Example from real code" in text and "### Simpler form (before)" not in text
    assert "```cuda\n" + ex["after"].rstrip("\n") + "\n```" in text
    skills_ref = pytest.importorskip("skills_ref")  # the Agent Skills reference validator (test extra)
    assert skills_ref.validate(path.parent) == []


def test_effects_are_net_of_operator_artefacts():
    """`warp_atomic_to_thread_atomics` after `shuffle_to_shared`: the ks_xchg exchange array the
    earlier step added disappears with this step, and its 4096 bytes are not this skill's cost."""
    expert = (KERNELS / "reduce_sum" / "kernel.cu").read_text()
    states = [expert]
    for name in ("shuffle_to_shared", "block_reduce_to_warp_atomics"):  # the walk's order on reduce_sum
        op = get_operator(name)
        states.append(op.apply(states[-1], op.find_sites(states[-1])[0]))
    assert "ks_xchg_float[1024]" in states[-1]
    ctx = _step("reduce_sum", "warp_atomic_to_thread_atomics", states[-1], index=3, expert=expert)
    assert "warp_sum(" not in ctx.simpler.split("reduce_sum_kernel", 1)[1]  # the exchange's last user goes
    stats = lambda smem: {"archs": {"sm_90": {"kernels": {ctx.function: {  # noqa: E731
        "registers": 30, "smem_static": smem, "spill_stores": 0, "spill_loads": 0, "sass": {}}}}}}
    ctx.static_optimized, ctx.static_simpler = stats(128 + 4096), stats(128)  # what nvcc reports
    (eff,) = static_effects(ctx)
    assert artefact_smem(ctx.optimized, ctx.function) == 4096 and eff.smem_delta == 0
    # the shuffle step itself: the exchange array is its own simpler form, so its bytes stay
    own = _step("reduce_sum", "shuffle_to_shared", expert)
    own.static_optimized, own.static_simpler = stats(128), stats(128 + 4096)
    own.function = "reduce_sum_kernel"
    (eff,) = static_effects(own)
    assert eff.smem_delta == -4096


def test_retrieval_checks_contiguity_and_cross_thread_reduction():
    from retrieval.applicability import Checker, access_stride

    sgemm = Checker((KERNELS / "sgemm" / "naive.cu").read_text())
    loads = sgemm.opportunities("vector_load")
    # A[(size_t)row * K + k] walks k with unit stride (one thread's float4); B[(size_t)k * N + col]
    # jumps N per k, so its only float4 is across neighbouring lanes (each lane taking four columns)
    assert [s.line for s in loads] == [9, 9] and "A[(size_t)row * K + k]" in loads[0].reason
    assert "B[" not in loads[0].reason.split(" in loop ")[0] and "unit stride" in loads[0].reason
    assert "B[(size_t)k * N + col]" in loads[1].reason and "neighbouring lanes" in loads[1].reason
    assert sgemm.opportunities("warp_shuffle_reduce") == []  # the serial k loop: nothing to combine
    softmax = Checker((KERNELS / "softmax" / "naive.cu").read_text())
    assert [s.line for s in softmax.opportunities("warp_shuffle_reduce")] == [11, 13]  # row reductions

    expert = (KERNELS / "vector_add" / "kernel.cu").read_text()
    skill = _lift(_step("vector_add", "vector_load_to_scalar", expert), "vector_add").model_dump(mode="json")
    a = Checker((KERNELS / "vector_add" / "naive.cu").read_text()).check(skill)
    contiguous = next(c for c in a.preconditions if c.kind == "contiguous")
    assert a.status == "applicable" and contiguous.check == "satisfied"
    assert sgemm.check(dict(skill, operator="x")).sites[0].line == 9

    from corpora.code.source import Source

    src = Source("__global__ void f(const float* p, float* q, int n, int m) {\n"
                 "  for (int j = 0; j < n; ++j) q[j] = p[(size_t)j * m] + p[m + j] + p[(j)] + p[m];\n}\n")
    got = [access_stride(node)[0] for node in src.nodes("subscript_expression")]
    assert got == ["unit", "strided", "unit", "unit", "invariant"]


def test_reads_through_the_console_entry_skip_the_cli_framework(tmp_path):
    """`skills list|show` answered by skills_entry.py without typer or pydantic, with the same text
    as the typer commands; a card is found by its SKILL.md folder name; "" is no skill."""
    import json
    import subprocess
    import sys

    from typer.testing import CliRunner

    from cli import app
    from skills.skillmd import save_skills
    from skills.slugs import skill_slugs
    from skills.store import Store

    expert = (KERNELS / "vector_add" / "kernel.cu").read_text()
    skill = _lift(_step("vector_add", "vector_load_to_scalar", expert), "vector_add")
    st = Store(tmp_path / "st")
    save_skills(st, [skill])
    st.close()
    root = Path(__file__).resolve().parents[2]
    folder = skill_slugs([skill])[skill.skill_id]

    def entry(*args):
        return subprocess.run([sys.executable, "-X", "importtime", str(root / "skills_entry.py"), *args,
                               "--store", str(tmp_path / "st")], capture_output=True, text=True, cwd=root, timeout=120)

    for args in (["list"], ["list", "--json"], ["show", folder], ["show", skill.skill_id, "--json"]):
        r = entry(*args)
        assert r.returncode == 0, r.stderr[-1500:]
        imported = {ln.split("|")[-1].strip() for ln in r.stderr.splitlines() if ln.startswith("import time:")}
        assert not {"typer", "pydantic", "rich", "numpy"} & imported, args
        via_typer = CliRunner().invoke(app, [*args, "--store", str(tmp_path / "st")])
        assert via_typer.exit_code == 0 and r.stdout == via_typer.stdout, args
    assert json.loads(entry("show", folder, "--json").stdout)["skill_id"] == skill.skill_id
    r = entry("show", "")
    assert r.returncode == 2 and "error: no skill named '': give a skill id" in r.stderr
    r = entry("show", "no-such-skill")
    assert r.returncode == 2 and "no skill 'no-such-skill'" in r.stderr
