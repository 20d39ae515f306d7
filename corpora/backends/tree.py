"""Load LLVM-style target trees: functions (tree-sitter-cpp), TableGen records, fixups, relocations.

Input is a folder of targets (``<llvm>/lib/Target``, a folder holding ``lib/Target``, or one
target folder). For each target ``T`` it yields:

* functions of every ``.cpp``/``.h``: qualified name, role (the qualified name with T's
  prefixes stripped, so ``RISCVELFObjectWriter::getRelocType`` and ``MipsELFObjectWriter::
  getRelocType`` share the role ``ELFObjectWriter::getRelocType``), signature, body, the body's
  statements (normalized: comments dropped, whitespace canonical), and the target-specific
  identifiers the function references;
* attributes: TableGen records (registers, register classes, instruction formats,
  instructions, subtarget features, calling conventions, processors) from the ``.td`` files,
  fixup kinds from the MC headers, relocation names from ``ELFRelocs/<arch>.def``;
* a report per file: parsed or not, how many syntax errors, the first one's location.

Everything here is a pure function of the files; nothing is stored (see retrieval/backend/index).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Optional

from tree_sitter import Node

from corpora.code.nodes import function_declarator
from corpora.code.parse import cpp_parser, tablegen_parser, walk
from corpora.code.parse import text as _text

SOURCE_SUFFIXES = (".cpp", ".h")
TD_SUFFIX = ".td"

# Class-name suffixes whose prefix names the target (PowerPC's classes are PPC*, AMDGPU's are
# AMDGPU*, SI*, R600*, GCN*): the prefixes found before them are T's aliases.
ALIAS_SUFFIXES = (
    "TargetMachine", "Subtarget", "InstrInfo", "RegisterInfo", "FrameLowering", "TargetLowering",
    "AsmBackend", "ELFObjectWriter", "MCCodeEmitter", "AsmPrinter", "InstPrinter", "MCAsmInfo",
    "MachineFunctionInfo", "DAGToDAGISel", "AsmParser", "Disassembler", "TargetObjectFile",
    "MCInstLower", "RegisterBankInfo", "CallLowering", "LegalizerInfo", "SelectionDAGInfo",
    "TargetStreamer", "ELFStreamer", "MCExpr", "InstructionSelector", "TTIImpl",
)

# TableGen base classes (from llvm/Target/Target.td and friends) -> attribute kind.
TD_BASE_KINDS = {
    "Register": "register", "RegisterWithSubRegs": "register", "RegisterTuples": "register",
    "RegisterClass": "register_class",
    "Instruction": "instruction", "StandardPseudoInstruction": "instruction",
    "SubtargetFeature": "subtarget_feature",
    "CallingConv": "calling_convention", "CalleeSavedRegs": "calling_convention",
    "Processor": "processor", "ProcessorModel": "processor",
}
ATTRIBUTE_KINDS = ("register", "register_class", "instruction_format", "instruction", "subtarget_feature",
                   "calling_convention", "processor", "fixup", "relocation")

# Attribute macros that tree-sitter-cpp cannot read (they precede class names and return
# types); blanked with spaces of the same length, so bytes and lines keep their positions.
_ATTR_MACROS = re.compile(
    rb"\bLLVM_(?:LIBRARY_VISIBILITY|EXTERNAL_VISIBILITY|ATTRIBUTE_[A-Z_]+|NODISCARD|READONLY|READNONE|"
    rb"DUMP_METHOD|DELETED_FUNCTION)\b(?!\s*\()")

_SIMPLE_STATEMENTS = {
    "expression_statement", "return_statement", "declaration", "break_statement", "continue_statement",
    "goto_statement", "throw_statement", "alias_declaration", "type_definition", "using_declaration",
    "static_assert_declaration", "co_return_statement",
}
_ATOMIC_TOKENS = {"string_literal", "char_literal", "raw_string_literal", "concatenated_string",
                  "system_lib_string", "number_literal"}


# --------------------------------------------------------------------------- records
@dataclass
class Function:
    target: str
    path: str
    qualified_name: str
    name: str
    class_name: Optional[str]
    role: str
    signature: str
    body: str
    text: str  # the whole definition as written
    statements: list[str]
    identifiers: list[str]
    start_line: int  # 1-based, first line of the definition (template/return type included)
    end_line: int
    start_byte: int
    end_byte: int
    n_errors: int
    in_class: bool

    @property
    def func_id(self) -> str:
        h = hashlib.sha1(f"{self.path}:{self.start_byte}:{self.text}".encode()).hexdigest()[:12]
        return f"{self.target}:{self.qualified_name}:{h}"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["func_id"] = self.func_id
        return d


@dataclass
class Attribute:
    target: str
    kind: str
    name: str
    parents: list[str] = field(default_factory=list)
    refs: list[str] = field(default_factory=list)
    value: Optional[str] = None
    path: Optional[str] = None
    line: Optional[int] = None


@dataclass
class FileReport:
    path: str
    kind: str
    sha256: str
    parsed: bool
    n_errors: int = 0
    error: Optional[str] = None
    n_functions: int = 0


@dataclass
class TargetTree:
    target: str
    root: str
    aliases: list[str]
    files: list[FileReport]
    functions: list[Function]
    attributes: list[Attribute]

    @property
    def failed_files(self) -> list[FileReport]:
        return [f for f in self.files if not f.parsed]

    def fingerprint(self) -> str:
        h = hashlib.sha256()
        for f in sorted(self.files, key=lambda f: f.path):
            h.update(f"{f.path}:{f.sha256}\n".encode())
        return h.hexdigest()


class BackendInputError(Exception):
    """Bad input (no targets, nothing parsable); one line for the user."""


# --------------------------------------------------------------------------- parsers
def prepare_cpp(source: bytes) -> bytes:
    return _ATTR_MACROS.sub(lambda m: b" " * len(m.group(0)), source)


def parse_cpp(source: bytes | str):
    data = source.encode() if isinstance(source, str) else source
    return cpp_parser().parse(prepare_cpp(data))


def error_nodes(node: Node) -> list[Node]:
    if not node.has_error:
        return []
    out = []
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type == "ERROR" or n.is_missing:
            out.append(n)
            continue
        if n.has_error:
            stack.extend(n.children)
    return sorted(out, key=lambda n: n.start_byte)


# --------------------------------------------------------------------------- normalization
def tokens_of(node: Node) -> list[str]:
    """The node's tokens, comments dropped; string/number literals stay one token."""
    out: list[str] = []
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type == "comment":
            continue
        if n.type in _ATOMIC_TOKENS or n.child_count == 0:
            t = _text(n)
            if t:
                out.append(" ".join(t.split()) if n.type not in ("string_literal", "raw_string_literal") else t)
            continue
        stack.extend(reversed(n.children))
    return out


