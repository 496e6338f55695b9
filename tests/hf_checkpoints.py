"""Tiny random-weight CLIP and SigLIP checkpoints in the Hugging Face layout, made in the tests (no download):
a few small layers, a word-level tokenizer over a small vocabulary, the image processor config of each family;
``make_multilingual_siglip``: a SigLIP whose tokenizer (a SentencePiece-style unigram model, as the multilingual
SigLIP's) is trained here on sentences in eight languages and five scripts.
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


#: Sentences the multilingual tokenizer is trained on (and the languages a test queries in).
MULTILINGUAL = {
    "en": ["a dog runs on the grass", "two people ride a red bike in the park", "a child plays in the snow"],
    "de": ["ein Hund läuft über das Gras", "zwei Menschen fahren ein rotes Fahrrad im Park",
           "ein Kind spielt im Schnee"],
    "fr": ["un chien court sur l'herbe", "deux personnes font du vélo rouge dans le parc",
           "un enfant joue dans la neige"],
    "zh": ["一只狗在草地上奔跑", "两个人在公园里骑红色自行车", "一个孩子在雪地里玩耍"],
    "ja": ["犬が芝生の上を走っている", "二人が公園で赤い自転車に乗っている", "子供が雪の中で遊んでいる"],
    "ru": ["собака бежит по траве", "два человека едут на красном велосипеде в парке", "ребёнок играет в снегу"],
    "ar": ["كلب يجري على العشب", "شخصان يركبان دراجة حمراء في الحديقة", "طفل يلعب في الثلج"],
    "hi": ["एक कुत्ता घास पर दौड़ रहा है", "दो लोग पार्क में लाल साइकिल चला रहे हैं", "एक बच्चा बर्फ में खेल रहा है"],
}


def _multilingual_tokenizer(max_length: int):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<unk>", "<eos>"]
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    sentences = [s for group in MULTILINGUAL.values() for s in group]
    tok.train_from_iterator(sentences * 4, trainers.UnigramTrainer(vocab_size=400, special_tokens=specials,
                                                                   unk_token="<unk>", show_progress=False))
    eos = tok.token_to_id("<eos>")
    tok.post_processor = processors.TemplateProcessing(single="$A <eos>", special_tokens=[("<eos>", eos)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", eos_token="<eos>",
                                   model_max_length=max_length)
    return fast, tok.get_vocab_size()


def make_multilingual_siglip(folder: Path, hidden: int = 32) -> Path:
    """A tiny SiglipModel with a multilingual tokenizer trained on ``MULTILINGUAL`` (see the module docstring)."""
    import torch
    from transformers import SiglipConfig, SiglipImageProcessor, SiglipModel

    length = 48
    tokenizer, vocab_size = _multilingual_tokenizer(length)
    ids = dict(pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    text = dict(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
                num_attention_heads=2, max_position_embeddings=length, **ids)
    vision = dict(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2, num_attention_heads=2,
                  image_size=IMAGE_SIZE, patch_size=8)
    torch.manual_seed(2)
    model = SiglipModel(SiglipConfig(text_config=text, vision_config=vision)).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    SiglipImageProcessor(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}).save_pretrained(folder)
    return Path(folder)
