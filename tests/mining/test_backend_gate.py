"""The compile gate on the toy targets (real clang-15, LLVM 15 headers, tblgen) and its version matching."""
import json
from pathlib import Path

import pytest

from _backend_support import TOY, TOY_TARGETS, copy_toy, gate_skip_reason
from corpora.backends.tree import load_target
from mining.backend.gate import (
    CompileGate, GateInputError, Splice, config_h_from_template, lint_relocations, tablegen_calls,
)

needs_clang = pytest.mark.skipif(gate_skip_reason() is not None, reason=str(gate_skip_reason()))


def test_tablegen_calls_follow_definitions_and_skip_if_blocks():
    cmake = """
set(LLVM_TARGET_DEFINITIONS Foo.td)
tablegen(LLVM FooGenRegisterInfo.inc -gen-register-info)
tablegen(LLVM FooGenAsmMatcher.inc
  -gen-asm-matcher)
if(LLVM_EXPERIMENTAL)
  tablegen(LLVM FooGenExperimental.inc -gen-exp)
endif()
set(LLVM_TARGET_DEFINITIONS "FooGISel.td")
tablegen(LLVM FooGenGlobalISel.inc -gen-global-isel)  # trailing comment
"""
    assert tablegen_calls(cmake) == [("Foo.td", "FooGenRegisterInfo.inc", ["-gen-register-info"]),
                                     ("Foo.td", "FooGenAsmMatcher.inc", ["-gen-asm-matcher"]),
                                     ("FooGISel.td", "FooGenGlobalISel.inc", ["-gen-global-isel"])]


def test_config_h_from_template():
    tpl = "#cmakedefine01 LLVM_ENABLE_THREADS\n#cmakedefine HAVE_FOO ${HAVE_FOO}\n" \
          "#define PACKAGE_VERSION \"${PACKAGE_VERSION}\"\n#define X \"${UNKNOWN_THING}\"\n"
    out = config_h_from_template(tpl, "15.0.6")
    assert "#define LLVM_ENABLE_THREADS 0" in out
    assert "/* #undef HAVE_FOO */" in out
    assert '#define PACKAGE_VERSION "15.0.6"' in out
    assert "UNKNOWN_THING" in out and "#define X" not in out.replace("/* #define X", "")


def test_lint_flags_foreign_relocations():
    code = "unsigned f() {\n  return ELF::R_LARK_32;\n}\nunsigned g() { return ELF::R_MIPS_HI16; }\n"
    warns = lint_relocations(code, "Lark", ["R_LARK_32", "R_LARK_HI16"])
    assert [w["name"] for w in warns] == ["ELF::R_MIPS_HI16"]
    assert warns[0]["line"] == 4 and "R_LARK_" in warns[0]["message"]
    assert lint_relocations("return ELF::R_X86_64_32;", "XCore", [])[0]["message"].endswith(
        "XCore defines no ELF relocations)")


def test_splice_brackets_functions_with_line_directives(tmp_path):
    gate = CompileGate(TOY, tmp_path / "cache")
    src = "int a() { return 1; }\nint b() { return 2; }\nint c() { return 3; }\n"
    start = src.index("int b")
    end = src.index("\nint c")
    out = gate.splice(src, "T/x.cpp", [Splice("g1", "int b() { return 20; }", start, end),
                                       Splice("g2", "int d() { return 4; }")])
    assert '#line 1 "<gen:g1>"\nint b() { return 20; }\n#line 2 "T/x.cpp"\n' in out
    assert out.endswith('#line 1 "<gen:g2>"\nint d() { return 4; }\n')
    assert out.startswith("int a() { return 1; }\n")


