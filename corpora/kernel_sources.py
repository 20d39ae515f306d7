"""Kernel collections fetched at use time into the store, never into the repository.

    <store>/sources/<name>/              the source's tree at the pinned commit (or sdist version)
    <store>/sources/<name>/SOURCE.json   {"name", "url", "kind", "commit" | "version", "fetched_at", ...}
    store table ``sources``              one row per fetched source (skills/sources.py)

What can be fetched (`fetch_source`):

* a name registered in ``corpora/sources.toml`` (``kind = "git"``: url + commit; ``kind =
  "sdist"``: package + version, unpacked from ``pip download --no-binary :all:``). ``from_path``
  stands in for the download: a local git dir / checkout for git sources, an sdist archive or
  an unpacked sdist folder for sdist sources (offline development and tests);
* a git URL (``https://``, ``ssh://``, ``git@``, ``file://``, ``*.git``): cloned, named after
  its last path component;
* a local git dir or checkout: cloned, named after the folder;
* ``pypi:PACKAGE==VERSION``: an sdist from PyPI.

The store's ``sources`` table is written by ``skills.sources.record_source`` (the CLI and
``eval/`` pass it as ``record``).

The project's wrappers (``corpora/real/``) name files inside these trees; `source_dir` finds
a fetched tree or raises `SourceMissing`, whose message says how to fetch it.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any, Callable, Optional

from corpora.store_root import resolve_root

REGISTRY = Path(__file__).parent / "sources.toml"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class SourceMissing(FileNotFoundError):
    """A wrapper needs a source that is not fetched into the store."""

    def __init__(self, name: str, where: Optional[Path] = None):
        where_txt = f" ({where} missing)" if where is not None else ""
        super().__init__(f"source {name!r} is not fetched{where_txt}; run: skills corpora fetch {name}")
        self.name = name
        self.where = where


class SourceError(Exception):
    """Bad input or a failed fetch; the message is one line for the user."""


# --------------------------------------------------------------------------- registry
def registry(path: Path = REGISTRY) -> dict[str, dict[str, Any]]:
    """``corpora/sources.toml`` as {name: entry}; empty when the file does not exist."""
    if not Path(path).is_file():
        return {}
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib  # type: ignore
    try:
        data = tomllib.loads(Path(path).read_text())
    except Exception as exc:
        raise SourceError(f"{path}: not valid TOML ({exc})") from None
    out = {}
    for name, entry in data.items():
        if not isinstance(entry, dict):
            raise SourceError(f"{path}: [{name}] must be a table")
        kind = entry.get("kind", "git")
        need = ("url", "commit") if kind == "git" else ("package", "version") if kind == "sdist" else None
        if need is None:
            raise SourceError(f"{path}: [{name}] kind must be 'git' or 'sdist', got {kind!r}")
        for key in need:
            if not entry.get(key):
                raise SourceError(f"{path}: [{name}] needs {key!r}")
        out[name] = {**entry, "kind": kind}
    return out


def sources_root(store_root: Optional[os.PathLike | str] = None) -> Path:
    return resolve_root(store_root) / "sources"


def source_dir(name: str, store_root: Optional[os.PathLike | str] = None) -> Path:
    """The fetched tree of ``name``; `SourceMissing` when it has not been fetched."""
    d = sources_root(store_root) / name
    if not (d / "SOURCE.json").is_file():
        raise SourceMissing(name, d / "SOURCE.json")
    return d


def source_info(name: str, store_root: Optional[os.PathLike | str] = None) -> dict[str, Any]:
    return json.loads((source_dir(name, store_root) / "SOURCE.json").read_text())


def fetched_sources(store_root: Optional[os.PathLike | str] = None) -> list[dict[str, Any]]:
    root = sources_root(store_root)
    if not root.is_dir():
        return []
    return [json.loads((d / "SOURCE.json").read_text()) for d in sorted(root.iterdir())
            if (d / "SOURCE.json").is_file()]


# --------------------------------------------------------------------------- helpers
def is_git_url(s: str) -> bool:
    return bool(re.match(r"^(https?|ssh|git|file)://", s) or s.startswith("git@") or
                (s.endswith(".git") and not Path(s).exists()))


def _is_git_repo(path: Path) -> bool:
    """A checkout (has .git) or a bare git dir."""
    if (path / ".git").exists():
        return True
    return (path / "HEAD").is_file() and (path / "objects").is_dir() and (path / "refs").is_dir()


def _git(args: list[str], cwd: Optional[Path] = None, timeout: float = 1800) -> str:
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
    except FileNotFoundError:
        raise SourceError("git is not installed (needed to fetch a git source)") from None
    except subprocess.TimeoutExpired:
        raise SourceError(f"git {args[0]} timed out after {timeout:.0f}s") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SourceError(f"git {args[0]} failed: {last}")
    return proc.stdout.strip()


def _name_from(location: str) -> str:
    base = location.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1]
    base = re.sub(r"\.git$", "", base)
    return re.sub(r"[^A-Za-z0-9_.-]", "-", base) or "source"


def _clone(src: str, staging: Path, commit: Optional[str]) -> str:
    """Clone ``src`` (URL or local git dir) into ``staging`` at ``commit`` (default HEAD); returns the sha."""
    _git(["clone", "--quiet", "--no-checkout", src, str(staging)])
    rev = commit or "HEAD"
    try:
        sha = _git(["rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd=staging)
    except SourceError:
        raise SourceError(f"commit {rev} is not in {src}") from None
    _git(["checkout", "--quiet", "--detach", sha], cwd=staging)
    return sha


def _unpack_sdist(archive: Path, staging: Path) -> None:
    """Unpack an sdist with its single top folder stripped; refuses paths that leave the folder."""
    tmp = staging.parent / (staging.name + ".unpack")
    tmp.mkdir()
    try:
        if archive.name.endswith((".tar.gz", ".tgz", ".tar")):
            with tarfile.open(archive) as tar:
                members = tar.getmembers()
                for m in members:
                    if m.name.startswith("/") or ".." in Path(m.name).parts or not (m.isfile() or m.isdir()):
                        if m.issym() or m.islnk():
                            continue  # links are not needed for reading kernels; never followed
                        raise SourceError(f"{archive}: unsafe member {m.name!r}")
                tar.extractall(tmp, members=[m for m in members if m.isfile() or m.isdir()])
        elif archive.name.endswith(".zip"):
            with zipfile.ZipFile(archive) as zf:
                for n in zf.namelist():
                    if n.startswith("/") or ".." in Path(n).parts:
                        raise SourceError(f"{archive}: unsafe member {n!r}")
                zf.extractall(tmp)
        else:
            raise SourceError(f"{archive}: not an sdist archive (.tar.gz, .zip)")
        tops = list(tmp.iterdir())
        top = tops[0] if len(tops) == 1 and tops[0].is_dir() else tmp
        os.replace(top, staging)
    except (tarfile.TarError, zipfile.BadZipFile, OSError) as exc:
        raise SourceError(f"{archive}: cannot unpack ({exc})") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _pip_download(package: str, version: str, work: Path) -> Path:
    """The sdist of package==version: `pip download` first; where pip cannot prepare the sdist's
    metadata (vllm's setup.py needs torch and CUDA), the file itself from the package index's
    simple API (PEP 503), checked against the index's sha256."""
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
           f"{package}=={version}", "-d", str(work)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        pip_error = (proc.stderr.strip().splitlines() or ["(no output)"])[-1] if proc.returncode else ""
    except subprocess.TimeoutExpired:
        pip_error = "timed out"
    found = [p for p in work.iterdir() if p.name.endswith((".tar.gz", ".zip", ".tgz"))]
    if found:
        return found[0]
    try:
        return _simple_index_download(package, version, work)
    except SourceError as exc:
        raise SourceError(f"pip download {package}=={version} failed ({pip_error}); {exc}") from None


def _simple_index_download(package: str, version: str, work: Path) -> Path:
    import hashlib
    import html
    import urllib.request

    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    norm = re.sub(r"[-_.]+", "-", package).lower()
    try:
        with urllib.request.urlopen(f"{index}/{norm}/", timeout=60) as resp:
            page = resp.read().decode("utf-8", "replace")
    except OSError as exc:
        raise SourceError(f"the package index {index} did not answer for {package} ({exc})") from None
    want = re.compile(rf"^{re.escape(norm).replace('-', '[-_.]')}-{re.escape(version)}\.(tar\.gz|zip)$", re.I)
    for href, name in re.findall(r'<a[^>]*href="([^"]+)"[^>]*>([^<]+)</a>', page):
        if not want.match(name.strip()):
            continue
        url = html.unescape(href)
        url, _, frag = url.partition("#")
        if not url.startswith(("http://", "https://")):
            from urllib.parse import urljoin

            url = urljoin(f"{index}/{norm}/", url)
        dest = work / name.strip()
        try:
            with urllib.request.urlopen(url, timeout=600) as resp, open(dest, "wb") as fh:
                shutil.copyfileobj(resp, fh)
        except OSError as exc:
            raise SourceError(f"downloading {name.strip()} failed ({exc})") from None
        if frag.startswith("sha256="):
            digest = hashlib.sha256(dest.read_bytes()).hexdigest()
            if digest != frag.split("=", 1)[1]:
                raise SourceError(f"{name.strip()}: sha256 {digest} does not match the index's")
        return dest
    raise SourceError(f"no sdist {package}-{version} on {index}")


# --------------------------------------------------------------------------- fetch
def fetch_source(name_or_url: str, store_root: Optional[os.PathLike | str] = None, commit: Optional[str] = None,
                 from_path: Optional[os.PathLike | str] = None, force: bool = False,
                 registry_path: Path = REGISTRY,
                 record: Optional[Callable[[Path, dict[str, Any], Path], None]] = None) -> Path:
    """Fetch one kernel collection into ``<store>/sources/<name>``; returns that folder.

    An existing fetch at the same commit/version is reused unless ``force``. The folder is
    written in a staging folder and renamed into place, so a failed fetch leaves nothing.
    ``record(store_root, info, dest)`` writes the store row (``skills.sources.record_source``;
    passed in because corpora/ sits upstream of the store).
    """
    reg = registry(registry_path)
    info: dict[str, Any]
    if name_or_url in reg:
        entry = reg[name_or_url]
        name = name_or_url
        if entry["kind"] == "git":
            info = {"name": name, "url": entry["url"], "kind": "git", "commit": commit or entry["commit"]}
        else:
            info = {"name": name, "url": entry.get("url") or f"https://pypi.org/project/{entry['package']}/",
                    "kind": "sdist", "package": entry["package"], "version": str(entry["version"]),
                    "subdir": entry.get("subdir", "")}
    elif m := re.fullmatch(r"pypi:([A-Za-z0-9_.-]+)==([A-Za-z0-9_.+-]+)", name_or_url):
        name = m.group(1)
        info = {"name": name, "url": f"https://pypi.org/project/{m.group(1)}/", "kind": "sdist",
                "package": m.group(1), "version": m.group(2), "subdir": ""}
    elif is_git_url(name_or_url):
        name = _name_from(name_or_url)
        info = {"name": name, "url": name_or_url, "kind": "git", "commit": commit}
    elif Path(name_or_url).expanduser().exists():
        path = Path(name_or_url).expanduser().resolve()
        if not _is_git_repo(path):
            raise SourceError(f"{path}: not a git repository or checkout (pass a git URL, a git dir, "
                              f"or a name from {registry_path.name})")
        name = _name_from(str(path))
        info = {"name": name, "url": str(path), "kind": "git", "commit": commit}
        from_path = path
    else:
        known = ", ".join(sorted(reg)) or "none"
        raise SourceError(f"unknown source {name_or_url!r}: not in {registry_path} (known: {known}), "
                          "not a git URL, not an existing folder, not pypi:PACKAGE==VERSION")
    if not NAME_RE.match(name):
        raise SourceError(f"source name {name!r} is not a plain name")

    root = resolve_root(store_root)
    dest = root / "sources" / name
    if not force and (dest / "SOURCE.json").is_file():
        old = json.loads((dest / "SOURCE.json").read_text())
        same = (old.get("kind") == info["kind"] and
                (old.get("version") == info.get("version") if info["kind"] == "sdist"
                 else info.get("commit") is None or old.get("commit", "").startswith(info["commit"])))
        if same:
            _record(record, root, old, dest)
            return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".fetch-{name}-", dir=dest.parent) as tmp:
        staging = Path(tmp) / "tree"
        if info["kind"] == "git":
            src = str(Path(from_path).expanduser().resolve()) if from_path is not None else info["url"]
            if from_path is not None and not _is_git_repo(Path(src)):
                raise SourceError(f"--from {from_path}: not a git repository or checkout")
            info["commit"] = _clone(src, staging, info.get("commit"))
            if from_path is not None and src != info["url"]:
                info["fetched_from"] = src
        else:
            if from_path is not None:
                local = Path(from_path).expanduser().resolve()
                if local.is_dir():
                    shutil.copytree(local, staging, symlinks=True)
                elif local.is_file():
                    _unpack_sdist(local, staging)
                else:
                    raise SourceError(f"--from {from_path}: no such file or folder")
                info["fetched_from"] = str(local)
            else:
                _unpack_sdist(_pip_download(info["package"], info["version"], Path(tmp)), staging)
            if info.get("subdir") and not (staging / info["subdir"]).is_dir():
                raise SourceError(f"{info['package']} {info['version']}: the sdist has no {info['subdir']}/ folder")
        info["fetched_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        (staging / "SOURCE.json").write_text(json.dumps(info, indent=2) + "\n")
        old_dir = Path(tmp) / "old"
        if dest.exists():
            os.replace(dest, old_dir)  # the old tree goes away with the temporary folder
        os.replace(staging, dest)
    _record(record, root, info, dest)
    return dest


def _record(record, root: Path, info: dict[str, Any], dest: Path) -> None:
    if record is None:
        return
    try:
        record(root, info, dest)
    except Exception as exc:  # e.g. another process holds the store's lock: the tree itself is complete
        first = (str(exc).splitlines() or [exc.__class__.__name__])[0][:200]
        raise SourceError(f"{dest}: fetched, but the store's sources table was not written ({first}); "
                          "run the same fetch again when the store is free") from None
