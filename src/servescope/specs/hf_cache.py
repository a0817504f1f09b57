"""Find a model's config.json in the local Hugging Face cache (offline; nothing is downloaded).

Does: map `ORG/NAME` (or a bare `NAME`, when one cached org has it) to
`<hub>/models--ORG--NAME/snapshots/<revision>/config.json`, case-insensitively, where <hub> is, in the order
huggingface_hub uses: $HF_HUB_CACHE, $HUGGINGFACE_HUB_CACHE (legacy), $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub,
~/.cache/huggingface/hub. The revision is the one `refs/main` names, else the newest snapshot holding a config.json.
Does not: read the config (specs.models does), talk to the network, or look at datasets/spaces caches.
"""

from __future__ import annotations

import os
from pathlib import Path


def hub_dirs() -> list[Path]:
    """Candidate hub cache folders, most specific first (duplicates removed)."""
    env = os.environ
    dirs = [env.get("HF_HUB_CACHE"), env.get("HUGGINGFACE_HUB_CACHE")]
    if env.get("HF_HOME"):
        dirs.append(str(Path(env["HF_HOME"]) / "hub"))
    if env.get("XDG_CACHE_HOME"):
        dirs.append(str(Path(env["XDG_CACHE_HOME"]) / "huggingface" / "hub"))
    dirs.append(str(Path.home() / ".cache" / "huggingface" / "hub"))
    return list(dict.fromkeys(Path(d).expanduser() for d in dirs if d))


def _repo_dirs(hub: Path, name: str) -> list[Path]:
    """Cached model repos matching `org/name` or a bare `name` (case-insensitive)."""
    want = name.strip().strip("/").lower()
    try:
        repos = [p for p in hub.iterdir() if p.is_dir() and p.name.startswith("models--")]
    except OSError:
        return []
    out = []
    for repo in repos:
        org, _, model = repo.name.removeprefix("models--").partition("--")
        if want in (f"{org}/{model}".lower(), model.lower()):
            out.append(repo)
    return sorted(out)


def _snapshot_config(repo: Path) -> Path | None:
    ref = repo / "refs" / "main"
    if ref.is_file():
        pinned = repo / "snapshots" / ref.read_text(encoding="utf-8").strip() / "config.json"
        if pinned.is_file():
            return pinned
    configs = [p for p in (repo / "snapshots").glob("*/config.json") if p.is_file()]
    return max(configs, key=lambda p: p.stat().st_mtime) if configs else None


def find_cached_config(name: str) -> Path | None:
    """The cached config.json of model `name` (an HF id, or a bare name cached under one org), or None."""
    for hub in hub_dirs():
        repos = _repo_dirs(hub, name)
        if "/" not in name and len(repos) > 1:
            continue  # a bare name cached under several orgs is ambiguous
        for repo in repos:
            config = _snapshot_config(repo)
            if config is not None:
                return config
    return None


def fetch_hint(name: str) -> str:
    """How to get the config.json when it is neither bundled nor cached."""
    repo = name if "/" in name else f"ORG/{name}"
    searched = ", ".join(str(d) for d in hub_dirs())
    return (f"not in the local Hugging Face cache (searched {searched}); on a machine with network run "
            f"`huggingface-cli download {repo} config.json` (it lands in that cache), or pass "
            "--model /path/to/config.json")
