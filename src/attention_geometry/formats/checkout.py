"""The git commit of a checkout, as every record of what ran names it (the reproduction report's provenance, each
run's provenance.csv). Torch-free; below everything that records it."""

from __future__ import annotations

__all__ = ["code_version"]


def code_version(repo: str) -> str:
    """The git commit of the workflow's code, with " + uncommitted changes" when a tracked or new file outside
    results/ differs from it (results/ holds the committed outputs themselves, written before they are
    committed); "unknown (...)" outside a git checkout."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", repo, *args], capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=normal", "--", ".", ":(exclude)results")
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"
    return commit + (" + uncommitted changes outside results/" if dirty else "")
