"""The trainable policy of the hf back end: sampling with exact log-probs, rescoring them with gradients.

Trainers (MemoPilot, LaMer) need two things a serving back end does not give: the exact log-probability of every
sampled token under the weights and temperature that sampled it, and the same numbers again, with gradients, later.
`HFPolicy.sample` runs its own KV-cached loop and records log_softmax(logits / T) of each drawn token;
`HFPolicy.sequence_logprobs` recomputes them in one batched forward pass with the same padding layout (prompts
left-padded, completions right-padded, positions from the attention mask), so the PPO ratio starts at exactly 1.
At temperature 0 tokens are greedy and their log-probs are taken at T = 1.

Placement is a parameter: `from_source(..., device=, dtype=)` puts the weights on a device (float32 on the CPU,
bfloat16 on a GPU that supports it) and every tensor the policy creates (ids, masks, positions, the KV cache copies,
the sampling generator) is made on `policy.device`; only Python numbers leave it. Where the weights come from is
`checkpoints`; the adapter's files are `adapters`.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ttlearn.llm.base import LLM, Message, choice_completion, plain_answer, plain_prompt, split_prefill
from ttlearn.llm.cores import default_threads
from ttlearn.llm.hf.adapters import (
    LoraOptions,
    adapter_options,
    load_adapter_weights,
    read_adapter_meta,
    save_adapter,
    with_lora,
)
from ttlearn.llm.hf.checkpoints import load_causal_lm
from ttlearn.llm.models import EMBEDDED
from ttlearn.types import Completion

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Sample:
    """One sampled completion. `logprobs[i]` = log p(completion_ids[i]) at the sampling temperature; the end-of-turn
    token, when drawn, is the last completion token (the policy must learn to stop). `finished` is False when the
    sample was cut by max_new_tokens."""

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    text: str
    finished: bool


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log p(token) = log_softmax(logits / T)[token], logits [..., V] and tokens [...] → [...].

    Divide by the sampling temperature T so the ratio compares the policy that actually sampled the tokens. Sampling
    and scoring here and the trainers' losses use this one definition.
    """
    import torch

    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    if logits.shape[:-1] != tokens.shape:
        raise ValueError(f"logits {tuple(logits.shape)} must be tokens {tuple(tokens.shape)} plus a vocabulary axis")
    logprobs = torch.log_softmax(widened(logits) / temperature, dim=-1)
    return logprobs.gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)


def widened(logits: torch.Tensor) -> torch.Tensor:
    """Logits in float32 at least: bfloat16 is too coarse for log-probs, and a float64 model (a numeric check)
    must not be rounded back to float32."""
    import torch

    return logits if logits.dtype == torch.float64 else logits.float()


def positions_from_mask(mask: torch.Tensor) -> torch.Tensor:
    """Position of each token among its row's real tokens: cumsum(mask) − 1, clamped at 0 on leading padding.
    Without it left padding shifts a row's positions: absolute-position models change their logits, RoPE models
    (Llama, SmolLM2) only their rounding."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


SHARED_HEAD = 32
"""Fewest leading tokens the distinct prompts of a batch must share for `HFPolicy._prefill` to evaluate them once:
below it the extra model call costs more than it saves."""


def common_prefix(rows: Sequence[Sequence[int]]) -> int:
    """Length of the longest prefix every row shares, less one: each row keeps a token of its own to predict from."""
    shortest = min(len(r) for r in rows)
    for k in range(shortest - 1):
        if any(r[k] != rows[0][k] for r in rows[1:]):
            return k
    return max(shortest - 1, 0)


def pad_rows(
    rows: Sequence[Sequence[float]], pad: float, *, left: bool, device: torch.device, dtype: torch.dtype | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(values [B, W], mask [B, W]) of rows padded with `pad` to the longest row, on the left or the right: built as
    Python lists and copied to `device` once. W = 0 when every row is empty; values default to int64 (token ids)."""
    import torch

    width = max(len(r) for r in rows)
    values, mask = [], []
    for row in rows:
        fill = width - len(row)
        values.append([pad] * fill + list(row) if left else list(row) + [pad] * fill)
        mask.append([0] * fill + [1] * len(row) if left else [1] * len(row) + [0] * fill)
    values_tensor = torch.tensor(values, dtype=dtype or torch.long, device=device)
    return values_tensor, torch.tensor(mask, dtype=torch.long, device=device)


