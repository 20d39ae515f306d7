"""T's own names for a fork's local variables, by declared type.

A fork keeps its donor's local names (``SDLoc DL``, ``MachineOperand &MO``) where T's code may
name values of that type otherwise (``SDLoc dl``, ``MachineOperand &Op``). ``TypeNames`` counts how
T's *other* function definitions name their declarations (locals and parameters) of each type;
``rename_locals`` gives a fork's local of a type T names consistently T's name, throughout the
function (whole identifiers, never a member ``x.name``, a qualified ``X::name`` or text in a
string). Parameters are left alone: T's header names them (``adapt.fit_parameters``).
"""
from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Optional

from corpora.backends.tree import prepare_cpp
from corpora.code.parse import cpp_parser, walk

# a type is T's convention when T's other functions declare it at least MIN_DECLARATIONS times in
# at least MIN_FUNCTIONS functions and one name has at least MIN_SHARE of those declarations (in
# at least MIN_FUNCTIONS functions itself); fixed before any target was scored
MIN_DECLARATIONS = 3
MIN_FUNCTIONS = 2
MIN_SHARE = 0.7

_DECLARING = ("declaration", "for_range_loop", "parameter_declaration", "optional_parameter_declaration")
# a built-in or integer type says nothing of what the value is (``unsigned Reg``, ``unsigned i``)
_UNTYPED = ("primitive_type", "sized_type_specifier", "placeholder_type_specifier", "auto", "decltype")
_INTEGER_TYPEDEF = re.compile(r"(?:std\s*::\s*)?(?:u?int\d*_t|size_t|ssize_t|intptr_t|uintptr_t)")
_WORD = re.compile(r"\b[A-Za-z_]\w*\b")
_TOKEN = re.compile(r"\w+|::|\S")


def _type_key(type_node, pointers: int) -> Optional[str]:
    if type_node is None or type_node.type in _UNTYPED:
        return None
    text = type_node.text.decode(errors="replace")
    if _INTEGER_TYPEDEF.fullmatch(" ".join(text.split())):
        return None
    return " ".join(_TOKEN.findall(text)) + " *" * pointers


def declared_names(node, in_body: bool) -> list[tuple[str, object]]:
    """(type key, identifier node) of each name ``node`` declares, when it is a declaration, a
    range-for or a parameter (not a ``static`` or ``extern`` one): the type as written without ``const`` and ``&``, with one ``*`` per
    pointer level. ``in_body``: a function declarator is a variable there (``SDLoc DL(Op);``)."""
    if node.type not in _DECLARING:
        return []
    # a static local outlives the call (``static Target TheXTarget;``): a name, not a value's
    if any(c.type == "storage_class_specifier" for c in node.children):
        return []
    type_node = node.child_by_field_name("type")
    out = []
    for d in node.children_by_field_name("declarator"):
        pointers = 0
        while d is not None:
            if d.type == "init_declarator" or (d.type == "function_declarator" and in_body):
                d = d.child_by_field_name("declarator")
            elif d.type == "pointer_declarator":
                pointers += 1
                d = d.child_by_field_name("declarator")
            elif d.type in ("reference_declarator", "attributed_declarator"):
                d = next((c for c in d.named_children if c.type != "type_qualifier"), None)
            else:
                break
        if d is not None and d.type == "identifier":
            key = _type_key(type_node, pointers)
            if key:
                out.append((key, d))
    return out


def _definition(text: str):
    data = prepare_cpp(text.encode())
    tree = cpp_parser().parse(data)
    fn = next((n for n in walk(tree.root_node) if n.type == "function_definition"), None)
    return data, fn


def declarations_of(text: str) -> list[tuple[str, str]]:
    """(type key, name) of every parameter and local a function definition declares."""
    _, fn = _definition(text)
    if fn is None:
        return []
    body = fn.child_by_field_name("body")
    out = []
    for n in walk(fn):
        in_body = body is not None and body.start_byte <= n.start_byte < body.end_byte
        out.extend((key, ident.text.decode(errors="replace")) for key, ident in declared_names(n, in_body))
    return out


