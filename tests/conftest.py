"""Shared test settings: one BLAS/torch thread (2 shared cores), offline hub, and the embedded model loaded once.

The model cache ($TTLEARN_CACHE, default ~/.cache/ttlearn) is shared on purpose: converting the GGUF for torch
takes a minute, once per machine.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TTLEARN_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def smollm2():
    """The embedded default model, loaded once for the whole test session."""
    from ttlearn.llm import make_llm

    llm = make_llm("smollm2")
    yield llm
    llm.close()


@pytest.fixture(scope="session", autouse=True)
def bfcl_data():
    """BFCL's tasks and APIs for the `tools` environment, fetched once per machine (`ttlearn data prepare tools`;
    instant when present), so its tests run on a fresh machine too instead of being skipped."""
    from ttlearn.data.bfcl import prepare_bfcl

    return prepare_bfcl()


@pytest.fixture(scope="session")
def spider_data():
    """Spider-dev on SQLite for the `sql` environment, built once per machine (`ttlearn data prepare sql`; instant
    when present)."""
    from ttlearn.data.prepare import load_question_set, prepare_sql, spider_dir

    try:
        load_question_set(spider_dir())
    except (FileNotFoundError, ValueError):
        prepare_sql()
    return spider_dir()