class HFPolicy(LLM):
    supports_choices = True

    def __init__(self, model: Any, tokenizer: Any, *, source: str, lora: LoraOptions | None = None) -> None:
        self.model, self.tokenizer, self.source, self.lora = model, tokenizer, source, None
        self.device: torch.device = next(model.parameters()).device
        self.spec = f"hf:{source}"
        self.templated = bool(tokenizer.chat_template)
        self.eos_ids = _eos_ids(model, tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.eos_ids)
        # transformers 5.x renames the KV-cache argument `past_key_values` to `cache` (the old name goes in 5.40)
        self.cache_arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        self.side_by_side = default_threads() if self.device.type == "cpu" else 1
        """Calls in flight share the weights read-only, each with its own KV cache, and torch computes every op the
        same whichever thread calls it, so each reply is the one given alone; side by side they use the cores one
        call alone leaves idle (Python's share of a small model's decode step; benchmarks/decode_throughput.py).
        One per idle core, as llama.cpp's threads. Other devices: 1, not measured."""
        self._mode_lock = threading.Lock()
        self._evaluators = 0
        self._was_training = False
        if lora is not None:
            self._add_lora(lora)

    @classmethod
    def from_source(
        cls, source: str = "smollm2", *, lora: LoraOptions | None = None, device: str = "cpu", dtype: str = "float32"
    ) -> HFPolicy:
        model, tokenizer = load_causal_lm(source, device=device, dtype=dtype)
        if source not in EMBEDDED:  # adapters record their base; a relative path would break from another directory
            source = str(Path(source).expanduser().resolve())
        return cls(model, tokenizer, source=source, lora=lora)

    @classmethod
    def from_adapter(cls, directory: str | Path, *, device: str = "cpu", dtype: str = "float32") -> HFPolicy:
        """The base model recorded in the adapter's metadata with the adapter loaded on top."""
        policy = cls.from_source(read_adapter_meta(Path(directory))["base"], device=device, dtype=dtype)
        policy.load_adapter(directory)
        policy.spec = f"hf:{directory}"
        return policy

    def _add_lora(self, options: LoraOptions) -> None:
        self.model, self.lora = with_lora(self.model, options), options

    # ---- prompts ------------------------------------------------------------------------------------------------
    def render(self, messages: Sequence[Message]) -> str:
        """The chat template with the assistant turn opened and any prefill written into it; base models without one
        get a plain "Answer:" layout."""
        if self.templated:
            turns, prefill = split_prefill(messages)
            return self.tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True) + prefill
        return plain_prompt(messages)

    def encode(self, messages: Sequence[Message]) -> list[int]:
        ids = self.tokenizer.encode(self.render(messages), add_special_tokens=False)
        if not ids:
            raise ValueError("the rendered prompt is empty")
        return ids

    def answer_ids(self, choice: str) -> list[int]:
        """A choice as the model would write it, then the token that ends the answer."""
        if self.templated:
            return self.tokenizer.encode(choice, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        return self.tokenizer.encode(plain_answer(choice), add_special_tokens=False)

    # ---- sampling and scoring -----------------------------------------------------------------------------------
    def generator(self, seed: int) -> torch.Generator:
        """A random generator on the policy's device, seeded: the same seed draws the same tokens on one device
        (CPU and GPU streams differ)."""
        import torch

        return torch.Generator(device=self.device).manual_seed(seed)

    def sample(
        self,
        prompts: Sequence[Sequence[Message]],
        *,
        max_new_tokens: int = 128,
        temperature: float = 1.0,
        seed: int = 0,
        stop: Sequence[str] = (),
    ) -> list[Sample]:
        """Sample one completion per prompt, batched with a KV cache, recording each token's log-prob.

        Tokens are drawn from softmax(logits / T) with a generator seeded by `seed` (T = 0: argmax). A row ends at
        an end-of-turn token or when its text contains a `stop` string (the text is cut there; the ids are kept).
        """
        return self.sample_ids(
            [self.encode(m) for m in prompts],
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            seed=seed,
            stop=stop,
        )

    def sample_ids(
        self,
        prompt_ids: Sequence[Sequence[int]],
        *,
        max_new_tokens: int,
        temperature: float,
        seed: int,
        stop: Sequence[str] = (),
    ) -> list[Sample]:
        """`sample` for prompts that are already token ids.

        Identical prompts are evaluated once and their KV cache copied to each row (`_prefill`: a group of G
        rollouts asks the same thing), and a row that has ended leaves the batch, so the decoding steps cost what the
        rows still writing cost. Greedy rows are what they would be alone; sampled rows draw from one generator in
        batch order, so a seed gives the same samples for the same batch."""
        import torch

        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        generator = self.generator(seed)
        eos = torch.tensor(sorted(self.eos_ids), device=self.device)
        drawn: list[list[int]] = [[] for _ in prompt_ids]
        logps: list[list[float]] = [[] for _ in prompt_ids]
        ended = [False] * len(prompt_ids)  # by an end-of-turn token or a stop string
        with torch.no_grad(), self._evaluating():
            logits, cache, mask = self._prefill(prompt_ids)
            rows = torch.arange(len(prompt_ids), device=self.device)  # the prompt each batch row writes for
            positions = mask.sum(dim=1, keepdim=True)  # the next token's position: after the row's real tokens
            for step in range(max_new_tokens):
                if temperature == 0:
                    token = logits.argmax(-1)
                else:
                    probs = torch.softmax(logits / temperature, dim=-1)
                    token = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
                values = token_logprobs(logits, token, temperature or 1.0).tolist()
                for row, t, value in zip(rows.tolist(), token.tolist(), values):
                    drawn[row].append(t)
                    logps[row].append(value)
                hit = torch.isin(token, eos) | self._stop_hit([drawn[r] for r in rows.tolist()], stop)
                for row in rows[hit].tolist():
                    ended[row] = True
                if step == max_new_tokens - 1 or bool(hit.all()):
                    break
                if bool(hit.any()):
                    keep = (~hit).nonzero().squeeze(1)
                    cache.batch_select_indices(keep)
                    rows, token, mask, positions = rows[keep], token[keep], mask[keep], positions[keep]
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
                out = self.model(
                    input_ids=token[:, None],
                    attention_mask=mask,
                    position_ids=positions,
                    use_cache=True,
                    **{self.cache_arg: cache},
                )
                cache, logits, positions = out[self.cache_arg], widened(out.logits[:, -1]), positions + 1
        return [self._make_sample(prompt_ids[i], drawn[i], logps[i], ended[i], stop) for i in range(len(prompt_ids))]

    def sample_choices(
        self, prompts: Sequence[Sequence[Message]], choices: Sequence[str], *, temperature: float, seed: int
    ) -> list[Sample]:
        """`sample` restricted to whole answers from `choices`: each row draws choice k with probability
        softmax(score / T)_k, score(k) = log p(choice k + end of turn | prompt) (as `choice_scores`; T = 0: argmax,
        the first listed on a tie), from a generator seeded by `seed` in batch order. Each sample's log-probs are the
        chosen answer's tokens under the whole vocabulary (`sequence_logprobs`), as the trainer recomputes them:
        within a group that shares a prompt the restriction's normaliser is the same for every row, so with
        advantages that sum to zero over the group it adds nothing to the policy gradient. Every answer is scored
        once per distinct prompt, in one batch whose prompts `_prefill` evaluates once each."""
        import torch

        if not choices:
            raise ValueError("sample_choices needs at least one choice")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        prompt_ids = [self.encode(m) for m in prompts]
        answers = [self.answer_ids(c) for c in choices]
        distinct = {p: n for n, p in enumerate(dict.fromkeys(map(tuple, prompt_ids)))}
        generator = self.generator(seed)
        with torch.no_grad(), self._evaluating():
            pairs = [(p, a) for p in distinct for a in answers]
            token_logps, _ = self.sequence_logprobs([p for p, _ in pairs], [a for _, a in pairs], 1.0)
            scores = token_logps.sum(dim=1).view(len(distinct), len(answers))
            rows = []
            for prompt in prompt_ids:
                score = scores[distinct[tuple(prompt)]]
                if temperature == 0:
                    pick = int(score.argmax())
                else:
                    pick = int(torch.multinomial(torch.softmax(score / temperature, dim=-1), 1, generator=generator))
                rows.append((prompt, pick, distinct[tuple(prompt)] * len(answers) + pick))
            if temperature not in (0, 1):  # the samples' log-probs are at the sampling temperature
                token_logps, _ = self.sequence_logprobs(prompt_ids, [answers[k] for _, k, _ in rows], temperature)
                rows = [(p, k, i) for i, (p, k, _) in enumerate(rows)]
        return [
            Sample(tuple(p), tuple(answers[k]), tuple(token_logps[i, : len(answers[k])].tolist()), choices[k], True)
            for p, k, i in rows
        ]

    def _prefill(self, prompt_ids: Sequence[Sequence[int]]) -> tuple[torch.Tensor, Any, torch.Tensor]:
        """(logits of each row's next token [B, V] in float32, the KV cache of the prompts [B rows], the prompts'
        attention mask [B, P]), each prompt evaluated as if alone, with no work done twice:

        - each distinct prompt goes through the model once; rows that share it get copies of its cache;
        - the distinct prompts' common head (the template, the rules, the instructions: `SHARED_HEAD` tokens or
          more) goes through once, and each prompt's own tail after it, left-padded: the padding sits between head
          and tail, masked out, and positions count real tokens only (`positions_from_mask`), so every prompt sees
          what it would see alone.

        Autograd follows the copies back to the one evaluation, so a gradient through shared prompt tokens is the
        sum over the rows that read them."""
        import torch

        distinct: dict[tuple[int, ...], int] = {}
        index = [distinct.setdefault(tuple(p), len(distinct)) for p in prompt_ids]
        prompts = list(distinct)
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        head = common_prefix(prompts) if len(prompts) > 1 else 0
        cache = None
        if head >= SHARED_HEAD:
            out = self.model(input_ids=torch.tensor([prompts[0][:head]], device=self.device), use_cache=True)
            cache = out[self.cache_arg]
            cache.reorder_cache(torch.zeros(len(prompts), dtype=torch.long, device=self.device))
        else:
            head = 0
        tails, tail_mask = self._left_padded([p[head:] for p in prompts])
        mask = torch.cat([torch.ones((len(prompts), head), dtype=torch.long, device=self.device), tail_mask], dim=1)
        out = self.model(
            input_ids=tails,
            attention_mask=mask,
            position_ids=positions_from_mask(mask)[:, head:],
            use_cache=True,
            logits_to_keep=1,
            **{self.cache_arg: cache},
        )
        cache, logits = out[self.cache_arg], widened(out.logits[:, -1])
        if len(prompts) < len(prompt_ids):
            rows = torch.tensor(index, device=self.device)
            cache.reorder_cache(rows)
            logits, mask = logits[rows], mask[rows]
        return logits, cache, mask

    def _stop_hit(self, rows: list[list[int]], stop: Sequence[str]) -> torch.Tensor:
        """Whether each row's text so far contains a stop string."""
        import torch

        hits = [
            bool(stop) and any(s in self.tokenizer.decode(row, skip_special_tokens=True) for s in stop) for row in rows
        ]
        return torch.tensor(hits, dtype=torch.bool, device=self.device)

    def _make_sample(
        self, prompt: Sequence[int], completion: list[int], logprobs: list[float], ended: bool, stop: Sequence[str]
    ) -> Sample:
        text = self.tokenizer.decode(completion, skip_special_tokens=True)
        for s in stop:
            text = text.split(s, 1)[0]
        return Sample(tuple(prompt), tuple(completion), tuple(logprobs), text, ended)

    def _left_padded(self, rows: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        if not rows or any(len(r) == 0 for r in rows):
            raise ValueError("every prompt needs at least one token")
        return pad_rows(rows, self.pad_id, left=True, device=self.device)

    def sequence_logprobs(
        self, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]], temperature: float = 1.0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """log p(c_k | prompt, c_<k) at temperature T for every completion token, batched.

        Returns (logprobs [B, C], mask [B, C]) with C the longest completion; padded entries are 0 with mask 0.
        The prompts go through `_prefill` (each distinct one once: a group's writes after game 1 share theirs), then
        the right-padded completions through the model on top of that cache, so only completion positions reach the
        vocabulary projection. Gradients flow unless the caller disables them, through the shared prompt too.
        """
        import torch

        if len(prompt_ids) != len(completion_ids):
            raise ValueError(f"{len(prompt_ids)} prompts but {len(completion_ids)} completions")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if not prompt_ids or any(len(p) == 0 for p in prompt_ids):
            raise ValueError("every prompt needs at least one token")
        completions, completion_mask = pad_rows(completion_ids, self.pad_id, left=False, device=self.device)
        width = completions.shape[1]
        if width == 0:
            return torch.zeros(completions.shape, device=self.device), completion_mask.bool()
        first, cache, prompt_mask = self._prefill(prompt_ids)
        logits = first[:, None]
        if width > 1:
            mask = torch.cat([prompt_mask, completion_mask[:, :-1]], dim=1)
            later = self.model(
                input_ids=completions[:, :-1],
                attention_mask=mask,
                position_ids=positions_from_mask(mask)[:, prompt_mask.shape[1] :],
                use_cache=True,
                **{self.cache_arg: cache},
            ).logits
            logits = torch.cat([logits, widened(later)], dim=1)
        logprobs = token_logprobs(logits, completions, temperature or 1.0)
        return logprobs.masked_fill(completion_mask == 0, 0.0), completion_mask.bool()

    def choice_scores(self, prompt_ids: Sequence[int], answers: Sequence[Sequence[int]]) -> torch.Tensor:
        """score(a) = Σ_k log p(a_k | prompt, a_<k) at T = 1 for each answer, as a [K] tensor.

        The prompt goes through the model once and its KV cache is repeated for the K answers, which are scored
        together (right-padded): a Minesweeper decision has ~30 legal cells, so batching whole prompts would cost
        30× the compute. Gradients flow unless the caller disables them (the LaMer trainer needs them).
        """
        import torch

        if not answers or any(len(a) == 0 for a in answers):
            raise ValueError("every choice needs at least one token")
        prompt = torch.tensor([list(prompt_ids)], device=self.device)
        out = self.model(input_ids=prompt, use_cache=True, logits_to_keep=1)
        first = torch.log_softmax(widened(out.logits[0, -1]), dim=-1)
        scores = torch.stack([first[a[0]] for a in answers])
        k, width, length = len(answers), max(len(a) for a in answers), len(prompt_ids)
        if width == 1:
            return scores
        rows, mask = pad_rows(answers, self.pad_id, left=False, device=self.device)
        cache = out[self.cache_arg]
        cache.batch_repeat_interleave(k)
        logits = self.model(
            input_ids=rows[:, :-1],
            attention_mask=torch.cat([torch.ones((k, length), dtype=torch.long, device=self.device), mask[:, :-1]], 1),
            position_ids=(length + torch.arange(width - 1, device=self.device)).expand(k, -1),
            use_cache=False,
            **{self.cache_arg: cache},
        ).logits
        later = torch.log_softmax(widened(logits), dim=-1).gather(-1, rows[:, 1:, None]).squeeze(-1)
        return scores + (later * mask[:, 1:]).sum(dim=1)

    def score_choices(self, prompt_ids: Sequence[int], choices: Sequence[str]) -> dict[str, float]:
        """log P(choice + end | prompt) for each choice (`choice_scores` without gradients, dropout off)."""
        import torch

        with torch.no_grad(), self._evaluating():
            scores = self.choice_scores(prompt_ids, [self.answer_ids(c) for c in choices])
        return dict(zip(choices, scores.tolist()))

    @contextlib.contextmanager
    def _evaluating(self) -> Iterator[None]:
        """Dropout off while sampling or scoring, whatever mode the trainer left the model in. Calls in flight share
        the model, so the first one in switches it to eval mode and the last one out restores the trainer's mode:
        one call's exit must not turn dropout back on under another."""
        with self._mode_lock:
            if self._evaluators == 0:
                self._was_training = self.model.training
                self.model.eval()
            self._evaluators += 1
        try:
            yield
        finally:
            with self._mode_lock:
                self._evaluators -= 1
                if self._evaluators == 0:
                    self.model.train(self._was_training)

    # ---- the LLM protocol ---------------------------------------------------------------------------------------
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
        prompt = self.encode(messages)
        if choices:
            return choice_completion(self.score_choices(prompt, choices), temperature, seed, len(prompt), start)
        (sample,) = self.sample_ids([prompt], max_new_tokens=max_tokens, temperature=temperature, seed=seed, stop=stop)
        return Completion(sample.text.strip(), len(prompt), len(sample.completion_ids), time.perf_counter() - start)

    # ---- training state -----------------------------------------------------------------------------------------
    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """What an optimiser should update: the LoRA matrices, or every weight when there is no adapter."""
        return [p for p in self.model.parameters() if p.requires_grad]

    @contextlib.contextmanager
    def adapters_disabled(self) -> Iterator[None]:
        """The frozen base model, e.g. the reference policy of a KL penalty."""
        if self.lora is None:
            raise ValueError("this policy has no LoRA adapter to disable")
        with self.model.disable_adapter():
            yield

    def save_adapter(self, directory: str | Path) -> None:
        """The adapter weights (peft format) plus a json with the base model and the LoRA options."""
        if self.lora is None:
            raise ValueError("this policy has no LoRA adapter to save")
        save_adapter(self.model, Path(directory), base=self.source, options=self.lora)

    def load_adapter(self, directory: str | Path) -> None:
        """Replace the adapter weights by saved ones (adding an adapter first if this policy has none)."""
        directory = Path(directory)
        options = adapter_options(directory)
        if self.lora is None:
            self._add_lora(options)
        elif options != self.lora:
            raise ValueError(f"adapter in {directory} has options {options}, this policy has {self.lora}")
        load_adapter_weights(self.model, directory, str(self.device))

    def close(self) -> None:
        self.model = None


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    """Every token that ends a turn: the tokenizer's eos plus the generation config's (an int or a list)."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids |= set(configured) if isinstance(configured, (list, tuple)) else {configured} - {None}
    if not ids:
        raise ValueError("the model defines no end-of-sequence token; set tokenizer.eos_token")
    return ids
