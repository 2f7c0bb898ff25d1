"""What a run directory may not do to the user who resumes it: send a credential to a URL it names, or write into a
memory store outside itself. A directory may come from anyone, so both need the user to name the target again."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Mapping

from ttlearn.llm.base import credential_target
from ttlearn.memory.base import MEMORY_KEY_ENV
from ttlearn.runs.config import PartsConfig
from ttlearn.untrusted import check_store_files


def credential_urls(config: PartsConfig) -> dict[str, str]:
    """URL → the environment variable whose credential a run of `config` sends there: the memory service of `-m
    url=` (its key), and the URL of every LLM whose back end declares a key it sends (`LLM.sends_key`: `openai:`'s
    base URL, OPENAI_API_KEY)."""
    urls = {}
    if config.memory_options.get("url"):
        urls[str(config.memory_options["url"]).rstrip("/")] = MEMORY_KEY_ENV
    for spec in (config.player, config.writer):
        target = credential_target(spec) if spec else None
        if target is not None:
            url, variable = target
            urls[url.rstrip("/")] = variable
    return urls


def _store_trusted(store: str, source: Path, named: Iterable[str]) -> bool:
    """A store file inside the run directory, or one the user named again (a database URL exactly as written)."""
    if store in set(named):
        return True
    if "://" in store:
        return False
    path = Path(store).expanduser().resolve()
    return path.is_relative_to(source.resolve()) or path in {Path(n).expanduser().resolve() for n in named}


def check_trusted(
    config: PartsConfig,
    trusted: Iterable[str],
    source: Path,
    env: Mapping[str, str] = os.environ,
    stores: Iterable[str] = (),
) -> None:
    """Refuse to resume a config read from `source` (a run directory anyone may have written) that would send a
    credential set in `env` to a URL the user did not name again in `trusted`, or write into a memory store file
    outside `source` that the user did not name again in `stores`."""
    store = config.memory_options.get("store")
    if store is not None and "://" not in str(store) and Path(store).expanduser().is_relative_to(Path(source)):
        check_store_files(Path(store).expanduser())  # a store file of the directory: a file of its own, no link
    if store is not None and not _store_trusted(str(store), Path(source), stores):
        shown = "a database" if "://" in str(store) else str(store)
        raise ValueError(
            f"{source} keeps its memory store outside the run directory ({shown}), and playing it would write there; "
            "if that store is yours, name it again: --trust-store STORE"
        )
    named = {url.rstrip("/") for url in trusted}
    for url, variable in credential_urls(config).items():
        if env.get(variable) and url not in named:
            raise ValueError(
                f"{source} would send {variable} to {url}, a URL read from the run directory; if you trust it, name "
                f"it again: --trust-url {url}"
            )