@needs_clang
def test_gate_passes_real_files_and_maps_errors_back(tmp_path):
    root = copy_toy(tmp_path / "llvm")
    gate = CompileGate(root, tmp_path / "cache")
    for t in ("Lark", "Wren", "Kite"):
        for f in (f"MCTargetDesc/{t}ELFObjectWriter.cpp", f"{t}RegisterInfo.cpp"):
            res = gate.check(t, f)
            assert res.passed, (t, f, res.file_diagnostics)
    gen = gate.tblgen_dir("Lark")
    assert (gen / "LarkGenRegisterInfo.inc").is_file()

    tt = load_target(root / "lib" / "Target" / "Lark")
    fr = next(f for f in tt.functions if f.role == "RegisterInfo::getFrameRegister")
    bad = (fr.signature + " {\n  const LarkFrameLowering *TFI = getFrameLowering(MF);\n"
           "  return TFI->hasFP(MF) ? Lark::R3_bogus : Mips::SP;\n}")
    good = fr.text.replace("Lark::R3 : Lark::R2", "Lark::R2 : Lark::R3")
    res = gate.check("Lark", fr.path, [Splice("bad", bad, fr.start_byte, fr.end_byte)])
    assert not res.passed and not res.functions["bad"]["passed"]
    msgs = {(d["line"], d["message"]) for d in res.functions["bad"]["diagnostics"]}
    assert any(line == 3 and "R3_bogus" in m for line, m in msgs)
    assert any(line == 3 and "'Mips'" in m for line, m in msgs)
    assert res.file_diagnostics == []
    ok = gate.check("Lark", fr.path, [Splice("good", good, fr.start_byte, fr.end_byte)])
    assert ok.passed and not ok.cached
    again = gate.check("Lark", fr.path, [Splice("good", good, fr.start_byte, fr.end_byte)])
    assert again.passed and again.cached  # content-hash cache
    missing_return = fr.signature + " {\n  if (MF.getName().empty())\n    return Lark::R2;\n}"
    res = gate.check("Lark", fr.path, [Splice("noret", missing_return, fr.start_byte, fr.end_byte)])
    assert not res.passed and "return" in res.functions["noret"]["diagnostics"][0]["message"]


@needs_clang
def test_generated_text_compiles_in_the_sandbox(tmp_path):
    """A generated function that #includes a file outside the tree (a secret) cannot read it: clang
    runs in the gate's sandbox, which shows only the include folders the gate names."""
    from mining.gate.sandbox import isolation

    if not isolation():
        pytest.skip("no bubblewrap here: the backend gate then runs clang unsandboxed")
    secret = tmp_path / "outside" / "secret.inc"
    secret.parent.mkdir()
    secret.write_text("KS_SECRET_TOKEN_4711 +\n")
    root = copy_toy(tmp_path / "llvm")
    gate = CompileGate(root, tmp_path / "cache")
    tt = load_target(root / "lib" / "Target" / "Lark")
    fr = next(f for f in tt.functions if f.role == "RegisterInfo::getFrameRegister")
    hostile = fr.signature + " {\n#include \"" + str(secret) + "\"\n  return Lark::R2;\n}"
    res = gate.check("Lark", fr.path, [Splice("hostile", hostile, fr.start_byte, fr.end_byte)], use_cache=False)
    assert not res.passed
    text = json.dumps(res.to_dict() if hasattr(res, "to_dict") else res.__dict__, default=str)
    assert "KS_SECRET_TOKEN_4711" not in text
    assert "not found" in text


@needs_clang
def test_gate_cache_sees_header_changes(tmp_path):
    root = copy_toy(tmp_path / "llvm")
    gate = CompileGate(root, tmp_path / "cache")
    path = "MCTargetDesc/KiteELFObjectWriter.cpp"
    assert gate.check("Kite", path).passed
    hdr = root / "lib" / "Target" / "Kite" / "MCTargetDesc" / "KiteFixupKinds.h"
    hdr.write_text(hdr.read_text().replace("fixup_kite_hi8,", ""))
    res = gate.check("Kite", path)
    assert not res.passed and not res.cached
    assert any("fixup_kite_hi8" in d["message"] for d in res.file_diagnostics)


def test_gate_bad_input(tmp_path):
    gate = CompileGate(TOY, tmp_path / "cache")
    if gate_skip_reason() is None:
        with pytest.raises(GateInputError, match="no target Nope"):
            gate.check("Nope", "x.cpp")
        with pytest.raises(GateInputError, match="no file"):
            gate.check("Lark", "Missing.cpp")
    else:
        with pytest.raises(Exception, match="apt-get install -y clang-15 llvm-15-dev"):
            gate.check("Lark", "LarkRegisterInfo.cpp")


# ---------------------------------------------------------------- the gate follows the corpus's LLVM version
def _toy_of_version(tmp_path, version: str) -> Path:
    root = copy_toy(tmp_path / f"llvm-{version}")
    (root / "fetch.json").write_text(json.dumps({"version": version, "targets": ["Kite", "Lark", "Wren"]}))
    return root