def norm(node: Node) -> str:
    return " ".join(tokens_of(node))


_TOKEN_RE = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|\w+|::|->|<<=|>>=|[-+*/%&|^!=<>]=|&&|\|\||\+\+|--|<<|>>|\S')
_COMMENT_RE = re.compile(r'//[^\n]*|/\*.*?\*/', re.S)


def normalize_code(text: str) -> str:
    """Whitespace- and comment-insensitive form of arbitrary code text (string literals kept)."""
    # Remove comments without touching string literals.
    pieces = re.split(r'("(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\')', text)
    cleaned = "".join(p if i % 2 else _COMMENT_RE.sub(" ", p) for i, p in enumerate(pieces))
    return " ".join(_TOKEN_RE.findall(cleaned))


def statements_of(body: Node, sites: Optional[list] = None) -> list[str]:
    """The statements of a function body, in order, each normalized.

    Simple statements are one entry each; control statements contribute their header
    (``if ( c )``, ``else``, ``switch ( x )``, ``case K :``, ``for ( ... )``) and then their parts.

    ``sites``, when given, receives one ``StatementSite`` per entry (same order): the entry's
    bytes and where a statement inserted right after it in this order would go, so an edit can
    add a statement at a known place of the list (None where no plain insertion is, e.g. after
    an unbraced ``if`` header or a ``switch`` header).
    """
    out: list[str] = []

    def emit(text: str, node: Node, insert_at: Optional[int]) -> None:
        out.append(text)
        if sites is not None:
            sites.append(StatementSite(text, node.start_byte, node.end_byte, insert_at))

    def opening(block: Optional[Node]) -> Optional[int]:
        """Just inside a braced block's '{' (None for an unbraced body)."""
        if block is not None and block.type == "compound_statement" and block.children \
                and block.children[0].type == "{":
            return block.children[0].end_byte
        return None

    def visit(node: Node) -> None:
        t = node.type
        if t == "comment" or t in ("{", "}", ";"):
            return
        if t == "compound_statement":
            for c in node.named_children:
                visit(c)
        elif t == "if_statement":
            cond = node.child_by_field_name("condition")
            constexpr = any(c.type == "constexpr" for c in node.children)
            cons = node.child_by_field_name("consequence")
            emit(("if constexpr " if constexpr else "if ") + (norm(cond) if cond else ""), node, opening(cons))
            if cons is not None:
                visit(cons)
            alt = node.child_by_field_name("alternative")
            if alt is not None:
                inner = next((c for c in alt.named_children), None)
                emit("else", alt, opening(inner))
                for c in alt.named_children:
                    visit(c)
        elif t == "else_clause":
            inner = next((c for c in node.named_children), None)
            emit("else", node, opening(inner))
            for c in node.named_children:
                visit(c)
        elif t in ("for_statement", "for_range_loop"):
            body = node.child_by_field_name("body")
            head = [tok for c in node.children if c != body for tok in tokens_of(c)]
            emit(" ".join(head), node, opening(body))
            if body is not None:
                visit(body)
        elif t == "while_statement":
            cond = node.child_by_field_name("condition")
            body = node.child_by_field_name("body")
            emit("while " + (norm(cond) if cond else ""), node, opening(body))
            if body is not None:
                visit(body)
        elif t == "do_statement":
            body = node.child_by_field_name("body")
            emit("do", node, opening(body))
            if body is not None:
                visit(body)
            cond = node.child_by_field_name("condition")
            emit("while " + (norm(cond) if cond else "") + " ;", node, None)
        elif t == "switch_statement":
            cond = node.child_by_field_name("condition")
            emit("switch " + (norm(cond) if cond else ""), node, None)
            body = node.child_by_field_name("body")
            if body is not None:
                visit(body)
        elif t == "case_statement":
            value = node.child_by_field_name("value")
            colon = next((c for c in node.children if c.type == ":"), None)
            emit(("case " + norm(value) + " :") if value is not None else "default :", node,
                 colon.end_byte if colon is not None else None)
            for c in node.named_children:
                if c == value:
                    continue
                visit(c)
        elif t == "labeled_statement":
            label = node.child_by_field_name("label")
            emit((norm(label) if label else "") + " :", node, None)
            for c in node.named_children:
                if c != label:
                    visit(c)
        elif t == "try_statement":
            emit("try", node, None)
            for c in node.named_children:
                visit(c)
        elif t == "catch_clause":
            params = node.child_by_field_name("parameters")
            emit("catch " + (norm(params) if params else ""), node, None)
            body = node.child_by_field_name("body")
            if body is not None:
                visit(body)
        else:
            s = norm(node)
            if s:
                # after a plain statement of a block (not a condition's declaration or the like)
                ok = node.parent is not None and node.parent.type in ("compound_statement", "case_statement")
                emit(s, node, node.end_byte if ok else None)

    visit(body)
    return out


