"""Compile gate for generated LLVM backend functions (clang ``-fsyntax-only``, version-matched).

The gate follows the corpus: a tree fetched from LLVM N (``fetch.json``'s version) is checked
with ``clang++-N``, ``llvm-tblgen-N`` and LLVM N's headers (Debian ``clang-N`` and
``llvm-N-dev``); LLVM's C++ API drifts between releases, so a 19 tree against 15's headers
fails on code nobody generated. A tree without ``fetch.json`` (the test suite's toy targets)
is taken to be LLVM ``DEFAULT_LLVM_MAJOR``.

A generated function is spliced into its target's real source file in place of the function
it stands for (or appended to the file that holds its class), then the file is checked against
those headers, the target's own TableGen outputs (generated from the calls in the target's
CMakeLists.txt) and a ``config.h`` generated from the corpus's ``config.h.cmake``. Each spliced function is bracketed by ``#line``
directives, so clang reports its diagnostics against the function's own lines
(``<gen:label>:LINE``), and one clang run checks several functions of one file without
mixing up whose errors are whose.

When a check with splices fails, the unmodified host file is checked too (once, cached): a host
that does not compile as it stands is an *environment* problem (a missing generated header, a
toolchain that does not match the tree), reported as such and never as a failure of the
functions spliced into it. TableGen and clang failures carry their full diagnostics.

Results are cached by a content hash of everything that affects them (spliced file, flags,
clang version, TableGen outputs), in the kernel gate's content-addressed cache
(mining/gate/cache.py). Only clang's verdicts on spliced text are cached: a host file that
fails unmodified, a missing tool, a TableGen failure or a clang that ran out of memory is the
environment's state, checked again next time. TableGen outputs are cached per target by a hash
of its .td files and the tblgen version. Every file the sandboxed clang reads (``config.h``,
TableGen outputs) is written world-readable: clang runs there as another user (nobody).

``lint_relocations`` catches what compiles but is plainly wrong: another architecture's
``ELF::R_*`` names (one ``ELF::`` enum holds every architecture's relocations, so clang
accepts them).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Sequence

from mining.gate.cache import GateCache, content_key
from mining.gate.sandbox import run_limited

GATE_VERSION = "backend-gate-2"  # 2: environment failures are no longer cached
DEFAULT_LLVM_MAJOR = 15  # a tree without fetch.json: the toy targets were written against LLVM 15
# Tool names per LLVM major version; ``{major}`` is filled in (override for a custom toolchain).
CLANG_TEMPLATE = os.environ.get("SKILLS_CLANG", "clang++-{major}")
TBLGEN_TEMPLATE = os.environ.get("SKILLS_TBLGEN", "llvm-tblgen-{major}")
INCLUDE_TEMPLATE = os.environ.get("SKILLS_LLVM_INCLUDE", "/usr/lib/llvm-{major}/include")
DIAGNOSTICS_CAP = 20000  # characters of a tool's stderr kept in results and errors
CLANG_FLAGS = ["-std=c++17", "-fsyntax-only", "-fno-exceptions", "-fno-rtti", "-Wno-everything",
               "-Werror=return-type", "-ferror-limit=0", "-fno-color-diagnostics", "-fno-caret-diagnostics",
               "-fno-diagnostics-fixit-info",
               "-D__STDC_CONSTANT_MACROS", "-D__STDC_FORMAT_MACROS", "-D__STDC_LIMIT_MACROS"]
CLANG_MEM_MB = 6144.0  # one translation unit of a target's backend file, with every header
# Generators whose outputs only instruction selection uses; made on demand (they are the slow ones).
LATE_GENERATORS = ("-gen-dag-isel", "-gen-global-isel")
_DIAG = re.compile(r"^(?P<file><gen:[^>\n]+>|[^\n:]+):(?P<line>\d+):(?P<col>\d+): (?P<sev>fatal error|error|warning|note): (?P<msg>.*)$",
                   re.M)


class GateUnavailable(Exception):
    """The corpus's toolchain (clang++-N, llvm-tblgen-N, LLVM N headers) is not installed."""


class GateInputError(Exception):
    """Bad input (unknown target, missing file); one line for the user. ``details`` holds a
    tool's full diagnostics when there are any (TableGen's, for a tree it cannot read)."""

    def __init__(self, message: str, details: str = ""):
        super().__init__(message)
        self.details = details


class TableGenError(GateInputError):
    """llvm-tblgen failed on a target's .td files (message: the first error; details: all of it)."""


