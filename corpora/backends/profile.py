"""A target's names as the store holds them after ingestion (``target_attributes``): its aliases,
attributes by kind, header declarations and TableGen namespaces. Read by the backend miner
(mining/backend/) and by fork-and-adapt (retrieval/backend/adapt.py)."""
from __future__ import annotations

from dataclasses import dataclass, field

PRIMARY_ALIAS = {"PowerPC": "PPC"}
# TableGen-generated C++ names built from a record name.
GENERATED_SUFFIXES = ("RegClassID", "RegClass", "RegisterClass", "Operand", "RegBankID", "RegBank")
# What TableGen makes of a ``CalleeSavedRegs`` record (a calling_convention attribute): ``CSR_X`` gives
# ``CSR_X_SaveList`` (getCalleeSavedRegs) and ``CSR_X_RegMask`` (getCallPreservedMask).
CSR_SUFFIXES = ("_SaveList", "_RegMask")


def generated_base(kind_of: dict, base: str) -> tuple[str, str]:
    """(record, suffix) when ``base`` is a TableGen-generated name of a record in ``kind_of``
    (``GPRRegClass`` -> (``GPR``, ``RegClass``), ``CSR_X_SaveList`` -> (``CSR_X``, ``_SaveList``)),
    else (``base``, "")."""
    if base in kind_of:
        return base, ""
    for suf in GENERATED_SUFFIXES:
        if base.endswith(suf) and base[: -len(suf)] in kind_of:
            return base[: -len(suf)], suf
    for suf in CSR_SUFFIXES:
        if base.endswith(suf) and kind_of.get(base[: -len(suf)]) == "calling_convention":
            return base[: -len(suf)], suf
    return base, ""


@dataclass
class TargetProfile:
    target: str
    aliases: list[str]
    primary: str
    by_kind: dict = field(default_factory=dict)  # kind -> [names]
    kind_of: dict = field(default_factory=dict)  # name -> kind
    declared: set = field(default_factory=set)  # names declared in headers
    namespaces: set = field(default_factory=set)  # TableGen namespaces (register classes' first argument)
    classes: dict = field(default_factory=dict)  # C++ class T defines -> its base classes, T's name stripped

    @property
    def relocations(self) -> list[str]:
        return list(self.by_kind.get("relocation", []))

    def knows(self, name: str) -> bool:
        base = name.split("::")[-1]
        return base in self.declared or generated_base(self.kind_of, base)[0] in self.kind_of

    def generated_names(self) -> set[str]:
        """The C++ names TableGen generates from T's records: register classes' ``RegClass``..,
        callee-saved sets' ``_SaveList``/``_RegMask``."""
        out = {n + suf for n in self.by_kind.get("register_class", []) for suf in GENERATED_SUFFIXES}
        return out | {n + suf for n in self.by_kind.get("calling_convention", []) for suf in CSR_SUFFIXES}


def load_profile(store, target: str) -> TargetProfile:
    from corpora.backends.tree import strip_target

    rows = store.query("SELECT kind, name, value, parents FROM target_attributes WHERE target = ? ORDER BY kind, name",
                       [target])
    if not rows:
        raise KeyError(target)
    aliases = sorted([r["name"] for r in rows if r["kind"] == "alias"], key=lambda a: (-len(a), a)) or [target]
    prof = TargetProfile(target, aliases, PRIMARY_ALIAS.get(target, target))
    for r in rows:
        k, n = r["kind"], r["name"]
        if k == "class":  # a base class spelled with T's name (ARCGenInstrInfo) compares as GenInstrInfo
            prof.classes[n] = tuple(strip_target(b.split("::")[-1], aliases) for b in (r["parents"] or []))
            continue
        if k == "alias":
            continue
        if k == "declaration":
            prof.declared.add(n)
            continue
        prof.by_kind.setdefault(k, []).append(n)
        prof.kind_of.setdefault(n, k)
        if k == "register_class" and r["value"]:
            prof.namespaces.add(r["value"])
    return prof
