"""Tiny random-weight CLIP and SigLIP checkpoints in the Hugging Face layout, made in the tests (no download):
a few small layers, a word-level tokenizer over a small vocabulary, the image processor config of each family.
``full=True``: the architectures at their full size (CLIP ViT-B/32, SigLIP base patch16 224: transformers' default
configs), still random, for timing (benchmarks/bench_hf_towers.py)."""

from __future__ import annotations

from pathlib import Path

WORDS = ("a dog cat runs on the grass beach red blue car man woman child plays ball water snow jumps over "
         "street bike rides sits in park two people".split())
IMAGE_SIZE = 32


def _tokenizer(max_length: int, pad_last: bool):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<unk>", "<bos>", "<eos>"]
    vocab = {w: i for i, w in enumerate(specials + list(WORDS))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    if pad_last:  # SigLIP: text ends with </s>, no start token
        tok.post_processor = processors.TemplateProcessing(single="$A <eos>", special_tokens=[("<eos>", 3)])
    else:
        tok.post_processor = processors.TemplateProcessing(single="<bos> $A <eos>",
                                                           special_tokens=[("<bos>", 2), ("<eos>", 3)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", bos_token="<bos>",
                                   eos_token="<eos>", model_max_length=max_length), len(vocab)


def make_clip(folder: Path, hidden: int = 32, projection: int = 16, full: bool = False) -> Path:
    """A tiny CLIPModel with its tokenizer and CLIPImageProcessor saved in ``folder`` (``full``: ViT-B/32's size)."""
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel

    length, size = (77, 224) if full else (16, IMAGE_SIZE)
    tokenizer, vocab_size = _tokenizer(length, pad_last=False)
    ids = dict(pad_token_id=0, bos_token_id=2, eos_token_id=3)
    text = dict(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
                num_attention_heads=2, max_position_embeddings=16, **ids)
    vision = dict(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2, num_attention_heads=2,
                  image_size=IMAGE_SIZE, patch_size=8)
    torch.manual_seed(0)
    config = CLIPConfig(text_config=ids, vision_config={}) if full else \
        CLIPConfig(text_config=text, vision_config=vision, projection_dim=projection)
    model = CLIPModel(config).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    CLIPImageProcessor(size={"shortest_edge": size}, crop_size={"height": size, "width": size}).save_pretrained(folder)
    return Path(folder)


def make_siglip(folder: Path, hidden: int = 32, full: bool = False) -> Path:
    """A tiny SiglipModel with its tokenizer (padded to its maximum length, as SigLIP is) and SiglipImageProcessor
    (``full``: SigLIP base patch16 224's size)."""
    import torch
    from transformers import SiglipConfig, SiglipImageProcessor, SiglipModel

    length, size = (64, 224) if full else (12, IMAGE_SIZE)
    tokenizer, vocab_size = _tokenizer(length, pad_last=True)
    ids = dict(pad_token_id=0, eos_token_id=3)
    text = dict(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
                num_attention_heads=2, max_position_embeddings=12, **ids)
    vision = dict(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2, num_attention_heads=2,
                  image_size=IMAGE_SIZE, patch_size=8)
    torch.manual_seed(1)
    config = SiglipConfig(text_config=ids, vision_config={}) if full else \
        SiglipConfig(text_config=text, vision_config=vision)
    model = SiglipModel(config).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    SiglipImageProcessor(size={"height": size, "width": size}).save_pretrained(folder)
    return Path(folder)
