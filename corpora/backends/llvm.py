"""Fetch the parts of LLVM that the backend corpus needs, at use time (never committed).

Three sources, one result layout under DEST:

    DEST/lib/Target/<T>/...                         every target's sources (.cpp .h .td .def CMakeLists)
    DEST/include/llvm/BinaryFormat/ELFRelocs/*.def  relocation names per architecture
    DEST/include/llvm/Config/config.h.cmake          template for the compile gate's config.h
    DEST/fetch.json                                  what was fetched, from where, which version

* ``debian`` (default): the ``llvm-toolchain-N`` source package from the machine's Debian
  mirror, through a private apt sources folder (the machine's apt lists hold binaries only);
  only the folders above are extracted from the orig tarball.
* an existing checkout: a folder holding ``llvm/lib/Target`` (monorepo) or ``lib/Target``.
* a git URL (``https://...``, ``git@...``, ``file://...`` or a path ending in ``.git``): a
  shallow, sparse clone of the same folders.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from corpora.store_root import resolve_root

TARGET_SUBDIR = Path("lib/Target")
RELOC_SUBDIR = Path("include/llvm/BinaryFormat/ELFRelocs")
CONFIG_TEMPLATE = Path("include/llvm/Config/config.h.cmake")
WANTED = (TARGET_SUBDIR, RELOC_SUBDIR, CONFIG_TEMPLATE)


class FetchError(Exception):
    """Bad input or a failed download; the message is one line for the user."""


@dataclass
class FetchResult:
    dest: str
    version: str
    source: str
    method: str
    targets: list[str] = field(default_factory=list)
    n_files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    reused: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


def default_dest(store_root: Path, version: int | str) -> Path:
    return Path(store_root) / "corpora" / f"llvm-{version}"


def list_targets(root: Path) -> list[str]:
    """Targets under ``root/lib/Target``: folders with a CMakeLists.txt and TableGen files
    (PowerPC's top file is PPC.td, so the folder name is not required to match)."""
    tdir = Path(root) / TARGET_SUBDIR
    if not tdir.is_dir():
        return []
    return sorted(d.name for d in tdir.iterdir()
                  if d.is_dir() and (d / "CMakeLists.txt").is_file() and any(d.glob("*.td")))


def _tree_size(root: Path) -> tuple[int, int]:
    n = size = 0
    for p in root.rglob("*"):
        if p.is_file():
            n += 1
            size += p.stat().st_size
    return n, size


def _is_git_url(source: str) -> bool:
    return bool(re.match(r"^(https?|ssh|git|file)://", source) or source.startswith("git@")
                or source.endswith(".git"))


def _finish(dest: Path, version: str, source: str, method: str, started: float) -> FetchResult:
    targets = list_targets(dest)
    if not targets:
        raise FetchError(f"no LLVM targets found under {dest / TARGET_SUBDIR} after fetching from {source}")
    n, size = _tree_size(dest)
    result = FetchResult(dest=str(dest), version=version, source=source, method=method, targets=targets,
                         n_files=n, bytes=size, seconds=round(time.monotonic() - started, 2))
    (dest / "fetch.json").write_text(json.dumps(result.to_dict(), indent=2))
    return result


def _swap_into_place(staging: Path, dest: Path) -> None:
    """Move a fully written staging tree to ``dest`` (a killed fetch never leaves half a corpus)."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staging, dest)


def _copy_checkout(checkout: Path, staging: Path) -> None:
    base = checkout / "llvm" if (checkout / "llvm" / TARGET_SUBDIR).is_dir() else checkout
    if not (base / TARGET_SUBDIR).is_dir():
        raise FetchError(f"{checkout} is not an LLVM checkout (no llvm/lib/Target or lib/Target inside)")
    for rel in WANTED:
        src = base / rel
        if src.is_dir():
            shutil.copytree(src, staging / rel)
        elif src.is_file():
            (staging / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, staging / rel)


def _version_of_checkout(base: Path) -> Optional[str]:
    """LLVM_VERSION_MAJOR/MINOR/PATCH from the checkout's CMake files, when present."""
    for cand in (base / "llvm" / "CMakeLists.txt", base / "CMakeLists.txt",
                 base / "cmake" / "Modules" / "LLVMVersion.cmake"):
        if cand.is_file():
            text = cand.read_text(errors="replace")
            parts = [re.search(rf"set\(LLVM_VERSION_{k}\s+(\d+)\)", text) for k in ("MAJOR", "MINOR", "PATCH")]
            if all(parts):
                return ".".join(m.group(1) for m in parts)  # type: ignore[union-attr]
    return None


def _apt_sources_uri() -> str:
    """The Debian mirror URI this machine's apt already uses (deb.debian.org otherwise)."""
    for cand in [Path("/etc/apt/sources.list.d/debian.sources")] + sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        try:
            text = cand.read_text()
        except OSError:
            continue
        for block in text.split("\n\n"):
            if "security" in block:
                continue
            m = re.search(r"^URIs:\s*(\S+)", block, re.M)
            if m:
                return m.group(1)
    try:
        for line in Path("/etc/apt/sources.list").read_text().splitlines():
            m = re.match(r"\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+\S+", line)
            if m and "security" not in m.group(1):
                return m.group(1)
    except OSError:
        pass
    return "http://deb.debian.org/debian"


def _codename() -> str:
    try:
        m = re.search(r"^VERSION_CODENAME=(\w+)", Path("/etc/os-release").read_text(), re.M)
        if m:
            return m.group(1)
    except OSError:
        pass
    return "bookworm"


def _run(cmd: list[str], cwd: Optional[Path] = None, timeout: float = 900) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise FetchError(f"{cmd[0]} is not installed (needed to fetch LLVM)") from None
    except subprocess.TimeoutExpired:
        raise FetchError(f"{' '.join(cmd[:3])} timed out after {timeout:.0f}s") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["(no output)"])[-1]
        raise FetchError(f"{' '.join(cmd[:3])} failed: {last}")
    return proc