@dataclass
class StatementSite:
    text: str  # the normalized statement, as statements_of lists it
    start_byte: int
    end_byte: int
    insert_at: Optional[int]  # where a statement following this one in the list goes; None: nowhere plain


# --------------------------------------------------------------------------- names
# Real LLVM targets whose classes carry names that are not abbreviations of the folder name.
KNOWN_ALIASES = {"AMDGPU": ("SI", "R600", "GCN", "AMDGPU"), "DirectX": ("DX", "DXIL"), "PowerPC": ("PPC",),
                 "WebAssembly": ("WebAssembly",), "SystemZ": ("SystemZ",)}


def _is_abbreviation(pre: str, target: str) -> bool:
    """``PPC`` abbreviates ``PowerPC``: same first letter, letters in order."""
    pre_l, tgt_l = pre.lower(), target.lower()
    if not pre_l or pre_l[0] != tgt_l[0]:
        return False
    it = iter(tgt_l)
    return all(ch in it for ch in pre_l)


def find_aliases(target: str, class_names: Iterable[str]) -> list[str]:
    """T's name variants: the folder name, its upper-case form, known aliases, and class-name
    prefixes that abbreviate the folder name (PPC for PowerPC)."""
    aliases = {target, target.upper(), *KNOWN_ALIASES.get(target, ())}
    for cls in class_names:
        for suf in ALIAS_SUFFIXES:
            if cls.endswith(suf) and len(cls) > len(suf):
                pre = cls[: -len(suf)]
                if re.fullmatch(r"[A-Z][A-Za-z0-9]*", pre) and _is_abbreviation(pre, target):
                    aliases.add(pre)
    return sorted(aliases, key=lambda a: (-len(a), a))


def _alias_pattern(aliases: Iterable[str]) -> re.Pattern:
    return alias_pattern_cached(tuple(sorted(set(aliases))))


@lru_cache(maxsize=256)
def alias_pattern_cached(aliases: tuple[str, ...]) -> re.Pattern:
    alts = "|".join(re.escape(a) for a in sorted(aliases, key=len, reverse=True))
    # A prefix ends where a new word starts: upper case, digit, underscore, or the end.
    return re.compile(rf"(?:(?<=^)|(?<=[a-z0-9_])|(?<=::))(?:{alts})(?=[A-Z0-9_]|$|::)")


def strip_target(name: str, aliases: Iterable[str]) -> str:
    """``RISCVELFObjectWriter::getRelocType`` -> ``ELFObjectWriter::getRelocType``;
    ``createPPCELFObjectWriter`` -> ``createELFObjectWriter``."""
    pat = _alias_pattern(aliases)
    parts = name.split("::")
    out = []
    for p in parts:
        q = pat.sub("", p)
        out.append(q if q and not q.startswith(("_",)) else (q.lstrip("_") or p))
    return "::".join(out)


@lru_cache(maxsize=256)
def _lower_aliases_cached(aliases: tuple[str, ...]) -> frozenset[str]:
    return frozenset(a.lower() for a in aliases if len(a) >= 2)


def _lower_aliases(aliases: Iterable[str]) -> frozenset[str]:
    return _lower_aliases_cached(tuple(sorted(set(aliases))))


def is_target_identifier(ident: str, aliases: list[str], attribute_names: set[str],
                         reloc_prefixes: Iterable[str] = ()) -> bool:
    """Does ``ident`` (maybe qualified, e.g. ``RISCV::X1``) name something of this target?"""
    parts = ident.split("::")
    base = parts[-1]
    if base in attribute_names:
        return True
    quals = parts[:-1]
    for q in quals:
        for a in aliases:
            if q.startswith(a) and (len(q) == len(a) or q[len(a)].isupper() or q[len(a)].isdigit() or q[len(a)] == "_"):
                return True
    if quals and quals[-1] == "ELF" and any(base.startswith(p) for p in reloc_prefixes):
        return True
    for p in parts:
        if _alias_pattern(aliases).search(p):
            return True
        toks = p.split("_")
        if len(toks) > 1 and any(t.lower() in _lower_aliases(aliases) for t in toks):
            return True
    return False


# --------------------------------------------------------------------------- C++ functions


def _enclosing_classes(node: Node) -> list[str]:
    names = []
    p = node.parent
    while p is not None:
        if p.type in ("class_specifier", "struct_specifier", "union_specifier"):
            n = p.child_by_field_name("name")
            if n is not None:
                names.append(_text(n))
        p = p.parent
    return list(reversed(names))