def test_toolchain_follows_the_recorded_version(tmp_path):
    from mining.backend.gate import GateUnavailable, corpus_major, toolchain

    assert CompileGate(TOY, tmp_path / "c").tools == toolchain(15)  # no fetch.json: LLVM 15
    gate = CompileGate(_toy_of_version(tmp_path, "19.1.7"), tmp_path / "c")
    assert gate.tools.major == 19 and gate.tools.clang == "clang++-19" and gate.tools.tblgen == "llvm-tblgen-19"
    assert gate.tools.include == "/usr/lib/llvm-19/include" and gate.tools.name == "clang-19"
    assert corpus_major(tmp_path / "llvm-19.1.7") == 19
    # a version nobody installed: one line naming what is missing and the Debian packages
    gate = CompileGate(_toy_of_version(tmp_path, "97.0.1"), tmp_path / "c")
    with pytest.raises(GateUnavailable) as exc:
        gate.check("Lark", "LarkRegisterInfo.cpp")
    msg = str(exc.value)
    assert "\n" not in msg and "LLVM 97" in msg and "clang++-97" in msg and "llvm-tblgen-97" in msg
    assert msg.endswith("apt-get install -y clang-97 llvm-97-dev") and "fetch.json" in msg


@needs_clang
def test_tablegen_failure_reports_the_first_error_and_keeps_all_diagnostics(tmp_path):
    from mining.backend.gate import TableGenError

    root = copy_toy(tmp_path / "llvm")
    td = root / "lib" / "Target" / "Lark" / "LarkRegisterInfo.td"
    td.write_text(td.read_text() + "\ndef Broken : RegisterClass<\"Lark\", [i32], 32, (add NoSuchReg)>;\n")
    gate = CompileGate(root, tmp_path / "cache")
    with pytest.raises(TableGenError) as exc:
        gate.check("Lark", "LarkRegisterInfo.cpp")
    msg, details = str(exc.value), exc.value.details
    assert "\n" not in msg and "llvm-tblgen-15 failed on Lark/" in msg
    assert "LarkRegisterInfo.td:" in msg and "error:" in msg and not msg.rstrip().endswith("^")
    assert "NoSuchReg" in details and details.count("\n") >= 2  # the whole output, caret lines included


@needs_clang
def test_host_file_that_fails_unmodified_is_an_environment_problem(tmp_path):
    """The toy targets are written against LLVM 15; under LLVM 19's headers their RegisterInfo
    files fail on API drift (eliminateFrameIndex returns bool in 19). A correct function spliced
    in must not be blamed for that."""
    if gate_skip_reason(19):
        pytest.skip(gate_skip_reason(19))
    tt = load_target(TOY_TARGETS / "Lark")
    fr = next(f for f in tt.functions if f.role == "RegisterInfo::getFrameRegister")
    splice = [Splice("same", fr.text, fr.start_byte, fr.end_byte)]
    ok15 = CompileGate(TOY, tmp_path / "cache").check("Lark", fr.path, splice)
    assert ok15.passed and ok15.verdict == "pass" and ok15.function_verdict("same") == "pass"

    gate19 = CompileGate(_toy_of_version(tmp_path, "19.1.7"), tmp_path / "cache")
    res = gate19.check("Lark", fr.path, splice)
    assert not res.passed and res.verdict == "environment" and res.function_verdict("same") == "environment"
    assert res.llvm_major == 19 and "does not compile unmodified with clang++-19" in res.environment
    assert any("eliminateFrameIndex" in d["message"] for d in res.host_diagnostics)
    assert "eliminateFrameIndex" in res.stderr
    # a file that compiles under 19 still fails a broken function as the function's own failure
    ow = next(f for f in tt.functions if f.role == "ELFObjectWriter::getRelocType")
    bad = gate19.check("Lark", ow.path, [Splice("bad", ow.text.replace("ELF::R_LARK_32", "ELF::R_LARK_NOPE"),
                                                ow.start_byte, ow.end_byte)])
    assert bad.verdict == "fail" and bad.function_verdict("bad") == "fail" and bad.environment is None


# ---------------------------------------------------------------- generated files, and what the cache keeps
def _results(tmp_path) -> list[Path]:
    return sorted(p for p in (tmp_path / "cache" / "backend-gate" / "results").rglob("*") if p.is_file())


