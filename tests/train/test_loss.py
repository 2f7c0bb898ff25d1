"""The clipped policy loss against hand-computed numbers, then against TRL's own GRPOTrainer loss code."""

import math
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from numeric import SAME

from ttlearn.llm.hf import token_logprobs
from ttlearn.train.loss import policy_loss

torch.set_num_threads(1)

# A [2, 3] batch; the last token of sequence 1 is padding. old_logp = 0, so ρ = exp(logp) is set directly.
RATIOS = torch.tensor([[1.5, 0.9, 0.7], [1.1, 0.5, 2.0]], dtype=torch.float64)
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])
ADVANTAGES = torch.tensor([1.0, -2.0], dtype=torch.float64)
OLD = torch.zeros(2, 3, dtype=torch.float64)
# Per-token loss −min(ρA, clip(ρ, 0.8, 1.2)A):
#   seq 0, A = +1: ρ 1.5 → −min(1.5, 1.2) = −1.2 (clipped high); ρ 0.9 → −0.9;
#                  ρ 0.7 → −min(0.7, 0.8) = −0.7 (not clipped)
#   seq 1, A = −2: ρ 1.1 → 2.2; ρ 0.5 → −min(−1.0, −1.6) = 1.6 (clipped low); padding ρ 2.0 → 4.0 (masked out)
# Row sums −2.8 (3 tokens) and 3.8 (2 tokens); total 1.0 over 5 tokens.


def logp_leaf():
    return RATIOS.log().clone().requires_grad_(True)


class TestTokenLogprobs:
    def test_gathers_the_chosen_token_after_temperature(self):
        logits = torch.tensor([[0.0, math.log(2), math.log(3)]])  # softmax ∝ (1, 2, 3)
        tokens = torch.tensor([2])
        # T = 1: p = 3/6; T = 2: logits/2 → softmax ∝ (1, √2, √3), p = √3 / (1 + √2 + √3)
        assert token_logprobs(logits, tokens).item() == pytest.approx(math.log(0.5), rel=1e-6)
        expected = math.log(math.sqrt(3) / (1 + math.sqrt(2) + math.sqrt(3)))
        assert token_logprobs(logits, tokens, temperature=2.0).item() == pytest.approx(expected, rel=1e-6)

    def test_bad_input(self):
        with pytest.raises(ValueError, match="temperature"):
            token_logprobs(torch.zeros(1, 3), torch.zeros(1, dtype=torch.long), temperature=0.0)
        with pytest.raises(ValueError, match="vocabulary axis"):
            token_logprobs(torch.zeros(2, 3), torch.zeros(1, dtype=torch.long))


class TestAggregations:
    @pytest.mark.parametrize(
        "loss_type, extra, expected",
        [
            ("grpo", {}, (-2.8 / 3 + 3.8 / 2) / 2),  # mean of the sequence means = 0.48333
            ("bnpo", {}, 1.0 / 5),  # Σ / 5 tokens
            ("dr_grpo", {"max_completion_length": 4}, 1.0 / (2 * 4)),  # Σ / (B · 4)
            ("dr_grpo", {}, 1.0 / (2 * 3)),  # default max_completion_length = padded length 3
            ("dapo", {}, 1.0 / 5),  # default normaliser: this batch's 5 tokens
            ("dapo", {"num_items_in_batch": 10}, 1.0 / 10),  # tokens of the whole generation batch
        ],
    )
    def test_value(self, loss_type, extra, expected):
        loss, _ = policy_loss(logp_leaf(), OLD, ADVANTAGES, MASK, loss_type=loss_type, **extra)
        assert loss.item() == pytest.approx(expected, abs=1e-12)

    def test_stats(self):
        _, stats = policy_loss(logp_leaf(), OLD, ADVANTAGES, MASK)
        # clipped: (0, 0) high with A > 0 and (1, 1) low with A < 0; (0, 2) is below 0.8 but A > 0; padding ignored
        assert stats["clip_fraction"] == pytest.approx(2 / 5)
        assert stats["ratio_mean"] == pytest.approx((1.5 + 0.9 + 0.7 + 1.1 + 0.5) / 5)
        assert "kl_mean" not in stats