def identifiers_in(node: Node) -> list[str]:
    """Identifiers a body references: qualified names whole, plain names alone."""
    seen: dict[str, None] = {}
    stack = [node]
    while stack:
        n = stack.pop()
        t = n.type
        if t in ("qualified_identifier", "qualified_type_identifier"):
            txt = re.sub(r"\s+", "", _text(n))
            txt = re.sub(r"<.*", "", txt)  # drop template arguments
            if txt and "(" not in txt:
                seen.setdefault(txt, None)
            # descend only into template args / the name's own qualifiers handled by text
            stack.extend(c for c in reversed(n.children) if c.type == "template_argument_list")
            continue
        if t in ("identifier", "type_identifier", "field_identifier", "namespace_identifier"):
            seen.setdefault(_text(n), None)
            continue
        if t == "comment" or t in _ATOMIC_TOKENS:
            continue
        stack.extend(reversed(n.children))
    return list(seen)


def _signature(defn: Node, body: Node, src: bytes) -> str:
    head = src[defn.start_byte: body.start_byte].decode("utf-8", errors="replace")
    head = _COMMENT_RE.sub(" ", head)
    # Constructors' member initializers are part of the body, not the signature.
    return " ".join(head.split())


def extract_functions(source: bytes, target: str, path: str, aliases: list[str],
                      attribute_names: set[str], reloc_prefixes: Iterable[str] = ()) -> tuple[list[Function], object]:
    data = prepare_cpp(source)
    tree = cpp_parser().parse(data)
    funcs: list[Function] = []
    for node in walk(tree.root_node):
        if node.type != "function_definition":
            continue
        body = node.child_by_field_name("body")
        decl = node.child_by_field_name("declarator")
        if body is None or decl is None:
            continue
        fdecl, name_node = function_declarator(decl)
        if fdecl is None or name_node is None:
            continue
        raw_name = re.sub(r"\s+", "", _text(name_node))
        if not raw_name:
            continue
        classes = _enclosing_classes(node)
        in_class = bool(classes)
        qualified = "::".join(classes + [raw_name]) if in_class else raw_name
        # drop template arguments in qualifiers (Foo<T>::bar -> Foo::bar)
        qualified = re.sub(r"<[^<>]*>", "", qualified)
        qualified = re.sub(r"^(?:llvm::)+", "", qualified)
        parts = qualified.split("::")
        name = parts[-1]
        class_name = parts[-2] if len(parts) > 1 else None
        role = strip_target(qualified, aliases)
        start = node
        if node.parent is not None and node.parent.type == "template_declaration":
            start = node.parent
        # The definition plus any initializer list: the body of a constructor starts at ':'.
        init = next((c for c in node.children if c.type == "field_initializer_list"), None)
        body_start = init if init is not None else body
        text = data[start.start_byte: node.end_byte].decode("utf-8", errors="replace")
        used = identifiers_in(body) if init is None else list(dict.fromkeys(identifiers_in(init) + identifiers_in(body)))
        idents = [i for i in used if is_target_identifier(i, aliases, attribute_names, reloc_prefixes)]
        stmts = ([norm(init)] if init is not None else []) + statements_of(body)
        funcs.append(Function(
            target=target, path=path, qualified_name=qualified, name=name, class_name=class_name, role=role,
            signature=_signature(start, body_start, data),
            body=data[body_start.start_byte: node.end_byte].decode("utf-8", errors="replace"), text=text,
            statements=stmts, identifiers=idents,
            start_line=start.start_point[0] + 1, end_line=node.end_point[0] + 1,
            start_byte=start.start_byte, end_byte=node.end_byte,
            n_errors=len(error_nodes(node)), in_class=in_class))
    return funcs, tree


def class_names_in(tree) -> list[str]:
    out = []
    for n in walk(tree.root_node):
        if n.type in ("class_specifier", "struct_specifier"):
            name = n.child_by_field_name("name")
            if name is not None:
                out.append(_text(name))
        elif n.type == "function_definition":
            decl = n.child_by_field_name("declarator")
            if decl is not None:
                _, nm = function_declarator(decl)
                if nm is not None and nm.type == "qualified_identifier":
                    scope = nm.child_by_field_name("scope")
                    if scope is not None:
                        out.append(_text(scope))
    return out


# --------------------------------------------------------------------------- fixups
def extract_fixups(source: bytes, tree, target: str, path: str) -> list[Attribute]:
    """Enumerators of fixup enums (``enum Fixups {...}`` in ``*FixupKinds.h`` and any enum whose
    members are ``fixup_*``)."""
    out = []
    is_fixup_file = "Fixup" in Path(path).name
    for n in walk(tree.root_node):
        if n.type != "enum_specifier":
            continue
        body = n.child_by_field_name("body")
        if body is None:
            continue
        enum_name = _text(n.child_by_field_name("name")) if n.child_by_field_name("name") is not None else ""
        members = []
        for e in body.named_children:
            if e.type != "enumerator":
                continue
            nm = e.child_by_field_name("name")
            val = e.child_by_field_name("value")
            if nm is not None:
                members.append((_text(nm), _text(val) if val is not None else None, e.start_point[0] + 1))
        names = [m[0] for m in members]
        fixupish = sum(1 for m in names if m.lower().startswith(("fixup_", "reloc_", "fk_")))
        if not (("fixup" in enum_name.lower() and is_fixup_file) or (names and fixupish * 2 >= len(names))
                or (is_fixup_file and enum_name in ("Fixups", ""))):
            continue
        for name, val, line in members:
            if name in ("LastTargetFixupKind", "NumTargetFixupKinds", "FirstTargetFixupKind", "FirstLiteralRelocationKind"):
                continue
            out.append(Attribute(target, "fixup", name, value=val, path=path, line=line))
    return out