@needs_clang
def test_generated_files_are_readable_by_the_sandboxed_clang(tmp_path):
    """config.h and the TableGen outputs are written 0644: clang runs sandboxed as another user
    (nobody, when the gate runs as root), and a 0600 config.h made every host that includes it
    fail (RISCV's compile pass rate read 0.0 until the file was readable)."""
    root = copy_toy(tmp_path / "llvm")
    cfg = root / "include" / "llvm" / "Config"
    cfg.mkdir(parents=True)
    (cfg / "config.h.cmake").write_text("#define PACKAGE_VERSION \"${PACKAGE_VERSION}\"\n#cmakedefine01 KS_GATE_PROBE\n")
    host = root / "lib" / "Target" / "Lark" / "LarkRegisterInfo.cpp"
    host.write_text('#include "llvm/Config/config.h"\n' + host.read_text())
    gate = CompileGate(root, tmp_path / "cache")
    header = gate.config_dir() / "llvm" / "Config" / "config.h"
    assert header.stat().st_mode & 0o777 == 0o644
    incs = list(gate.tblgen_dir("Lark").glob("*.inc"))
    assert incs and all(p.stat().st_mode & 0o044 == 0o044 for p in incs)
    tt = load_target(root / "lib" / "Target" / "Lark")
    fr = next(f for f in tt.functions if f.role == "RegisterInfo::getFrameRegister")
    # the spliced function reads config.h's macro: it compiles only if clang could open the file
    uses = fr.signature + " {\n  static_assert(KS_GATE_PROBE == 0, PACKAGE_VERSION);\n  return Lark::R2;\n}"
    res = gate.check("Lark", fr.path, [Splice("cfg", uses, fr.start_byte, fr.end_byte)], use_cache=False)
    assert res.passed, (res.file_diagnostics, res.functions)


@needs_clang
def test_environment_failures_are_not_cached(tmp_path):
    """Only clang's verdicts on spliced text are kept: a host file that fails unmodified (here: the
    LLVM 15 toy under LLVM 19's headers) is checked again next time, and so is a TableGen failure."""
    if gate_skip_reason(19):
        pytest.skip(gate_skip_reason(19))
    tt = load_target(TOY_TARGETS / "Lark")
    fr = next(f for f in tt.functions if f.role == "RegisterInfo::getFrameRegister")
    gate19 = CompileGate(_toy_of_version(tmp_path, "19.1.7"), tmp_path / "cache")
    res = gate19.check("Lark", fr.path, [Splice("same", fr.text, fr.start_byte, fr.end_byte)])
    assert res.verdict == "environment"
    assert _results(tmp_path) == []  # neither the host's failure nor the splice's
    again = CompileGate(tmp_path / "llvm-19.1.7", tmp_path / "cache").check(
        "Lark", fr.path, [Splice("same", fr.text, fr.start_byte, fr.end_byte)])
    assert again.verdict == "environment" and not again.cached
    # a real verdict on spliced text, in a host that compiles: kept, pass and fail alike
    ow = next(f for f in tt.functions if f.role == "ELFObjectWriter::getRelocType")
    bad = [Splice("bad", ow.text.replace("ELF::R_LARK_32", "ELF::R_LARK_NOPE"), ow.start_byte, ow.end_byte)]
    assert gate19.check("Lark", ow.path, bad).verdict == "fail"
    kept = _results(tmp_path)
    assert len(kept) == 2  # the failing splice and the host that compiles
    assert gate19.check("Lark", ow.path, bad).cached

    from mining.backend.gate import TableGenError

    root = copy_toy(tmp_path / "llvm15")
    td = root / "lib" / "Target" / "Wren" / "WrenRegisterInfo.td"
    td.write_text(td.read_text() + "\ndef Broken : RegisterClass<\"Wren\", [i32], 32, (add NoSuchReg)>;\n")
    with pytest.raises(TableGenError):
        CompileGate(root, tmp_path / "cache").check("Wren", "WrenRegisterInfo.cpp")
    assert _results(tmp_path) == kept


def test_backend_gate_uses_the_shared_gate_cache(tmp_path):
    """One content hash and one result cache for both gates (mining/gate/cache.py)."""
    from mining.backend import gate as backend_gate
    from mining.gate.cache import GateCache, content_key

    assert backend_gate._hash("a", 1) == content_key(backend_gate.GATE_VERSION, "a", 1)
    assert isinstance(CompileGate(TOY, tmp_path / "cache").results, GateCache)
