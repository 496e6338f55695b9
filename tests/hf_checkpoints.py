"""Tiny random-weight CLIP and SigLIP checkpoints in the Hugging Face layout, made in the tests (no download):
a few small layers, a word-level tokenizer over a small vocabulary, the image processor config of each family."""

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


def make_clip(folder: Path, hidden: int = 32, projection: int = 16) -> Path:
    """A tiny CLIPModel with its tokenizer and CLIPImageProcessor saved in ``folder``."""
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel

    tokenizer, vocab_size = _tokenizer(16, pad_last=False)
    text = dict(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
                num_attention_heads=2, max_position_embeddings=16, pad_token_id=0, bos_token_id=2, eos_token_id=3)
    vision = dict(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2, num_attention_heads=2,
                  image_size=IMAGE_SIZE, patch_size=8)
    torch.manual_seed(0)
    model = CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=projection)).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    CLIPImageProcessor(size={"shortest_edge": IMAGE_SIZE}, crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}
                       ).save_pretrained(folder)
    return Path(folder)


def make_siglip(folder: Path, hidden: int = 32) -> Path:
    """A tiny SiglipModel with its tokenizer (padded to its maximum length, as SigLIP is) and SiglipImageProcessor."""
    import torch
    from transformers import SiglipConfig, SiglipImageProcessor, SiglipModel

    tokenizer, vocab_size = _tokenizer(12, pad_last=True)
    text = dict(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
                num_attention_heads=2, max_position_embeddings=12, pad_token_id=0, eos_token_id=3)
    vision = dict(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2, num_attention_heads=2,
                  image_size=IMAGE_SIZE, patch_size=8)
    torch.manual_seed(1)
    model = SiglipModel(SiglipConfig(text_config=text, vision_config=vision)).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    SiglipImageProcessor(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}).save_pretrained(folder)
    return Path(folder)