# --------------------------------------------------------------------------- relocations
_RELOC_RE = re.compile(r"^\s*ELF_RELOC\s*\(\s*(\w+)\s*,\s*([^)]+?)\s*\)", re.M)
_RELOC_ALIASES = {"i386": "X86", "x86_64": "X86", "powerpc64": "PowerPC"}


def reloc_files_for(target: str, relocs_dir: Optional[Path], aliases: Iterable[str] = ()) -> list[Path]:
    if relocs_dir is None or not relocs_dir.is_dir():
        return []
    names = {target.lower(), *(a.lower() for a in aliases)}
    out = []
    for f in sorted(relocs_dir.glob("*.def")):
        stem = f.stem.lower()
        if _RELOC_ALIASES.get(stem, "").lower() == target.lower() or stem in names:
            out.append(f)
    return out


def extract_relocations(path: Path, target: str) -> list[Attribute]:
    text = path.read_text(errors="replace")
    out = []
    for m in _RELOC_RE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        out.append(Attribute(target, "relocation", m.group(1), value=m.group(2).strip(), path=path.name, line=line))
    return out


def reloc_prefixes(relocs: Iterable[Attribute]) -> list[str]:
    """``R_RISCV_`` from ``R_RISCV_32`` etc. (the shared stem of a target's relocation names)."""
    counts: dict[str, int] = {}
    for r in relocs:
        m = re.match(r"(R_[A-Z0-9]+_)", r.name)
        if m:
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return sorted(p for p, n in counts.items() if n >= 2)


# --------------------------------------------------------------------------- TableGen
def _td_name(node: Node) -> Optional[str]:
    for c in node.named_children:
        if c.type in ("value", "identifier"):
            return re.sub(r"\s+", "", _text(c))
    return None


def _td_parents(node: Node) -> list[str]:
    pcl = next((c for c in node.named_children if c.type == "parent_class_list"), None)
    if pcl is None:
        return []
    return [_text(c) for c in pcl.named_children if c.type == "identifier"]


def _td_refs(node: Node) -> list[str]:
    seen: dict[str, None] = {}
    for part in node.named_children:
        if part.type in ("parent_class_list", "record_body"):
            for n in walk(part):
                if n.type == "identifier" and n.parent is not None and n.parent.type in ("value", "dag_arg"):
                    seen.setdefault(_text(n), None)
    return list(seen)


def _td_first_string(node: Node) -> Optional[str]:
    for n in walk(node):
        if n.type == "string_string":
            return _text(n).strip('"')
    return None


def _foreach_range(node: Node) -> Optional[tuple[str, list[str]]]:
    """``foreach i = 0-31 in`` / ``foreach i = [a, b] in`` -> (var, values); None if not literal."""
    var = next((c for c in node.named_children if c.type == "identifier"), None)
    val = next((c for c in node.named_children if c.type == "value"), None)
    if var is None or val is None:
        return None
    txt = re.sub(r"\s+", "", _text(val))
    m = re.fullmatch(r"(\d+)(?:-|\.\.\.)(\d+)", txt)
    if m:
        a, b = int(m.group(1)), int(m.group(2))
        if 0 <= b - a <= 1024:
            return _text(var), [str(i) for i in range(a, b + 1)]
    m = re.fullmatch(r"\[([\w,]*)\]", txt)
    if m:
        return _text(var), [v for v in m.group(1).split(",") if v]
    return None


