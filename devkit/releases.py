"""The release a rolling upgrade is tested from (tests/e2e/test_rolling_upgrade.py): the last
one tagged, named here by its commit too, so that a clone without tags can still take its
source out of the history (``git archive``)."""

from __future__ import annotations

import io
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Release:
    tag: str
    commit: str


# Move this forward with each release tag (`git tag -a vX.Y.Z`): the upgrade test then starts
# from that release's schema and workers.
PREVIOUS = Release(tag="v0.1.0", commit="06229bb18d00309d5db4ddbcd42bb400776d9217")


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()


def tagged_commit(release: Release) -> str | None:
    """The commit ``release.tag`` points at in this clone, or None when it has no such tag."""
    try:
        return git("rev-parse", "--verify", "--quiet", f"{release.tag}^{{commit}}")
    except subprocess.CalledProcessError:
        return None


def extract(release: Release, dest: Path) -> Path:
    """``release``'s source tree, as committed, under ``dest`` (returned)."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", release.commit],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return dest