@dataclass(frozen=True)
class Toolchain:
    """clang++, llvm-tblgen and headers of one LLVM major version."""
    major: int
    clang: str
    tblgen: str
    include: str

    @property
    def name(self) -> str:
        return f"clang-{self.major}"

    def missing(self) -> list[tuple[str, str]]:
        """(what is missing, the Debian package that has it)."""
        m = self.major
        out = []
        if shutil.which(self.clang) is None:
            out.append((self.clang, f"clang-{m}"))
        if shutil.which(self.tblgen) is None:
            out.append((self.tblgen, f"llvm-{m}-dev"))
        if not Path(self.include, "llvm", "MC", "MCELFObjectWriter.h").is_file():
            out.append((f"LLVM {m} headers ({self.include})", f"llvm-{m}-dev"))
        return out

    def unavailable(self, why: str = "") -> Optional[str]:
        """None when everything is installed, else one line naming what is missing and the
        packages to install."""
        miss = self.missing()
        if not miss:
            return None
        pkgs = " ".join(dict.fromkeys(p for _, p in miss))
        return (f"the compile gate for LLVM {self.major}{why} needs {', '.join(w for w, _ in miss)}, "
                f"not installed: apt-get install -y {pkgs}")


def toolchain(major: int | str = DEFAULT_LLVM_MAJOR) -> Toolchain:
    m = int(str(major).split(".")[0])
    return Toolchain(m, CLANG_TEMPLATE.format(major=m), TBLGEN_TEMPLATE.format(major=m),
                     INCLUDE_TEMPLATE.format(major=m))


def corpus_version(llvm_root: os.PathLike | str) -> Optional[str]:
    """The LLVM version recorded in ``<llvm_root>/fetch.json`` (``19.1.7``), else None."""
    fetch = Path(llvm_root) / "fetch.json"
    if not fetch.is_file():
        return None
    try:
        v = str(json.loads(fetch.read_text()).get("version", ""))
    except (json.JSONDecodeError, OSError):
        return None
    return v if re.match(r"\d+", v) else None


def corpus_major(llvm_root: os.PathLike | str) -> int:
    v = corpus_version(llvm_root)
    return int(v.split(".")[0]) if v else DEFAULT_LLVM_MAJOR


def first_error_line(stderr: str) -> str:
    """The first line that says ``error:`` (the caret lines after it say nothing alone)."""
    lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
    for ln in lines:
        if re.search(r"\berror\b:", ln):
            return ln[:400]
    return (lines[0] if lines else "(no output)")[:400]


@dataclass
class Diagnostic:
    severity: str
    message: str
    line: int  # 1-based, relative to the function (label) or the file
    column: int
    where: str  # a function label, or "file" for the host file's own lines

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class GateResult:
    target: str
    path: str
    passed: bool  # the whole check (host file + every spliced function)
    functions: dict = field(default_factory=dict)  # label -> {"passed": bool, "diagnostics": [...]}
    file_diagnostics: list = field(default_factory=list)
    cached: bool = False
    seconds: float = 0.0
    command: list = field(default_factory=list)
    llvm_major: int = DEFAULT_LLVM_MAJOR
    stderr: str = ""  # clang's whole output (capped at DIAGNOSTICS_CAP characters)
    # Set when the check failed and the unmodified host file fails too: the environment (the
    # toolchain, a generated header), not the spliced functions, is at fault.
    environment: Optional[str] = None
    host_diagnostics: list = field(default_factory=list)

    @property
    def verdict(self) -> str:
        """pass | fail | environment (the host file does not compile without the splices)."""
        return "pass" if self.passed else ("environment" if self.environment else "fail")

    def function_verdict(self, label: str) -> str:
        """pass | fail | environment for one spliced function; a host-file error outside every
        spliced function fails them all."""
        if self.environment:
            return "environment"
        f = self.functions.get(label)
        return "pass" if f and f["passed"] and not self.file_diagnostics else "fail"

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Splice:
    label: str
    text: str
    start_byte: Optional[int] = None  # replace [start_byte, end_byte); None: append at the end
    end_byte: Optional[int] = None


def toolchain_available(major: int | str = DEFAULT_LLVM_MAJOR) -> Optional[str]:
    """None when clang++-N, llvm-tblgen-N and the LLVM N headers are present, else one line
    saying what is missing and which Debian packages have it."""
    return toolchain(major).unavailable()


def _tool_version(tool: str) -> str:
    try:
        out = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "missing"
    return " ".join(out.split()[:8])