class TestClipping:
    def test_clipped_tokens_get_no_gradient_on_both_sides(self):
        logp = logp_leaf()
        loss, _ = policy_loss(logp, OLD, ADVANTAGES, MASK, loss_type="bnpo")
        loss.backward()
        # d/dlogp of −ρA/5 is −ρA/5 where unclipped; 0 where clipped or masked
        expected = torch.tensor([[0.0, -0.9 / 5, -0.7 / 5], [2.2 / 5, 0.0, 0.0]], dtype=torch.float64)
        torch.testing.assert_close(logp.grad, expected)

    def test_epsilon_high_widens_the_upper_bound_only(self):
        # ε_high = 0.6: ρ 1.5 lies inside [0.8, 1.6] → −1.5 instead of −1.2; total 1.0 − 0.3 = 0.7 over 5 tokens
        loss, stats = policy_loss(logp_leaf(), OLD, ADVANTAGES, MASK, loss_type="bnpo", epsilon_high=0.6)
        assert loss.item() == pytest.approx(0.7 / 5)
        assert stats["clip_fraction"] == pytest.approx(1 / 5)


class TestAdvantageShapesAndKL:
    def test_per_token_advantages(self):
        # token (0, 2) now has A = −1: ρ 0.7 → −min(−0.7, −0.8) = 0.8 (clipped low); seq 0 sum −1.2 − 0.9 + 0.8 = −1.3
        advantages = torch.tensor([[1.0, 1.0, -1.0], [-2.0, -2.0, -2.0]], dtype=torch.float64)
        loss, _ = policy_loss(logp_leaf(), OLD, advantages, MASK, loss_type="bnpo")
        assert loss.item() == pytest.approx((-1.3 + 3.8) / 5)

    def test_on_policy_when_old_logp_is_none(self):
        # ρ = 1 everywhere → per-token loss −A: sequence means −1 and 2 → grpo 0.5
        loss, _ = policy_loss(logp_leaf(), None, ADVANTAGES, MASK)
        assert loss.item() == pytest.approx(0.5)

    def test_k3_kl_penalty(self):
        logp = logp_leaf()
        d = torch.tensor([[0.0, math.log(2), 0.0], [-math.log(2), 0.0, 5.0]], dtype=torch.float64)
        # k3(d) = e^d − d − 1: k3(ln 2) = 1 − ln 2, k3(−ln 2) = ln 2 − 0.5, sum 0.5; padding (d = 5) masked out
        # bnpo: (1.0 + 0.1 · 0.5) / 5 = 0.21; mean KL 0.5 / 5 = 0.1
        loss, stats = policy_loss(logp, OLD, ADVANTAGES, MASK, loss_type="bnpo", beta=0.1, ref_logp=logp.detach() + d)
        assert loss.item() == pytest.approx(0.21)
        assert stats["kl_mean"] == pytest.approx(0.1)

    def test_bad_input(self):
        with pytest.raises(ValueError, match="loss_type"):
            policy_loss(logp_leaf(), OLD, ADVANTAGES, MASK, loss_type="ppo")
        with pytest.raises(ValueError, match="ref_logp"):
            policy_loss(logp_leaf(), OLD, ADVANTAGES, MASK, beta=0.1)
        with pytest.raises(ValueError, match="advantages"):
            policy_loss(logp_leaf(), OLD, torch.ones(3), MASK)
        with pytest.raises(ValueError, match="mask"):
            policy_loss(logp_leaf(), OLD, ADVANTAGES, MASK[:, :2])


# ---------------------------------------------------------------------------------------------------------------------
# TRL: run `GRPOTrainer._compute_loss` itself (TRL 1.16) on the same tensors. It needs a trainer only for its settings,
# a log-prob function and a metrics sink, so `self` is a namespace holding exactly the attributes the method reads;
# the per-token log-probs are handed in instead of coming from a model forward pass.


