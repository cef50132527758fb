"""A throw-away tiny causal LM + locally trained tokenizer for engine tests (built in ~1 s)."""

from __future__ import annotations

import os


def build_random_tiny(path: str, *, hidden: int = 32, layers: int = 2, vocab: int = 96, seed: int = 0) -> str:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    if os.path.exists(os.path.join(path, "config.json")):
        return path
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|pad|>", "<|endoftext|>"],
                                  initial_alphabet=sorted(pre_tokenizers.ByteLevel.alphabet())[:60])
    corpus = [f"What is {a} + {b}?\nAnswer: {a + b}" for a in range(30) for b in range(30)]
    tok.train_from_iterator(corpus, trainer=trainer)
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|pad|>", eos_token="<|endoftext|>",
                                     padding_side="left")
    hf_tok.save_pretrained(path)
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(hf_tok), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=True,
                      pad_token_id=hf_tok.pad_token_id, eos_token_id=hf_tok.eos_token_id, bos_token_id=None)
    model = LlamaForCausalLM(cfg)
    model.generation_config.pad_token_id = hf_tok.pad_token_id
    model.generation_config.eos_token_id = hf_tok.eos_token_id
    model.save_pretrained(path)
    return path