def extract_tablegen(files: list[tuple[str, bytes]], target: str) -> tuple[list[Attribute], list[FileReport]]:
    """Registers, register classes, instruction formats, instructions, features, calling
    conventions and processors from a target's .td files (class hierarchy resolved across them)."""
    parser = tablegen_parser()
    classes: dict[str, list[str]] = {}
    multiclass_parents: dict[str, list[str]] = {}
    records: list[tuple[str, str, list[str], list[str], Optional[str], str, int]] = []  # (what, name, parents, refs, str, path, line)
    reports = []
    for path, data in files:
        tree = parser.parse(data)
        errs = error_nodes(tree.root_node)
        first = errs[0] if errs else None
        reports.append(FileReport(path=path, kind="td", sha256=hashlib.sha256(data).hexdigest(), parsed=not errs,
                                  n_errors=len(errs),
                                  error=(f"{path}:{first.start_point[0] + 1}:{first.start_point[1] + 1}: syntax error"
                                         if first is not None else None)))

        def visit(node: Node, subst: dict[str, str], in_multiclass: Optional[str]) -> None:
            for c in node.named_children:
                t = c.type
                if t in ("statement", "multiclass_statement", "statement_or_block", "multiclass_body"):
                    visit(c, subst, in_multiclass)
                elif t == "let":
                    visit(c, subst, in_multiclass)
                elif t == "foreach":
                    rng = _foreach_range(c)
                    body = [x for x in c.named_children if x.type in ("statement_or_block", "statement")]
                    if rng is None:
                        for b in body:
                            visit(b, subst, in_multiclass)
                    else:
                        var, values = rng
                        for v in values:
                            for b in body:
                                visit(b, {**subst, var: v}, in_multiclass)
                elif t == "class":
                    name = next((x for x in c.named_children if x.type == "identifier"), None)
                    if name is not None:
                        classes[_text(name)] = _td_parents(c)
                        records.append(("class", _text(name), _td_parents(c), _td_refs(c), None, path, c.start_point[0] + 1))
                elif t == "multiclass":
                    name = next((x for x in c.named_children if x.type == "identifier"), None)
                    if name is not None:
                        parents: list[str] = []
                        for d in walk(c):
                            if d.type in ("def", "defm"):
                                parents.extend(_td_parents(d))
                        multiclass_parents[_text(name)] = parents
                elif t in ("def", "defm") and in_multiclass is None:
                    name = _td_name(c)
                    if not name:
                        continue
                    if "#" in name:
                        pieces = [subst.get(p, p) for p in name.split("#")]
                        if any(p in subst.values() for p in pieces) or not any(p in subst for p in name.split("#")):
                            name = "".join(pieces)
                        if any(not re.fullmatch(r"\w+", p) for p in pieces):
                            continue
                    if not re.fullmatch(r"\w+", name):
                        continue
                    records.append((t, name, _td_parents(c), _td_refs(c), _td_first_string(c), path,
                                    c.start_point[0] + 1))

        visit(tree.root_node, {}, None)

    @lru_cache(maxsize=None)
    def kind_of_class(name: str, depth: int = 0) -> Optional[str]:
        if name in TD_BASE_KINDS:
            return TD_BASE_KINDS[name]
        if depth > 40:
            return None
        for p in classes.get(name, []) + multiclass_parents.get(name, []):
            if p == name:
                continue
            k = kind_of_class(p, depth + 1)
            if k:
                return k
        return None

    out: dict[tuple[str, str], Attribute] = {}
    for what, name, parents, refs, string, path, line in records:
        if what == "class":
            if kind_of_class(name) == "instruction":
                out.setdefault(("instruction_format", name), Attribute(target, "instruction_format", name, parents=parents,
                                                                       refs=[], path=path, line=line))
            continue
        kinds = [kind_of_class(p) for p in parents]
        kind = next((k for k in kinds if k), None)
        if kind is None:
            continue
        # Records' references that name other records (members of a class, implied features...)
        out.setdefault((kind, name), Attribute(target, kind, name, parents=parents, refs=refs[:64], value=string,
                                               path=path, line=line))
    return list(out.values()), reports


def extract_class_bases(tree, target: str, path: str) -> list[Attribute]:
    """Classes defined with a body and the classes they derive from (kind ``class``; parents:
    base names without ``llvm::`` or template arguments). Roles are canonicalized with them:
    Xtensa's ``XtensaObjectWriter`` derives from ``MCELFObjectTargetWriter`` like the other
    targets' ``<T>ELFObjectWriter`` (retrieval/backend_index.canonical_roles)."""
    out: list[Attribute] = []
    for n in walk(tree.root_node):
        if n.type not in ("class_specifier", "struct_specifier"):
            continue
        name = n.child_by_field_name("name")
        clause = next((c for c in n.children if c.type == "base_class_clause"), None)
        if name is None or clause is None or n.child_by_field_name("body") is None:
            continue
        bases = []
        for c in clause.named_children:
            if c.type in ("type_identifier", "qualified_identifier", "qualified_type_identifier", "template_type"):
                b = re.sub(r"<.*", "", re.sub(r"\s+", "", _text(c)))
                b = re.sub(r"^(?:::)?(?:llvm::)+", "", b)
                if b:
                    bases.append(b)
        cls = re.sub(r"<.*", "", _text(name))
        if bases and re.fullmatch(r"[A-Za-z_]\w*", cls):
            out.append(Attribute(target, "class", cls, parents=bases, path=path, line=n.start_point[0] + 1))
    return out


# What a function's declarator may sit in between it and its declaration: ``X *f();``,
# ``const X &f();``, ``X **f();`` (the return type's ``*``/``&`` wrap the function's declarator).
_RETURN_WRAPPERS = ("pointer_declarator", "reference_declarator", "attributed_declarator")


def declaration_of(fdecl: Node) -> Optional[Node]:
    """The ``declaration`` / ``field_declaration`` a ``function_declarator`` declares a function
    in, through any nesting of pointer and reference declarators of its return type; None for a
    definition, a parameter or a function pointer (``void (*f)()``: a function is not declared)."""
    p = fdecl.parent
    while p is not None and p.type in _RETURN_WRAPPERS:
        p = p.parent
    if p is None or p.type not in ("field_declaration", "declaration"):
        return None
    return p