def _hash(*parts) -> str:
    return content_key(GATE_VERSION, *parts)


READABLE = 0o644  # files the sandboxed clang reads; it runs as another uid (mining/gate/sandbox.py)


def _write_readable(path: Path, data: str) -> None:
    """Atomic write of a file the sandbox reads: mkstemp makes 0600, which uid nobody cannot open."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "w") as fh:
        fh.write(data)
    os.chmod(tmp, READABLE)
    os.replace(tmp, path)


# --------------------------------------------------------------------------- CMake -> tblgen calls
def tablegen_calls(cmake_text: str) -> list[tuple[str, str, list[str]]]:
    """(definitions .td, output .inc, flags) per ``tablegen(LLVM ...)`` call, following
    ``set(LLVM_TARGET_DEFINITIONS ...)`` and skipping ``if(...) ... endif()`` blocks."""
    text = re.sub(r"#[^\n]*", "", cmake_text)
    calls = []
    defs = None
    depth = 0
    for m in re.finditer(r"(\w+)\s*\(([^()]*)\)", text, re.S):
        cmd, args = m.group(1).lower(), m.group(2).split()
        # quotes group words in CMake; inside an argument (-combiners="X") they are not part of the value
        args = [a.replace('"', '') for a in args]
        if cmd == "if":
            depth += 1
        elif cmd == "endif":
            depth = max(0, depth - 1)
        elif depth:
            continue
        elif cmd == "set" and args and args[0] == "LLVM_TARGET_DEFINITIONS" and len(args) > 1:
            defs = args[1]
        elif cmd == "tablegen" and len(args) >= 3 and args[0] == "LLVM" and defs:
            calls.append((defs, args[1], args[2:]))
    return calls


def config_h_from_template(template: str, version: str = "15.0.6") -> str:
    """``config.h`` from ``config.h.cmake``: ``#cmakedefine01 X`` -> 0, ``#cmakedefine X`` ->
    undefined, version and package macros filled."""
    major, minor, patch = (version.split(".") + ["0", "0"])[:3]
    values = {"BUG_REPORT_URL": "https://github.com/llvm/llvm-project/issues/", "BACKTRACE_HEADER": "execinfo.h",
              "PACKAGE_NAME": "LLVM", "PACKAGE_VERSION": version, "PACKAGE_STRING": f"LLVM {version}",
              "PACKAGE_BUGREPORT": "https://github.com/llvm/llvm-project/issues/", "PACKAGE_VENDOR": "",
              "LLVM_VERSION_MAJOR": major, "LLVM_VERSION_MINOR": minor, "LLVM_VERSION_PATCH": patch,
              "LTDL_SHLIB_EXT": ".so", "LLVM_PLUGIN_EXT": ".so", "HOST_LINK_VERSION": "",
              "LLVM_ENABLE_ZLIB": "0", "LLVM_ENABLE_ZSTD": "0"}
    out = []
    for line in template.splitlines():
        m = re.match(r"\s*#cmakedefine01\s+(\w+)", line)
        if m:
            out.append(f"#define {m.group(1)} 0")
            continue
        m = re.match(r"\s*#cmakedefine\s+(\w+)", line)
        if m:
            out.append(f"/* #undef {m.group(1)} */")
            continue
        unknown = [v for v in re.findall(r"\$\{(\w+)\}", line) if v not in values]
        if unknown:
            out.append(f"/* {line.strip()} (no value) */")
            continue
        out.append(re.sub(r"\$\{(\w+)\}", lambda mm: values[mm.group(1)], line))
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- the gate
class CompileGate:
    """Checks spliced functions in one LLVM corpus (``llvm_root`` holds lib/Target)."""

    def __init__(self, llvm_root: os.PathLike | str, cache_dir: os.PathLike | str, tblgen_jobs: int = 1,
                 timeout_s: float = 300.0, llvm_major: Optional[int] = None):
        """``llvm_major`` picks the toolchain; None: the corpus's recorded version (fetch.json)."""
        root = Path(llvm_root).resolve()
        if (root / "lib" / "Target").is_dir():
            self.target_root = root / "lib" / "Target"
            self.llvm_root = root
        elif root.name == "Target" and root.parent.name == "lib":
            self.target_root = root
            self.llvm_root = root.parent.parent
        else:
            self.target_root = root
            self.llvm_root = root.parent
        self.cache_dir = Path(cache_dir).resolve() / "backend-gate"
        self.results = GateCache(self.cache_dir)  # clang verdicts, keyed by content_key
        self.tblgen_jobs = max(1, tblgen_jobs)
        self.timeout_s = timeout_s
        self.version = corpus_version(self.llvm_root)
        self.tools = toolchain(llvm_major if llvm_major is not None else corpus_major(self.llvm_root))
        self._clang_version: Optional[str] = None
        self._tblgen_version: Optional[str] = None
        self._host_ok: dict[tuple[str, str, str], tuple[bool, list]] = {}

    def unavailable(self) -> Optional[str]:
        """None when this corpus's toolchain is installed, else the one-line reason."""
        src = (f" (the corpus's version, from {self.llvm_root / 'fetch.json'})" if self.version
               else f" (no fetch.json in {self.llvm_root}: taken to be LLVM {DEFAULT_LLVM_MAJOR})")
        return self.tools.unavailable(src)

    def require(self) -> None:
        why = self.unavailable()
        if why:
            raise GateUnavailable(why)

    @property
    def clang_version(self) -> str:
        if self._clang_version is None:
            self._clang_version = _tool_version(self.tools.clang)
        return self._clang_version

    @property
    def tblgen_version(self) -> str:
        if self._tblgen_version is None:
            self._tblgen_version = _tool_version(self.tools.tblgen)
        return self._tblgen_version

    def target_dir(self, target: str) -> Path:
        d = self.target_root / target
        if not d.is_dir():
            raise GateInputError(f"no target {target} under {self.target_root}")
        return d

    # ---- config.h
    def config_dir(self) -> Path:
        template = self.llvm_root / "include" / "llvm" / "Config" / "config.h.cmake"
        text = template.read_text() if template.is_file() else ""
        version = self.version or f"{self.tools.major}.0.0"
        key = _hash("config", text, version)[:16]
        out = self.cache_dir / "config" / key
        header = out / "llvm" / "Config" / "config.h"
        if not header.is_file() or header.stat().st_mode & READABLE != READABLE:
            _write_readable(header, config_h_from_template(text, version) if text else
                          f"#ifndef CONFIG_H\n#define CONFIG_H\n#define PACKAGE_VERSION \"{version}\"\n#endif\n")
        return out

    # ---- tblgen
    def _tblgen_key(self, target: str) -> str:
        d = self.target_dir(target)
        h = hashlib.sha256(self.tblgen_version.encode())
        for f in sorted(d.rglob("*.td")) + [d / "CMakeLists.txt"]:
            if f.is_file():
                h.update(f.relative_to(d).as_posix().encode())
                h.update(hashlib.sha256(f.read_bytes()).digest())
        return h.hexdigest()[:16]

    def tblgen_dir(self, target: str, outputs: Optional[Iterable[str]] = None, late: bool = False) -> Path:
        """Folder with T's TableGen outputs (generated once per .td content, then cached).

        By default everything except the instruction-selection tables (``LATE_GENERATORS``);
        ``late=True`` or naming ``outputs`` makes those too.
        """
        self.require()
        d = self.target_dir(target)
        cmake = d / "CMakeLists.txt"
        if not cmake.is_file():
            raise GateInputError(f"target {target} has no CMakeLists.txt (needed for its TableGen calls)")
        out = self.cache_dir / "tblgen" / f"{target}-{self._tblgen_key(target)}"
        out.mkdir(parents=True, exist_ok=True)
        want = set(outputs or ())
        todo = []
        for td, inc, flags in tablegen_calls(cmake.read_text()):
            if (out / inc).is_file():
                continue
            if want and inc not in want:
                continue
            if not want and not late and any(f in LATE_GENERATORS for f in flags):
                continue
            todo.append((td, inc, flags))

        def run(call):
            td, inc, flags = call
            tmp = out / f".{inc}.tmp"
            cmd = [self.tools.tblgen, *flags, "-I", str(d), "-I", self.tools.include, "-I", str(self.target_root),
                   str(d / td), "-o", str(tmp)]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                raise TableGenError(f"{self.tools.tblgen} timed out after {self.timeout_s:.0f}s on {target}/{td} "
                                    f"({inc})") from None
            if proc.returncode != 0:
                tmp.unlink(missing_ok=True)
                raise TableGenError(f"{self.tools.tblgen} failed on {target}/{td} ({inc}): "
                                    f"{first_error_line(proc.stderr)}", proc.stderr[-DIAGNOSTICS_CAP:])
            os.chmod(tmp, READABLE)  # tblgen honours the umask; the sandboxed clang must read it
            os.replace(tmp, out / inc)

        if todo:
            with ThreadPoolExecutor(max_workers=self.tblgen_jobs) as pool:
                list(pool.map(run, todo))
        return out

    def _headers_key(self, target: str) -> str:
        """Hash of what a check can include besides the host file: T's headers and .def/.inc
        files, and the corpus's include folder (its relocation tables)."""
        h = hashlib.sha256()
        folders = [self.target_dir(target), self.llvm_root / "include"]
        for folder in folders:
            if not folder.is_dir():
                continue
            for f in sorted(folder.rglob("*")):
                if f.suffix in (".h", ".def", ".inc", ".cmake") and f.is_file():
                    h.update(str(f).encode())
                    h.update(hashlib.sha256(f.read_bytes()).digest())
        return h.hexdigest()

    # ---- check
    def splice(self, source: str, path: str, splices: Sequence[Splice]) -> str:
        """The host file with each splice in place, each bracketed by ``#line`` directives."""
        data = source.encode()
        pieces = []
        pos = 0
        appended = []
        for sp in sorted([s for s in splices if s.start_byte is not None], key=lambda s: s.start_byte):
            if sp.start_byte < pos:
                raise GateInputError(f"overlapping splices in {path}")
            pieces.append(data[pos:sp.start_byte].decode("utf-8", errors="replace"))
            end_line = data[:sp.end_byte].count(b"\n") + 1
            pieces.append(f'\n#line 1 "<gen:{sp.label}>"\n{sp.text}\n#line {end_line} "{path}"\n')
            pos = sp.end_byte
        pieces.append(data[pos:].decode("utf-8", errors="replace"))
        for sp in splices:
            if sp.start_byte is None:
                appended.append(f'\n#line 1 "<gen:{sp.label}>"\n{sp.text}\n')
        return "".join(pieces) + "".join(appended)

    def check(self, target: str, rel_path: str, splices: Sequence[Splice] = (), use_cache: bool = True) -> GateResult:
        """Splice ``splices`` into ``lib/Target/<target>/<rel_path>`` and run clang on it."""
        self.require()
        started = time.monotonic()
        d = self.target_dir(target)
        host = d / rel_path
        if not host.is_file():
            raise GateInputError(f"no file {rel_path} in target {target}")
        source = host.read_text(errors="replace")
        text = self.splice(source, f"{target}/{rel_path}", splices)
        gen = self.tblgen_dir(target)
        cfg = self.config_dir()
        key = _hash("check", text, rel_path, CLANG_FLAGS, self.clang_version, str(gen), self.tools.include,
                    self._headers_key(target))
        raw = self.results.get_json(key) if use_cache else None
        cached = raw is not None
        if raw is None:
            raw = self._run_clang(target, host, text, gen, cfg)
            if raw.get("timeout"):
                return GateResult(target, rel_path, False, file_diagnostics=[Diagnostic(
                    "error", f"clang timed out after {self.timeout_s:.0f}s", 0, 0, "file").to_dict()],
                    seconds=round(time.monotonic() - started, 3), llvm_major=self.tools.major)
        res = self._result(target, rel_path, splices, raw["rc"], raw["stderr"], host.name)
        res.command = [self.tools.clang, *CLANG_FLAGS, "-I...", host.name]
        res.cached = cached
        res.llvm_major = self.tools.major
        res.stderr = raw["stderr"][:DIAGNOSTICS_CAP]
        if not res.passed and splices:
            ok, diags = self.host_compiles(target, rel_path, use_cache)
            if not ok:
                first = diags[0]["message"] if diags else "clang failed"
                res.environment = (f"{target}/{rel_path} does not compile unmodified with {self.tools.clang} "
                                   f"against LLVM {self.tools.major}'s headers ({first}): an environment "
                                   f"problem, not the generated code's")
                res.host_diagnostics = diags
        # Only a verdict on the spliced text is worth keeping: a host that fails as it stands (a
        # header the sandbox could not read, a toolchain that does not match) or a clang out of
        # memory says nothing about the code, and may be fixed before the next run.
        if not cached and (res.passed or (splices and res.environment is None)) and not raw.get("mem_exceeded"):
            self.results.put_json(key, raw)
        res.seconds = round(time.monotonic() - started, 3)
        return res

    def host_compiles(self, target: str, rel_path: str, use_cache: bool = True) -> tuple[bool, list]:
        """Does T's file compile as it stands? (memoized per process; the clang result is cached)"""
        key = (target, rel_path, self.clang_version)
        if key not in self._host_ok:
            base = self.check(target, rel_path, (), use_cache=use_cache)
            self._host_ok[key] = (base.passed, base.file_diagnostics)
        return self._host_ok[key]

    def _run_clang(self, target: str, host: Path, text: str, gen: Path, cfg: Path) -> dict:
        d = self.target_dir(target)
        late_tried = False
        started = time.monotonic()
        while True:
            with tempfile.TemporaryDirectory(prefix="gate-") as tmp:
                copy = Path(tmp) / host.name
                copy.write_text(text)
                incs = ["-I", str(host.parent), "-I", str(gen), "-I", str(d)]
                if (self.llvm_root / "include").is_dir():
                    incs += ["-I", str(self.llvm_root / "include")]
                incs += ["-I", self.tools.include, "-I", str(cfg)]
                cmd = [self.tools.clang, *CLANG_FLAGS, *incs, str(copy)]
                # the spliced text is generated (an LLM's or a donor's): clang sees it inside the
                # gate's sandbox, with only the include folders it names readable (docs/security.md)
                readable = [Path(incs[i + 1]) for i in range(0, len(incs), 2) if Path(incs[i + 1]).exists()]
                proc = run_limited(cmd, cwd=Path(tmp), timeout_s=self.timeout_s, mem_mb=CLANG_MEM_MB,
                                   readable=readable, writable=[Path(tmp)])
                if proc.timed_out:
                    return {"timeout": True}
                if proc.mem_exceeded:
                    return {"rc": 1, "stderr": f"error: clang exceeded {CLANG_MEM_MB:.0f} MB",
                            "seconds": round(time.monotonic() - started, 3), "mem_exceeded": True}
            missing_inc = re.findall(r"'(\w+Gen\w+\.inc)' file not found", proc.stderr)
            if missing_inc and not late_tried:
                late_tried = True
                self.tblgen_dir(target, outputs=missing_inc)
                continue
            return {"rc": proc.returncode, "stderr": proc.stderr, "seconds": round(time.monotonic() - started, 3)}

    def _result(self, target, rel_path, splices, rc, stderr, host_name) -> GateResult:
        funcs = {sp.label: {"passed": True, "diagnostics": []} for sp in splices}
        file_diags = []
        for m in _DIAG.finditer(stderr):
            sev = m.group("sev")
            if sev in ("warning", "note"):
                continue
            diag = Diagnostic("error", m.group("msg").strip(), int(m.group("line")), int(m.group("col")), "file")
            fm = re.fullmatch(r"<gen:(.+)>", m.group("file"))
            if fm and fm.group(1) in funcs:
                diag.where = fm.group(1)
                funcs[fm.group(1)]["passed"] = False
                funcs[fm.group(1)]["diagnostics"].append(diag.to_dict())
            else:
                file_diags.append(diag.to_dict())
        passed = rc == 0 and all(f["passed"] for f in funcs.values()) and not file_diags
        if rc != 0 and not file_diags and all(f["passed"] for f in funcs.values()):
            # no diagnostic in clang's usual form (a crash, a driver error): keep all it said
            file_diags.append(Diagnostic("error", (stderr.strip() or "clang failed")[:DIAGNOSTICS_CAP], 0, 0,
                                         "file").to_dict())
        return GateResult(target, rel_path, passed, funcs, file_diags)


# --------------------------------------------------------------------------- lint
_ELF_RELOC = re.compile(r"\bELF::(R_[A-Z0-9_]+)")


def lint_relocations(code: str, target: str, target_relocations: Iterable[str]) -> list[dict]:
    """Warnings for ``ELF::R_*`` names that are not the target's own relocations."""
    own = set(target_relocations)
    stems = {m.group(1) for r in own for m in [re.match(r"(R_[A-Z0-9]+_)", r)] if m}
    out = []
    seen = set()
    lines = code.splitlines()
    for i, line in enumerate(lines, start=1):
        for m in _ELF_RELOC.finditer(line):
            name = m.group(1)
            if name in own or name in seen:
                continue
            seen.add(name)
            if own:
                hint = f"{target}'s relocations are {', '.join(sorted(stems)) or 'R_*'}*"
            else:
                hint = f"{target} defines no ELF relocations"
            out.append({"rule": "foreign-elf-relocation", "line": i, "name": f"ELF::{name}",
                        "message": f"ELF::{name} is not a {target} relocation ({hint})"})
    return out