def _fetch_debian(version: str, staging: Path, work: Path, suite: Optional[str]) -> str:
    if shutil.which("apt-get") is None:
        raise FetchError("apt-get is not available; pass an existing LLVM checkout or a git URL instead")
    src_dir = work / "apt"
    (src_dir / "lists" / "partial").mkdir(parents=True)
    uri = _apt_sources_uri()
    (src_dir / "src.sources").write_text(
        "Types: deb-src\n"
        f"URIs: {uri}\n"
        f"Suites: {suite or _codename()}\n"
        "Components: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n")
    opts = ["-o", "Dir::Etc::SourceList=/dev/null", "-o", f"Dir::Etc::SourceParts={src_dir}",
            "-o", f"Dir::State::Lists={src_dir / 'lists'}", "-o", "Debug::NoLocking=1"]
    _run(["apt-get", *opts, "update"])
    download = work / "download"
    download.mkdir()
    package = f"llvm-toolchain-{version}"
    _run(["apt-get", *opts, "source", "--download-only", package], cwd=download)
    tarballs = sorted(download.glob(f"{package}_*.orig.tar.*"))
    if not tarballs:
        raise FetchError(f"apt-get source {package} produced no orig tarball")
    tarball = tarballs[0]
    m = re.match(rf"{re.escape(package)}_([0-9][0-9.~+a-z]*)\.orig", tarball.name)
    full_version = m.group(1) if m else version
    staging.mkdir(parents=True, exist_ok=True)
    # The orig tarball holds one top folder (llvm-toolchain-15_15.0.6/) with llvm/ inside it:
    # strip both so lib/Target lands directly under the staging folder.
    # --no-wildcards-match-slash keeps '*' to one path component (utils/gn/.../llvm/lib/Target
    # would match otherwise).
    _run(["tar", "-xf", str(tarball), "-C", str(staging), "--strip-components=2", "--wildcards",
          "--no-wildcards-match-slash", "*/llvm/lib/Target/*", "*/llvm/include/llvm/BinaryFormat/ELFRelocs/*",
          "*/llvm/include/llvm/Config/config.h.cmake"])
    return full_version


def _fetch_git(url: str, staging: Path, work: Path, ref: Optional[str]) -> str:
    clone = work / "clone"
    cmd = ["git", "clone", "--depth", "1", "--filter=blob:none", "--sparse", "--no-checkout"]
    if ref:
        cmd += ["--branch", ref]
    _run(cmd + [url, str(clone)], timeout=3600)
    # Monorepo layout first; a standalone llvm repository has lib/Target at its top.
    _run(["git", "-C", str(clone), "sparse-checkout", "set", "--no-cone",
          *[f"/llvm/{p}" for p in WANTED], *[f"/{p}" for p in WANTED],
          "/llvm/CMakeLists.txt", "/cmake/Modules/LLVMVersion.cmake", "/CMakeLists.txt"])
    _run(["git", "-C", str(clone), "checkout"], timeout=3600)
    _copy_checkout(clone, staging)
    return _version_of_checkout(clone) or "unknown"


def fetch_llvm(version: int | str = 15, dest: Optional[Path] = None, store_root: Optional[Path] = None,
               source: str = "debian", suite: Optional[str] = None, ref: Optional[str] = None,
               force: bool = False) -> FetchResult:
    """Put LLVM's ``lib/Target`` and ELF relocation tables under ``dest``; see the module doc.

    An existing complete ``dest`` (with ``fetch.json`` and targets) is reused unless ``force``.
    """
    started = time.monotonic()
    version = str(version)
    if not re.fullmatch(r"\d+", version):
        raise FetchError(f"--version must be an LLVM major version such as 15, got {version!r}")
    if dest is None:
        dest = default_dest(resolve_root(store_root), version)
    dest = Path(dest).resolve()
    if not force and (dest / "fetch.json").is_file() and list_targets(dest):
        info = json.loads((dest / "fetch.json").read_text())
        info.update(reused=True, seconds=round(time.monotonic() - started, 2))
        return FetchResult(**{k: info[k] for k in FetchResult.__dataclass_fields__ if k in info})
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=dest.parent) as tmp:
        work = Path(tmp)
        staging = work / "staging"
        if source == "debian":
            full = _fetch_debian(version, staging, work, suite)
            method, src_desc = "debian-source-package", f"llvm-toolchain-{version}"
        elif _is_git_url(source):
            full = _fetch_git(source, staging, work, ref)
            method, src_desc = "git", source
        else:
            checkout = Path(source).expanduser()
            if not checkout.is_dir():
                raise FetchError(f"source {source!r} is neither 'debian', a git URL, nor an existing folder")
            staging.mkdir()
            # copytree wants to create the leaves itself
            shutil.rmtree(staging)
            staging.mkdir()
            _copy_checkout(checkout.resolve(), staging)
            base = checkout / "llvm" if (checkout / "llvm" / TARGET_SUBDIR).is_dir() else checkout
            full = _version_of_checkout(checkout) or _version_of_checkout(base) or version
            method, src_desc = "checkout", str(checkout.resolve())
        if not full.startswith(version) and full != "unknown":
            raise FetchError(f"asked for LLVM {version} but {src_desc} holds LLVM {full}")
        if not list_targets(staging):
            raise FetchError(f"no LLVM targets found in {src_desc}")
        _swap_into_place(staging, dest)
    return _finish(dest, full, src_desc, method, started)