def extract_declarations(tree, target: str, path: str) -> list[Attribute]:
    """Names a header declares (enumerators, classes, namespaces, member functions), kept as
    attributes of kind ``declaration`` (value: the qualified form). A porter writes these before
    the function bodies; fork-and-adapt uses them to check that a renamed identifier exists."""
    out: list[Attribute] = []

    def scope_of(node: Node) -> list[str]:
        names = []
        p = node.parent
        while p is not None:
            if p.type in ("namespace_definition", "class_specifier", "struct_specifier"):
                n = p.child_by_field_name("name")
                if n is not None:
                    names.append(_text(n))
            elif p.type == "enum_specifier" and any(c.type in ("class", "struct") for c in p.children):
                n = p.child_by_field_name("name")
                if n is not None:
                    names.append(_text(n))
            p = p.parent
        return [x for x in reversed(names) if x != "llvm"]

    for n in walk(tree.root_node):
        name_node = None
        if n.type == "enumerator":
            name_node = n.child_by_field_name("name")
        elif n.type in ("class_specifier", "struct_specifier", "namespace_definition", "enum_specifier"):
            if n.child_by_field_name("body") is not None:
                name_node = n.child_by_field_name("name")
        elif n.type == "function_declarator" and declaration_of(n) is not None:
            name_node = n.child_by_field_name("declarator")
        if name_node is None:
            continue
        name = _text(name_node)
        if not re.fullmatch(r"[A-Za-z_]\w*", name):
            continue
        qual = "::".join(scope_of(n) + [name])
        out.append(Attribute(target, "declaration", name, value=qual, path=path, line=n.start_point[0] + 1))
    return out


_PARAMETERS = ("parameter_declaration", "optional_parameter_declaration")
_NAME_WRAPPERS = ("pointer_declarator", "reference_declarator", "abstract_pointer_declarator",
                  "abstract_reference_declarator", "attributed_declarator")


def parameter_name(param: Node) -> Optional[Node]:
    """The identifier a parameter declares (under its ``*``/``&``), or None (unnamed, ``...``)."""
    d = param.child_by_field_name("declarator")
    while d is not None and d.type in _NAME_WRAPPERS:
        d = d.child_by_field_name("declarator") or next((c for c in d.named_children if c.type != "type_qualifier"),
                                                        None)
    return d if d is not None and d.type == "identifier" else None


def parameters_of(fdecl: Node) -> Optional[list[tuple[str, Optional[str]]]]:
    """(text, name) of each parameter of a ``function_declarator``: the text normalized and without
    a default argument (a definition out of line must not repeat it), the name None when the
    parameter has none. None for a variadic list (``...``) or a parameter that does not parse."""
    params = fdecl.child_by_field_name("parameters")
    if params is None:
        return None
    if any(c.type in ("...", "variadic_parameter", "variadic_parameter_declaration") for c in params.children):
        return None
    out = []
    for c in params.named_children:
        if c.type == "comment":
            continue
        if c.type not in _PARAMETERS or c.has_error:
            return None
        default = c.child_by_field_name("default_value")
        raw = _text(c) if default is None else c.text[:default.start_byte - c.start_byte].decode(errors="replace")
        raw = " ".join(raw.split())
        if default is not None:
            raw = raw.rstrip().rstrip("=").rstrip()
        name = parameter_name(c)
        out.append((raw, _text(name) if name is not None else None))
    return out


def function_declarations(source: bytes) -> list[tuple[str, Optional[list[tuple[str, Optional[str]]]]]]:
    """(qualified name, ``parameters_of``) of every function *declaration* (not a definition) in
    ``source``: a class member as ``Class::name`` (enclosing named classes and namespaces but
    ``llvm``), whatever the return type (``const MCPhysReg *getCalleeSavedRegs(..)``)."""
    tree = cpp_parser().parse(prepare_cpp(source))
    out = []
    for n in walk(tree.root_node):
        if n.type != "function_declarator":
            continue
        p = declaration_of(n)
        d = n.child_by_field_name("declarator")
        if p is None or d is None \
                or d.type not in ("identifier", "field_identifier", "destructor_name"):
            continue
        scope = []
        q = p.parent
        while q is not None:
            if q.type in ("namespace_definition", "class_specifier", "struct_specifier"):
                nm = q.child_by_field_name("name")
                if nm is not None and _text(nm) != "llvm":
                    scope.append(_text(nm))
            q = q.parent
        out.append(("::".join(list(reversed(scope)) + [_text(d)]), parameters_of(n)))
    return out


# --------------------------------------------------------------------------- targets
def find_target_dirs(path: Path) -> tuple[list[Path], Optional[Path]]:
    """Target folders under ``path`` and the ELFRelocs folder that goes with them (or None).

    ``path`` may be ``<llvm>/lib/Target``, a folder holding ``lib/Target`` (what ``skills
    corpora fetch`` writes), or one target folder.
    """
    path = Path(path)
    if (path / "lib" / "Target").is_dir():
        path = path / "lib" / "Target"

    def is_target(d: Path) -> bool:
        return d.is_dir() and any(d.glob("*.td")) and (any(d.glob("*.cpp")) or any(d.glob("*/*.cpp"))
                                                        or any(d.glob("*.h")) or (d / "CMakeLists.txt").is_file())

    if is_target(path) and not any(is_target(d) for d in path.iterdir() if d.is_dir()):
        dirs = [path]
        base = path.parent
    else:
        dirs = sorted((d for d in path.iterdir() if is_target(d)), key=lambda d: d.name) if path.is_dir() else []
        base = path
    relocs = None
    for cand in (base.parent.parent / "include" / "llvm" / "BinaryFormat" / "ELFRelocs",
                 base.parent / "include" / "llvm" / "BinaryFormat" / "ELFRelocs"):
        if cand.is_dir():
            relocs = cand
            break
    return dirs, relocs


