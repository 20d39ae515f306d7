"""The clang-15 compile gate on the toy targets (real clang, real LLVM 15 headers, real tblgen)."""

import pytest

from _backend_support import TOY, copy_toy, gate_skip_reason
from corpora.backend_tree import load_target
from mining.backend_gate import (
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
        with pytest.raises(Exception, match="apt-get install llvm-15-dev clang-15"):
            gate.check("Lark", "LarkRegisterInfo.cpp")