@dataclass
class TypeNames:
    """How a target's function definitions name declarations of each type."""
    by_function: dict = field(default_factory=dict)  # function id -> [(type key, name)]
    counts: dict = field(default_factory=lambda: defaultdict(Counter))  # key -> name -> declarations
    functions: dict = field(default_factory=lambda: defaultdict(Counter))  # key -> name -> functions
    declaring: Counter = field(default_factory=Counter)  # key -> functions declaring it

    @classmethod
    def from_texts(cls, texts: dict) -> "TypeNames":
        """``texts``: {function id: definition text}."""
        out = cls()
        for fid, text in texts.items():
            decls = declarations_of(text)
            out.by_function[fid] = decls
            for key, name in decls:
                out.counts[key][name] += 1
            for key, name in set(decls):
                out.functions[key][name] += 1
            out.declaring.update({key for key, _ in decls})
        return out

    def convention(self, key: str, exclude: Iterable[str] = ()) -> Optional[str]:
        """The name T's functions, those in ``exclude`` left out, give ``key`` by convention
        (the thresholds above), or None."""
        if key not in self.counts:
            return None
        counts, funcs, declaring = Counter(self.counts[key]), Counter(self.functions[key]), self.declaring[key]
        for fid in set(exclude):
            own = [name for k, name in self.by_function.get(fid, ()) if k == key]
            counts.subtract(own)
            funcs.subtract(set(own))
            declaring -= bool(own)
        counts, funcs = +counts, +funcs
        total = sum(counts.values())
        if total < MIN_DECLARATIONS:
            return None
        (name, n), = counts.most_common(1)
        if declaring < MIN_FUNCTIONS or funcs[name] < MIN_FUNCTIONS or n < MIN_SHARE * total:
            return None
        return name


def rename_locals(text: str, names: TypeNames, exclude: Iterable[str] = ()) -> tuple[str, dict[str, str]]:
    """``text`` (one function definition) with each local variable of a type T names by
    convention (``names``, the functions in ``exclude`` left out) renamed to T's name, in every use.
    A local stays when it is also a parameter, is declared with two types, or when T's name is
    already a word of the function (another variable, a member, a string's text) or the new name of
    another local. Returns (text, {old: new})."""
    data, fn = _definition(text)
    if fn is None:
        return text, {}
    body = fn.child_by_field_name("body")
    if body is None:
        return text, {}
    exclude = tuple(exclude)
    params = {ident.text.decode(errors="replace") for n in walk(fn) if not (body.start_byte <= n.start_byte < body.end_byte)
              for _, ident in declared_names(n, False)}
    types: dict[str, set] = defaultdict(set)
    for n in walk(body):
        for key, ident in declared_names(n, True):
            types[ident.text.decode(errors="replace")].add(key)
    words = set(_WORD.findall(text))
    renames: dict[str, str] = {}
    for name, keys in sorted(types.items()):
        if name in params or len(keys) != 1:
            continue
        new = names.convention(next(iter(keys)), exclude)
        if new and new != name and new not in words and new not in renames.values():
            renames[name] = new
    if not renames:
        return text, {}
    edits = []
    for n in walk(fn):
        if n.type != "identifier":
            continue
        name = data[n.start_byte:n.end_byte].decode(errors="replace")
        parent = n.parent
        if name in renames and not (parent is not None and parent.type == "qualified_identifier"
                                    and parent.child_by_field_name("name") == n):
            edits.append((n.start_byte, n.end_byte, renames[name]))
    out = text.encode()  # prepare_cpp keeps byte offsets, so edits apply to the original
    for s, e, rep in sorted(edits, key=lambda x: -x[0]):
        out = out[:s] + rep.encode() + out[e:]
    return out.decode("utf-8", errors="replace"), renames
