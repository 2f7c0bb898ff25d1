"""Embedded GGUF models run in-process by llama.cpp: the default players, no server and no GPU needed.

Specs: every embedded model by name (`smollm2`, `gemma270m`, `qwen-coder`, `qwen-coder-1.5b`; see
`ttlearn.llm.models`), optionally with a choice method, e.g. `qwen-coder:grammar`; `gguf:/path/model.gguf` (any local
file). Every spec takes `?n_ctx=N`, the context in tokens (default 4096): `gemma270m?n_ctx=8192`. A prompt over the
context raises `ContextOverflow`, which the player counts as an invalid step.

Choices are answered by one of `CHOICE_METHODS`. Scoring evaluates the prompt once and each answer's tokens on top of
it (answers that share a prefix share its evaluation); the answer is the argmax (temperature 0) or a softmax sample.
Tiny models ignore instructions in free text but their likelihoods still move with the prompt, so scoring or
constraining is the only honest way to let them play.

Exact replies whatever came before. llama.cpp evaluates a prompt in batches, and a token's cached keys and values
depend (in the last bits) on the batch it was evaluated in, so reusing whatever prefix the cache holds made a greedy
reply depend on the calls before it (4 of 43 Spider replies differed between two runs). The cache is therefore
reused only in whole aligned batches — the leading `n_batch`-token blocks of the previous *prompt*, which a fresh
evaluation of this prompt would compute identically — and the rest is evaluated from there, in the same blocks a
fresh evaluation uses. `benchmarks/llamacpp_prefix.py` measures what this costs against unrestricted reuse.
Those blocks are therefore the same whichever call computed them, so they are kept once per model, for every slot
(`PrefixStore`): the runner's system prompt and instruction turn, shared by every task and both arms, and each task's
earlier turns are evaluated once even when another arm's prompt has taken the slot in between
(`benchmarks/db_bench_calls.py`).

Calls in flight together (episodes in flight, controls played beside the memory arm) each take a context of their
own on the one loaded model (`Slot`), since a reply depends neither on the slot's earlier contents (the rule above)
nor on the thread count; `benchmarks/decode_throughput.py` measures what running them side by side gains, and
`benchmarks/llamacpp_batch.py` why not one batch of them.

The same rule makes a greedy reply a function of its prompt alone, so a greedy call whose prompt this model answered
before in this process gets that reply again without evaluating anything (`GreedyReplies`): a control arm asks
what the memory arm asked whenever the memory showed nothing, and the two may ask it at the same moment.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import sys
import threading
import time
from collections import OrderedDict, defaultdict
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ttlearn.llm.base import (
    CHOICE_METHODS,
    END_PIECES,
    LLM,
    ContextOverflow,
    LLMError,
    Message,
    cache_root,
    choice_completion,
    choice_grammar,
    plain_answer,
    plain_prompt,
    spec_options,
    split_prefill,
    surface_forms,
    written_choice,
)
from ttlearn.llm.cores import default_threads
from ttlearn.llm.models import EMBEDDED, model_path
from ttlearn.registry import Family
from ttlearn.types import Completion

REBUILD_HINT = (
    'CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF" '
    "pip install --no-cache-dir --force-reinstall --no-deps llama-cpp-python==0.3.36"
)
DEFAULT_CHOICE_METHOD = "forms"
DEFAULT_N_CTX = 4096
PRUNE_NATS = 12.0


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


def context_beside(base: Any) -> Any:
    """A `Llama` with its own llama.cpp context beside `base`'s, sharing its loaded weights, tokenizer and metadata
    (llama.cpp allows several contexts on one model). llama-cpp-python's `Llama` owns one context; a shallow copy
    with a fresh context, batch and token buffers is the cheapest whole `Llama` on the same weights."""
    from llama_cpp import _internals

    twin = object.__new__(type(base))  # not copy.copy: `Llama.__setstate__` would load the model again
    twin.__dict__.update(base.__dict__)
    twin._stack = contextlib.ExitStack()  # closes only what the twin owns, never the shared model
    with native_stderr_silenced():
        twin._ctx = twin._stack.enter_context(
            contextlib.closing(_internals.LlamaContext(model=base._model, params=base.context_params, verbose=False))
        )
    twin._batch = twin._stack.enter_context(
        contextlib.closing(
            _internals.LlamaBatch(n_tokens=base.n_batch, embd=0, n_seq_max=base.context_params.n_ctx, verbose=False)
        )
    )
    twin._candidates = _internals.LlamaTokenDataArray(n_vocab=base.n_vocab())
    twin._sampler = None
    twin.input_ids = np.zeros_like(base.input_ids)
    twin.scores = np.zeros_like(base.scores)
    twin.n_tokens = 0
    twin._requires_eval = True
    return twin


class PrefixStore:
    """The KV state of the whole aligned blocks of prompts evaluated before, shared by every slot of one model. Those
    blocks hold exactly what a fresh evaluation computes (the module's docstring), so restoring them into any slot
    leaves every reply as it was. The most recently used states are kept within `budget` bytes; a state whose
    tokens another one extends is dropped for it (restoring the longer one and cutting it serves both)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._states: OrderedDict[int, tuple[np.ndarray, Any]] = OrderedDict()
        self._lock = threading.Lock()
        self._key = 0

    @staticmethod
    def common(a: np.ndarray, b: np.ndarray) -> int:
        """How many leading tokens `a` and `b` share."""
        n = min(len(a), len(b))
        differ = np.flatnonzero(a[:n] != b[:n])
        return int(differ[0]) if differ.size else n

    def longest(self, tokens: np.ndarray, block: int) -> tuple[int, Any]:
        """The stored state sharing the most whole `block`-token blocks with `tokens` (the smallest of those, the
        cheapest to restore), and how many tokens that is (0 and None when none shares a block)."""
        best, state, key = 0, None, None
        with self._lock:
            for k, (held, saved) in self._states.items():
                shared = self.common(held, tokens) // block * block
                if shared > best or (shared == best > 0 and len(saved) < len(state)):
                    best, state, key = shared, saved, k
            if key is not None:
                self._states.move_to_end(key)
        return best, state

    def put(self, tokens: np.ndarray, state: Any) -> None:
        """Keep `state`, the KV cache of exactly `tokens` (whole blocks), as the most recent."""
        with self._lock:
            for k in [k for k, (held, _) in self._states.items() if self.common(held, tokens) == len(held)]:
                del self._states[k]
            self._key += 1
            self._states[self._key] = (tokens, state)
            while sum(len(saved) for _, saved in self._states.values()) > self.budget and len(self._states) > 1:
                self._states.popitem(last=False)


class Slot:
    """One llama.cpp context: a KV cache and a token position, so one call at a time. Its cache is reused only in
    whole aligned batches (the module's docstring), so a reply is the same in any slot, whatever it held before;
    with a `store`, also the blocks any slot evaluated before."""

    def __init__(self, llama: Any, store: PrefixStore | None = None) -> None:
        self.llama = llama
        self.store = store
        self.exact_upto = 0
        """Leading cache positions filled by a prompt evaluation that started at an aligned block."""

    def reusable(self, tokens: Sequence[int]) -> int:
        """How many leading tokens of `tokens` this slot's cache holds exactly: whole `n_batch` blocks of the
        previous prompt (at least one token is always evaluated afresh)."""
        common = 0
        for a, b in zip(self.llama.input_ids[: min(self.exact_upto, len(tokens) - 1)], tokens):
            if a != b:
                break
            common += 1
        return common - common % self.llama.n_batch

    def reuse_exactly(self, tokens: list[int]) -> None:
        """Keep the exactly reusable cached prefix of `tokens`, or restore a longer one from the store; with a store,
        evaluate the whole blocks after it and store them. The caller evaluates the rest (the last, partial block)."""
        keep = self.reusable(tokens)
        if self.store is not None:
            block = self.llama.n_batch
            whole = (len(tokens) - 1) // block * block
            held = np.asarray(tokens[:whole], dtype=np.intc)
            stored, state = self.store.longest(held, block)
            if stored > keep:
                self._restore(state, tokens, stored)
                keep = stored
            self.llama.n_tokens = keep
            if stored < whole:
                if keep < whole:
                    self.llama.eval(tokens[keep:whole])
                self.store.put(held, self._state())
                keep = whole
        self.llama.n_tokens = keep
        self.exact_upto = len(tokens)

    def _memory(self) -> Any:
        import llama_cpp

        return llama_cpp.llama_get_memory(self.llama._ctx.ctx)

    def _state(self) -> Any:
        """The KV cache of this slot's `n_tokens` leading tokens, as llama.cpp serialises a sequence."""
        import ctypes

        import llama_cpp

        llama_cpp.llama_memory_seq_rm(self._memory(), 0, self.llama.n_tokens, -1)
        ctx = self.llama._ctx.ctx
        state = (ctypes.c_uint8 * llama_cpp.llama_state_seq_get_size(ctx, 0))()
        if llama_cpp.llama_state_seq_get_data(ctx, state, len(state), 0) != len(state):
            raise LLMError("llama.cpp could not save a prompt prefix's state")
        return state

    def _restore(self, state: Any, tokens: list[int], upto: int) -> None:
        """Put a stored state into this slot's cache, cut to its `upto` leading tokens (which are `tokens`')."""
        import llama_cpp

        llama_cpp.llama_memory_clear(self._memory(), False)
        if llama_cpp.llama_state_seq_set_data(self.llama._ctx.ctx, state, len(state), 0) != len(state):
            raise LLMError("llama.cpp could not restore a prompt prefix's state")
        llama_cpp.llama_memory_seq_rm(self._memory(), 0, upto, -1)
        self.llama.input_ids[:upto] = tokens[:upto]

    def last_logprobs(self) -> np.ndarray:
        logits = np.ctypeslib.as_array(self.llama._ctx.get_logits(), shape=(self.llama.n_vocab(),))
        logits = logits.astype(np.float64)
        logits -= logits.max()
        return logits - math.log(np.exp(logits).sum())

    def eval_prompt(self, tokens: list[int]) -> np.ndarray:
        """Evaluate `tokens`, reusing the exact cached prefix; returns log P(next token | tokens)."""
        self.reuse_exactly(tokens)
        self.llama.eval(tokens[self.llama.n_tokens :])
        return self.last_logprobs()

    def set_threads(self, threads: int) -> None:
        import llama_cpp

        llama_cpp.llama_set_n_threads(self.llama._ctx.ctx, threads, threads)


class GreedyReplies:
    """Greedy replies by everything that decides them (the rendered prompt and the call's settings), each computed
    once: a second caller of a prompt in flight waits for the first one's reply. The most recent `size` are kept."""

    def __init__(self, size: int = 512) -> None:
        self.size = size
        self._replies: OrderedDict[tuple[Any, ...], Future[Completion]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[Any, ...], compute: Callable[[], Completion]) -> Completion:
        """`compute()`'s reply for `key`, computed only by the first caller (an error reaches every waiter and is
        not kept)."""
        with self._lock:
            reply = self._replies.get(key)
            first = reply is None
            if first:
                reply = self._replies[key] = Future()
                while len(self._replies) > self.size:
                    self._replies.popitem(last=False)
            else:
                self._replies.move_to_end(key)
        if first:
            try:
                reply.set_result(compute())
            except BaseException as exc:
                with self._lock:
                    self._replies.pop(key, None)
                reply.set_exception(exc)
        return reply.result()


DEFAULT_SLOTS = 4
"""Contexts one model keeps at most for calls in flight together (each holds its own KV cache and buffers: +90 MB
resident for the 0.5B coder at n_ctx 4096, measured); a call beyond them waits for a free one."""


DEFAULT_PREFIX_BYTES = 256 * 2**20
"""What `PrefixStore` keeps at most per model: about 20,000 tokens of the 0.5B coder (12 KB each), 9,000 of the 1.5B
(28 KB each), i.e. a dozen db_bench prompts or more."""


class LlamaCpp(LLM):
    """One llama.cpp model in this process, with a context (`Slot`) per call in flight. A context is not thread-safe
    (one KV cache, one token position), so concurrent callers (episodes in flight) each take a free one, and a new
    one is opened beside the others, on the same weights, while fewer than `max_slots` exist. A reply does not depend
    on the slot or on the thread count, so calls in flight together get the replies they would get alone; the
    `threads` are shared among the busy slots."""

    supports_choices = True

    def __init__(
        self,
        model_path: Path,
        spec: str,
        *,
        n_ctx: int = DEFAULT_N_CTX,
        n_batch: int = 64,
        n_threads: int | None = None,
        choice_method: str = DEFAULT_CHOICE_METHOD,
        max_slots: int = DEFAULT_SLOTS,
        prefix_bytes: int = DEFAULT_PREFIX_BYTES,
    ) -> None:
        if choice_method not in CHOICE_METHODS:
            raise ValueError(f"unknown choice method {choice_method!r}; choose one of: {', '.join(CHOICE_METHODS)}")
        if not Path(model_path).exists():
            raise LLMError(f"model file not found: {model_path}")
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise LLMError(f"llama-cpp-python is not installed: {REBUILD_HINT}") from exc
        probe_runtime(Path(model_path))
        self.threads = n_threads or default_threads()
        with native_stderr_silenced():
            self.model = Llama(
                model_path=str(model_path),
                n_ctx=n_ctx,
                n_batch=n_batch,
                n_ubatch=n_batch,
                n_threads=self.threads,
                n_threads_batch=self.threads,
                seed=0,
                verbose=False,
            )
        self.spec, self.choice_method = spec, choice_method
        self.n_ctx = n_ctx
        """The context asked for: llama.cpp may pad its own, but its token buffer holds only this many."""
        self.template = self.model.metadata.get("tokenizer.chat_template")
        self.n_vocab = self.model.n_vocab()
        self._end_mask: np.ndarray | None = None
        self.max_slots = max_slots
        self.side_by_side = min(self.threads, max_slots)
        """A context per thread: more calls side by side than threads would only take turns on the cores."""
        import llama_cpp

        sliding = llama_cpp.llama_model_n_swa(self.model.model) > 0
        self.prefix_store = PrefixStore(prefix_bytes) if prefix_bytes > 0 and not sliding else None
        """Whole prompt blocks evaluated before, for every slot. None: each slot reuses only its own cache; so for a
        model with sliding-window attention (Gemma 3), where a restored state did not give a fresh evaluation's
        reply (its window's cache is kept apart)."""
        self._slots = [Slot(self.model, self.prefix_store)]
        self._free = list(self._slots)
        self._turns = threading.Condition()
        """Guards the free slots: a caller takes one, or opens one, or waits for one."""
        self.greedy_replies: GreedyReplies | None = GreedyReplies()
        """Greedy replies by prompt (None: every call is evaluated, as before issue 30)."""

    @contextlib.contextmanager
    def _slot_for(self, tokens: list[int]) -> Iterator[Slot]:
        """A slot for a call on `tokens`: the free one whose cache reuses most of them, else a new one while fewer
        than `max_slots` exist, else the first one freed. Each busy slot gets an equal share of the threads."""
        with self._turns:
            while not self._free and len(self._slots) >= self.max_slots:
                self._turns.wait()
            if self._free:
                slot = max(self._free, key=lambda free: free.reusable(tokens))
                self._free.remove(slot)
            else:
                slot = Slot(context_beside(self.model), self.prefix_store)
                self._slots.append(slot)
            busy = len(self._slots) - len(self._free)
        slot.set_threads(max(1, self.threads // busy))
        try:
            yield slot
        finally:
            with self._turns:
                self._free.append(slot)
                self._turns.notify_all()

    # ---- prompts ----------------------------------------------------------------------------------------------
    def render(self, messages: Sequence[Message]) -> str:
        """The model's own chat template where it has one, the assistant turn opened and any prefill written into it;
        a plain "Answer:" layout for base models."""
        if self.template:
            from jinja2.sandbox import ImmutableSandboxedEnvironment

            turns, prefill = split_prefill(messages)
            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
            return (
                env.from_string(self.template).render(
                    messages=turns, add_generation_prompt=True, bos_token="", eos_token=""
                )
                + prefill
            )
        return plain_prompt(messages)

    def _tokens(self, text: str, *, first: bool) -> list[int]:
        return self.model.tokenize(text.encode(), add_bos=first, special=True)

    def _answer_tokens(self, choice: str) -> list[int]:
        """A choice as the model would write it, followed by the token that ends an answer."""
        if self.template:
            return self._tokens(choice, first=False) + [self.model.token_eos()]
        return self._tokens(plain_answer(choice), first=False)

    # ---- scoring ----------------------------------------------------------------------------------------------
    def score_paths(
        self, prompt: list[int], paths: Sequence[Sequence[int]], end_mask: np.ndarray | None = None
    ) -> list[float]:
        """log P(path | prompt) = Σ_i log p(path_i | prompt, path_<i) for each token path; with `end_mask`, plus
        log P(next token ∈ end_mask | prompt, path).

        Paths sharing a prefix are walked one after another, so the prefix is evaluated once. A path is walked no
        further once its prefix is PRUNE_NATS below the best complete path: a prefix's log-probability bounds every
        extension, so the prefix's value stands in, and no choice's probability moves by more than e^-PRUNE_NATS
        of the best one's per form."""
        with self._slot_for(prompt) as slot:
            return self._walk_paths(slot, prompt, paths, end_mask)

    def _walk_paths(
        self, slot: Slot, prompt: list[int], paths: Sequence[Sequence[int]], end_mask: np.ndarray | None
    ) -> list[float]:
        """`score_paths` on one slot."""
        first = slot.eval_prompt(prompt)
        base = slot.llama.n_tokens
        scores = [0.0] * len(paths)
        best = -math.inf
        walked: list[int] = []
        after = [first]  # after[i] = log p(next token | prompt, walked[:i])
        for index in sorted(range(len(paths)), key=lambda i: (-first[paths[i][0]], list(paths[i]))):
            path = list(paths[index])
            needed = len(path) if end_mask is not None else len(path) - 1  # tokens whose successors are scored
            keep = 0
            while keep < min(len(walked), needed) and walked[keep] == path[keep]:
                keep += 1
            del walked[keep:], after[keep + 1 :]
            score = 0.0
            for depth, token in enumerate(path):
                score += float(after[depth][token])
                if score < best - PRUNE_NATS:
                    break
                if len(walked) == depth < needed:
                    slot.llama.n_tokens = base + depth
                    slot.llama.eval([token])
                    walked.append(token)
                    after.append(slot.last_logprobs())
            else:
                if end_mask is not None:
                    score += float(np.logaddexp.reduce(after[len(path)][end_mask]))
                best = max(best, score)
            scores[index] = score
        slot.llama.n_tokens = base
        return scores

    def score_choices(self, prompt: list[int], choices: Sequence[str]) -> dict[str, float]:
        """log P(choice + end | prompt) for each choice, the choice written exactly as listed."""
        return dict(zip(choices, self.score_paths(prompt, [self._answer_tokens(c) for c in choices])))

    def end_mask(self) -> np.ndarray:
        """The tokens that end a written choice: the end-of-generation tokens and those that spell an END_PIECE."""
        if self._end_mask is None:
            import llama_cpp

            vocab = self.model._model.vocab
            mask = np.array([llama_cpp.llama_vocab_is_eog(vocab, token) for token in range(self.n_vocab)])
            for piece in END_PIECES:
                tokens = self._tokens(piece, first=False)
                if len(tokens) == 1:
                    mask[tokens[0]] = True
            self._end_mask = mask
        return self._end_mask

    def score_forms(self, prompt: list[int], choices: Sequence[str]) -> dict[str, float]:
        """log Σ_forms P(form + end | prompt) per choice, over its `surface_forms` (logsumexp of the form scores)."""
        owner_of_path: dict[tuple[int, ...], str] = {}
        for form, choice in surface_forms(choices).items():
            owner_of_path.setdefault(tuple(self._tokens(form, first=False)), choice)
        paths = list(owner_of_path)
        by_choice: dict[str, list[float]] = defaultdict(list)
        for path, score in zip(paths, self.score_paths(prompt, paths, self.end_mask())):
            by_choice[owner_of_path[path]].append(score)
        return {choice: float(np.logaddexp.reduce(by_choice[choice])) for choice in choices}

    def write_choice(self, prompt: list[int], choices: Sequence[str], temperature: float, seed: int) -> Completion:
        """Let the model write one of the choices' surface forms under a grammar (unfiltered sampling at T > 0)."""
        from llama_cpp import LlamaGrammar

        forms = surface_forms(choices)
        with native_stderr_silenced():
            grammar = LlamaGrammar.from_string(choice_grammar(list(forms)), verbose=False)
        longest = max(len(self._tokens(form, first=False)) for form in forms)
        with self._slot_for(prompt) as slot:
            slot.reuse_exactly(prompt)
            out: dict[str, Any] = slot.llama.create_completion(
                prompt,
                max_tokens=longest + 2,
                temperature=temperature,
                seed=seed,
                grammar=grammar,
                top_k=0,
                top_p=1.0,
                min_p=0.0,
                repeat_penalty=1.0,
            )
        text = out["choices"][0]["text"]
        return Completion(written_choice(text, forms) or text, len(prompt), int(out["usage"]["completion_tokens"]))

    def _overflow(self, prompt_tokens: int, new_tokens: int = 0) -> str:
        more = f" + {new_tokens} new ones" if new_tokens else ""
        return (
            f"prompt of {prompt_tokens} tokens{more} exceeds the context of {self.n_ctx} "
            f"(raise it with {self.spec.partition('?')[0]}?n_ctx=N)"
        )

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
        text = self.render(messages)
        if temperature > 0 or self.greedy_replies is None:  # a sampled reply depends on its seed
            reply = self._complete(text, max_tokens, temperature, seed, stop, choices)
        else:
            key = (text, max_tokens, tuple(stop), None if choices is None else tuple(choices), self.choice_method)
            reply = self.greedy_replies.get(key, lambda: self._complete(text, max_tokens, 0.0, 0, stop, choices))
        return replace(reply, latency_s=time.perf_counter() - start)

    def _complete(
        self,
        text: str,
        max_tokens: int,
        temperature: float,
        seed: int,
        stop: Sequence[str],
        choices: Sequence[str] | None,
    ) -> Completion:
        """Evaluate the rendered prompt `text`: a choice, or a free-text reply."""
        start = time.perf_counter()
        prompt = self._tokens(text, first=True)
        if choices:  # each choice is scored on top of the prompt, ended by one more token
            longest = max(len(self._tokens(form, first=False)) for form in surface_forms(choices)) + 1
            if len(prompt) + longest > self.n_ctx:
                raise ContextOverflow(self._overflow(len(prompt), longest), len(prompt))
        if choices and self.choice_method == "grammar":
            return self.write_choice(prompt, choices, temperature, seed)
        if choices:
            score = self.score_forms if self.choice_method == "forms" else self.score_choices
            return choice_completion(score(prompt, choices), temperature, seed, len(prompt), start)
        if len(prompt) + max_tokens > self.n_ctx:
            raise ContextOverflow(self._overflow(len(prompt), max_tokens), len(prompt))
        with self._slot_for(prompt) as slot:
            slot.reuse_exactly(prompt)
            out: dict[str, Any] = slot.llama.create_completion(
                prompt, max_tokens=max_tokens, temperature=temperature, seed=seed, stop=list(stop) or None
            )
        usage = out.get("usage", {})
        return Completion(
            out["choices"][0]["text"].strip(),
            int(usage.get("prompt_tokens", len(prompt))),
            int(usage.get("completion_tokens", 0)),
        )

    def close(self) -> None:
        """Free the contexts, then the model, once no call is in flight (never free them under one)."""
        with self._turns:
            while len(self._free) < len(self._slots):
                self._turns.wait()
            for slot in reversed(self._slots):
                slot.llama.close()


SPEC_OPTIONS = {"n_ctx": int}
"""Options every llama.cpp spec takes after `?`: `n_ctx`, the context in tokens (default 4096; a simulator that
lists many actions may need more, at about 0.1 MB of memory per token for the 270M model)."""


def _context(options: str, scheme: str) -> int:
    n_ctx = spec_options(options, SPEC_OPTIONS, scheme).get("n_ctx", DEFAULT_N_CTX)
    if n_ctx < 64:
        raise ValueError(f"{scheme} option n_ctx must be at least 64 tokens, got {n_ctx}")
    return n_ctx


def embedded_factory(name: str) -> Any:
    """The spec factory of an embedded model: `name`, `name:method` with a method of `CHOICE_METHODS`, either
    followed by `?n_ctx=N`."""

    def build(arg: str) -> LlamaCpp:
        method, _, options = arg.partition("?")
        spec = name + (f":{method}" if method else "") + (f"?{options}" if options else "")
        n_ctx, method = _context(options, name), method or EMBEDDED[name].choice_method  # bad input before a download
        return LlamaCpp(model_path(name), spec, n_ctx=n_ctx, choice_method=method)

    return build


EMBEDDED_FACTORIES = Family(embedded_factory)
"""Every embedded model's name in the `LLMS` table points here."""


def _gguf(arg: str) -> LlamaCpp:
    path, _, options = arg.partition("?")
    if not path:
        raise ValueError("gguf spec is gguf:/path/to/model.gguf[?n_ctx=N]")
    return LlamaCpp(Path(path).expanduser(), f"gguf:{arg}", n_ctx=_context(options, "gguf"))
