"""The demo corpus: a small, real multilingual corpus that needs no download, the same bytes for
every user.

It is CLDR text in 40 languages and 15 scripts (names of territories, languages, currencies and
time zones, months, units, dates: ``cldr`` says how it is made), in the layout of a user corpus:
``mono/<lang>.txt``, ``parallel/en-<lang>.tsv`` and a ``held_out/`` copy of that layout. The
package ships it as a snapshot (``demo_corpus_v2.tar.xz``, what ``cldr`` builds from Babel 2.18's
CLDR 47) rather than building it from the installed Babel: each Babel release ships newer CLDR
data, which changes the text and the languages chosen, so the README's figures would hold for
one Babel release only. ``--from-babel`` (or a language count other than the snapshot's) still
builds one from the installed Babel, and ``--snapshot FILE`` packs a built corpus the way the
shipped one was packed (``python -m xlpretrain.data.demo_corpus``: ``__main__``).

A corpus is unpacked (or built) once into a cache folder and used from there; the stamp naming
its source is written last, so an interrupted unpacking is redone.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import os
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import NamedTuple

VERSION = "demo_corpus_v2"
SNAPSHOT = f"{VERSION}.tar.xz"  # package data in this package
SNAPSHOT_SHA256 = "9198d1386c3845d46c2f8bddf931bb211bcf95fc9fffd3780c9b10d55d78a65e"
SNAPSHOT_LANGUAGES = 40
SNAPSHOT_MIN_ENTRIES = 1400
_TOP_FOLDERS = ("mono", "parallel", "held_out")


class DemoFolders(NamedTuple):
    """Where a built demo corpus is: the training folders, then the held-out ones."""

    mono: Path
    parallel: Path
    held_out_mono: Path
    held_out_parallel: Path


_FOLDERS = ("mono", "parallel", "held_out/mono", "held_out/parallel")


class SnapshotError(OSError):
    """The packaged snapshot is missing or not the one this version ships (a broken install)."""


def default_demo_cache_dir() -> Path:
    """``$XLPRETRAIN_CACHE`` if set, else ``~/.cache/xlpretrain/demo_corpus_v2``."""
    env = os.environ.get("XLPRETRAIN_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "xlpretrain" / VERSION


def build_demo_corpus(
    cache_dir: str | os.PathLike,
    *,
    num_languages: int = SNAPSHOT_LANGUAGES,
    min_entries: int = SNAPSHOT_MIN_ENTRIES,
    from_babel: bool = False,
) -> DemoFolders:
    """Unpacks (or finds cached) the demo corpus in ``cache_dir``; returns its folders.

    The default is the shipped snapshot, the same bytes whatever Babel is installed. With
    ``from_babel``, or a ``num_languages`` / ``min_entries`` other than the snapshot's, the
    corpus is built from the installed Babel's CLDR data instead (``cldr.write_corpus``): its
    bytes then depend on the Babel release. A corpus is complete only once ``cache_dir/DONE``
    holds the matching stamp (written last); concurrent builders serialise on a lock file.
    """
    if num_languages < 2:
        raise ValueError(f"num_languages must be >= 2 (English + others), got {num_languages}")
    cache_dir = Path(cache_dir)
    folders = DemoFolders(*(cache_dir / name for name in _FOLDERS))
    snapshot = not from_babel and (num_languages, min_entries) == (
        SNAPSHOT_LANGUAGES,
        SNAPSHOT_MIN_ENTRIES,
    )
    if snapshot:
        source = f"snapshot sha256={SNAPSHOT_SHA256}"
    else:
        import babel

        source = f"babel={babel.__version__} num_languages={num_languages}"
        source += f" min_entries={min_entries}"
    stamp = f"{VERSION} {source}\n"
    stamp_path = cache_dir / "DONE"
    cache_dir.mkdir(parents=True, exist_ok=True)
    with _locked(cache_dir / ".lock"):
        if stamp_path.is_file() and stamp_path.read_text(encoding="utf-8") == stamp:
            return folders
        stamp_path.unlink(missing_ok=True)
        for leftover in cache_dir.glob(".build-*"):  # from an interrupted build
            shutil.rmtree(leftover)
        build = Path(tempfile.mkdtemp(prefix=".build-", dir=cache_dir))
        if snapshot:
            _unpack(_snapshot_bytes(), build)
        else:
            # Babel's data is imported only when building from it.
            from xlpretrain.data.demo_corpus import cldr

            cldr.write_corpus(build, num_languages, min_entries)
        for name in _TOP_FOLDERS:
            shutil.rmtree(cache_dir / name, ignore_errors=True)
            os.replace(build / name, cache_dir / name)
        build.rmdir()
        (cache_dir / "DONE.tmp").write_text(stamp, encoding="utf-8")
        os.replace(cache_dir / "DONE.tmp", stamp_path)
    return folders


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _snapshot_bytes() -> bytes:
    """The shipped archive, checked against the hash this version expects."""
    try:
        data = resources.files(__name__).joinpath(SNAPSHOT).read_bytes()
    except FileNotFoundError as e:
        raise SnapshotError(
            f"the demo corpus snapshot {SNAPSHOT} is missing from the installed package "
            f"({Path(__file__).parent}); reinstall xlpretrain"
        ) from e
    if (digest := hashlib.sha256(data).hexdigest()) != SNAPSHOT_SHA256:
        raise SnapshotError(
            f"the demo corpus snapshot {Path(__file__).parent / SNAPSHOT} has sha256 {digest}, "
            f"not {SNAPSHOT_SHA256}: the file is damaged; reinstall xlpretrain"
        )
    return data


def _unpack(archive: bytes, root: Path) -> None:
    """Writes the archive's regular files under ``root``; any other member is an error."""
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:xz") as tar:
        for member in tar:
            parts = Path(member.name).parts
            if member.isdir() and len(parts) <= 2 and parts[0] in _TOP_FOLDERS:
                continue
            if not member.isfile() or parts[0] not in _TOP_FOLDERS or ".." in parts:
                raise SnapshotError(f"unexpected member {member.name!r} in {SNAPSHOT}")
            path = root.joinpath(*parts)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(tar.extractfile(member).read())


def write_snapshot(corpus: str | os.PathLike, path: str | os.PathLike) -> str:
    """Packs the corpus folder ``corpus`` (``mono/``, ``parallel/``, ``held_out/``) into an
    xz-compressed tar at ``path`` with no owner, time or order of its own; returns its sha256."""
    corpus, buffer = Path(corpus), io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz", preset=9, format=tarfile.GNU_FORMAT) as tar:
        for file in sorted(p for name in _TOP_FOLDERS for p in (corpus / name).rglob("*")):
            if file.is_file():
                info = tarfile.TarInfo(file.relative_to(corpus).as_posix())
                info.size, info.mode = file.stat().st_size, 0o644
                tar.addfile(info, io.BytesIO(file.read_bytes()))
    Path(path).write_bytes(buffer.getvalue())
    return hashlib.sha256(buffer.getvalue()).hexdigest()