def load_target(target_dir: Path, relocs_dir: Optional[Path] = None) -> TargetTree:
    target_dir = Path(target_dir)
    target = target_dir.name
    sources: list[tuple[str, bytes]] = []
    tds: list[tuple[str, bytes]] = []
    for f in sorted(target_dir.rglob("*")):
        if not f.is_file():
            continue
        rel = f.relative_to(target_dir).as_posix()
        if f.suffix in SOURCE_SUFFIXES:
            sources.append((rel, f.read_bytes()))
        elif f.suffix == TD_SUFFIX:
            tds.append((rel, f.read_bytes()))

    # First pass over C++: trees, class names (for T's aliases) and fixups.
    trees = {}
    class_names: list[str] = []
    attributes: list[Attribute] = []
    for rel, data in sources:
        tree = parse_cpp(data)
        trees[rel] = tree
        class_names.extend(class_names_in(tree))
        attributes.extend(extract_fixups(data, tree, target, rel))
        attributes.extend(extract_class_bases(tree, target, rel))
        if rel.endswith(".h"):
            attributes.extend(extract_declarations(tree, target, rel))
    aliases = find_aliases(target, class_names)

    td_attrs, td_reports = extract_tablegen(tds, target)
    attributes.extend(td_attrs)
    relocs: list[Attribute] = []
    for f in reloc_files_for(target, relocs_dir, aliases):
        relocs.extend(extract_relocations(f, target))
    attributes.extend(relocs)
    # de-duplicate (kind, name)
    uniq: dict[tuple[str, str], Attribute] = {}
    for a in attributes:
        uniq.setdefault((a.kind, a.name), a)
    attributes = list(uniq.values())
    attr_names = {a.name for a in attributes if a.kind not in ("instruction_format", "declaration", "class")}
    rprefixes = reloc_prefixes(relocs)

    functions: list[Function] = []
    reports: list[FileReport] = list(td_reports)
    for rel, data in sources:
        funcs, tree = extract_functions(data, target, rel, aliases, attr_names, rprefixes)
        errs = error_nodes(tree.root_node)
        first = errs[0] if errs else None
        reports.append(FileReport(
            path=rel, kind=Path(rel).suffix.lstrip("."), sha256=hashlib.sha256(data).hexdigest(),
            parsed=not errs, n_errors=len(errs),
            error=(f"{rel}:{first.start_point[0] + 1}:{first.start_point[1] + 1}: syntax error near "
                   f"{_text(first)[:40]!r}" if first is not None else None),
            n_functions=len(funcs)))
        functions.extend(funcs)
    return TargetTree(target=target, root=str(target_dir), aliases=aliases, files=reports,
                      functions=functions, attributes=attributes)


# --------------------------------------------------------------------------- neutral text
@lru_cache(maxsize=256)
def _neutral_patterns(aliases: tuple[str, ...]) -> tuple[re.Pattern, Optional[re.Pattern]]:
    lows = sorted({a.lower() for a in aliases if len(a) >= 2}, key=len, reverse=True)
    low_pat = re.compile(r"(?<![A-Za-z0-9])(" + "|".join(re.escape(a) for a in lows) + r")(?=_|\d|$|[^A-Za-z0-9])") if lows else None
    return alias_pattern_cached(aliases), low_pat


def neutralize(text: str, aliases: Iterable[str], placeholder: str = "TGT") -> str:
    """Replace a target's name variants by one placeholder (``RISCV::X1`` -> ``TGT::X1``,
    ``fixup_riscv_hi20`` -> ``fixup_tgt_hi20``, ``R_RISCV_32`` -> ``R_TGT_32``), so texts of
    different targets compare by what they do rather than whose they are."""
    pat, low = _neutral_patterns(tuple(sorted(set(aliases))))

    def repl_word(m: re.Match) -> str:
        word = m.group(0)
        word = pat.sub(placeholder, word)
        if low is not None:
            word = low.sub(lambda mm: placeholder.lower() if mm.group(1).islower() else placeholder, word)
        # R_MIPS_32: the upper-case relocation stem
        return word

    return re.sub(r"[A-Za-z_][A-Za-z0-9_]*", repl_word, text)


_NAME_PARTS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


def subtokens_of_name(name: str) -> list[str]:
    """``fixup_riscv_pcrel_hi20`` -> ['fixup', 'riscv', 'pcrel', 'hi', '20']; ``GPRRegClass`` ->
    ['gpr', 'reg', 'class']."""
    return [p.lower() for piece in re.split(r"[_:]+", name) for p in _NAME_PARTS.findall(piece)]


def parse_definition(text: str) -> Optional[tuple[list[str], str]]:
    """(statements, normalized body) of the first function definition in ``text``; None when
    there is none. Statements are computed exactly as for ingested functions, so generated and
    real code compare like for like."""
    data = prepare_cpp(text.encode())
    tree = cpp_parser().parse(data)
    fn = next((n for n in walk(tree.root_node) if n.type == "function_definition"), None)
    if fn is None:
        return None
    body = fn.child_by_field_name("body")
    if body is None:
        return None
    init = next((c for c in fn.children if c.type == "field_initializer_list"), None)
    stmts = ([norm(init)] if init is not None else []) + statements_of(body)
    return stmts, " ".join(([norm(init)] if init is not None else []) + [norm(body)])