def trl_loss(loss_type, logp, old_logp, advantages, mask, *, beta, ref_logp, epsilon, epsilon_high, max_len, n_items):
    grpo_trainer = pytest.importorskip("trl.trainer.grpo_trainer")
    accelerator = SimpleNamespace(
        num_processes=1, sync_gradients=True, gather=lambda x: x, reduce=lambda x, reduction: x
    )
    trainer = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *args, **kwargs: (logp, torch.zeros_like(logp), None),
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        importance_sampling_level="token",
        beta=beta,
        loss_type=loss_type,
        epsilon_low=epsilon,
        epsilon_high=epsilon_high,
        args=SimpleNamespace(delta=None, use_bias_correction_kl=False, steps_per_generation=1),
        use_vllm=False,
        model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1,
        max_completion_length=max_len,
        accelerator=accelerator,
        _entropy_bonus_enabled=False,
        aux_loss_enabled=False,
        _metrics={"train": defaultdict(list)},
    )
    inputs = {
        "prompt_ids": torch.zeros(mask.shape[0], 1, dtype=torch.long),
        "prompt_mask": torch.ones(mask.shape[0], 1, dtype=torch.long),
        "completion_ids": torch.zeros_like(mask),
        "completion_mask": mask,
        "advantages": advantages,
        "old_per_token_logps": old_logp,
        "ref_per_token_logps": ref_logp,
        "num_items_in_batch": torch.tensor(float(n_items)),
    }
    loss = grpo_trainer.GRPOTrainer._compute_loss(trainer, None, inputs)
    return loss, trainer._metrics["train"]


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize("beta, epsilon_high", [(0.0, 0.2), (0.04, 0.28)])
def test_matches_trl_grpo_trainer(loss_type, beta, epsilon_high):
    """Two implementations of one formula, compared in float64 (tests/numeric.py): their sums run in other orders."""
    generator = torch.Generator().manual_seed(7)
    shape, f64 = (3, 5), {"dtype": torch.float64}
    old = -torch.rand(shape, generator=generator, **f64) * 3
    drift = (torch.rand(shape, generator=generator, **f64) - 0.5) * 0.8  # ρ from e^−0.4 to e^0.4: both sides clip
    ref = old + (torch.rand(shape, generator=generator, **f64) - 0.5)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]])
    advantages = torch.tensor([-1.3, 0.7, 0.4], **f64)
    settings = {"beta": beta, "epsilon": 0.2, "epsilon_high": epsilon_high}

    ours_logp = (old + drift).requires_grad_(True)
    ours, stats = policy_loss(
        ours_logp,
        old,
        advantages,
        mask,
        ref_logp=ref,
        loss_type=loss_type,
        max_completion_length=8,
        num_items_in_batch=12,
        **settings,
    )
    ours.backward()

    trl_logp = (old + drift).requires_grad_(True)
    theirs, metrics = trl_loss(
        loss_type, trl_logp, old, advantages, mask, ref_logp=ref, max_len=8, n_items=12, **settings
    )
    theirs.backward()

    assert ours.item() == pytest.approx(theirs.item(), rel=SAME["rtol"], abs=SAME["atol"])
    torch.testing.assert_close(ours_logp.grad, trl_logp.grad, **SAME)
    # TRL logs its metrics as float32 numbers: one rounding of a float64 value, 6e-8 relative at most
    assert stats["clip_fraction"] == pytest.approx(metrics["clip_ratio/region_mean"][0], rel=1e-7)
    assert metrics["clip_ratio/low_mean"][0] > 0 and metrics["clip_ratio/high_mean"][0] > 0  # both sides clip
    if beta:
        assert stats["kl_mean"] == pytest.approx(metrics["kl"][0], rel=1e-7)


def test_token_logprobs_match_trl_selective_log_softmax():
    trl_utils = pytest.importorskip("trl.trainer.utils")
    logits = torch.randn(2, 4, 11, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    tokens = torch.randint(0, 11, (2, 4), generator=torch.Generator().manual_seed(4))
    expected = trl_utils.selective_log_softmax(logits, tokens, temperature=0.7)
    torch.testing.assert_close(token_logprobs(logits, tokens, temperature=0.7), expected, **SAME)
