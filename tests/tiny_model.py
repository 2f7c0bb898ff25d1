"""A tiny random Llama and a byte-level tokenizer built in code: a real HF model directory with no download, for
tests that must run where no embedded model is (the GPU check's machine) or that need a model only as a shape."""

from __future__ import annotations

from pathlib import Path
from typing import Any

CHAT = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def byte_tokenizer() -> Any:
    """Bytes as tokens (256, no merges) plus a chat layout's three special tokens."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    model = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    model.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    model.decoder = decoders.ByteLevel()
    model.add_special_tokens(["<|im_start|>", "<|im_end|>", "<|pad|>"])
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=model, eos_token="<|im_end|>", pad_token="<|pad|>", chat_template=CHAT
    )


def tiny_llama(tokenizer: Any, seed: int = 0, layers: int = 2, positions: int = 512) -> Any:
    """`layers` layers of width 32 with random weights drawn on the CPU from `seed`: the same model on every
    machine."""
    import torch
    import transformers

    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=positions,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return transformers.LlamaForCausalLM(config).eval()


def tiny_model_dir(directory: Path) -> Path:
    """`tiny_llama` and `byte_tokenizer` saved as an HF checkpoint directory (what `hf:DIR` loads)."""
    tokenizer = byte_tokenizer()
    tiny_llama(tokenizer).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
