"""Start a text Transformer from pretrained MiniLM layers: ``model.text.init_transformer: minilm``.

SCDE (Zhao et al. 2020 §3.2) feeds fixed pretrained token features to K Transformer layers trained by the retrieval
loss, so that "the word embedding is then fine-tuned by Transformer module". With ``feature_layer: k`` the token
features are MiniLM's hidden states after layer k, and this module copies MiniLM's layers k+1 .. k+K into the K
layers, so the Transformer starts as the rest of the pretrained encoder and fine-tunes it: at initialisation the
model's token states equal MiniLM's last-layer features (up to float error; checked by a test), and training moves
them. The layers must have MiniLM's shape: d = 384, 12 heads, feed-forward 1536, GELU, LayerNorm eps 1e-12, and no
added positions (the features already carry BERT's position embeddings).
"""

from __future__ import annotations

import torch

from reelsearch.errors import ConfigError

INIT_KINDS = ("minilm",)


@torch.no_grad()
def copy_bert_layer(layer: torch.nn.TransformerEncoderLayer, bert_layer) -> None:
    """Copy a Hugging Face ``BertLayer``'s weights into a post-norm ``nn.TransformerEncoderLayer``."""
    att = bert_layer.attention
    q, k, v = att.self.query, att.self.key, att.self.value
    layer.self_attn.in_proj_weight.copy_(torch.cat([q.weight, k.weight, v.weight]))
    layer.self_attn.in_proj_bias.copy_(torch.cat([q.bias, k.bias, v.bias]))
    layer.self_attn.out_proj.weight.copy_(att.output.dense.weight)
    layer.self_attn.out_proj.bias.copy_(att.output.dense.bias)
    layer.norm1.load_state_dict(att.output.LayerNorm.state_dict())
    layer.linear1.load_state_dict(bert_layer.intermediate.dense.state_dict())
    layer.linear2.load_state_dict(bert_layer.output.dense.state_dict())
    layer.norm2.load_state_dict(bert_layer.output.LayerNorm.state_dict())


def init_transformer(text_encoder, kind: str, text_processor) -> None:
    """Initialise ``text_encoder``'s Transformer layers (a ``SequenceEncoder``) from ``kind`` ("minilm"): the
    layers of the processor's MiniLM that follow the processor's feature layer."""
    if kind not in INIT_KINDS:
        raise ConfigError(f"unknown init_transformer {kind!r}; choose one of {INIT_KINDS}")
    stack = getattr(text_encoder, "transformer", None)
    if stack is None or getattr(text_processor, "kind", None) != "minilm":
        raise ConfigError("init_transformer: minilm needs a Transformer text encoder over MiniLM token features")
    if stack.positional:
        raise ConfigError("init_transformer: minilm needs positional: false (MiniLM's features carry positions)")
    if getattr(text_processor, "int8", False):
        raise ConfigError("init_transformer: minilm copies float32 MiniLM weights; the text processor runs int8")
    bert = text_processor.encoder.bert
    cfg, layers = bert.config, list(stack.layers.layers)
    start = cfg.num_hidden_layers if text_processor.layer is None else text_processor.layer
    if start + len(layers) > cfg.num_hidden_layers:
        raise ConfigError(f"init_transformer: {len(layers)} layers after MiniLM layer {start}, but MiniLM has only "
                          f"{cfg.num_hidden_layers} (set model.text.feature_layer <= "
                          f"{cfg.num_hidden_layers - len(layers)})")
    first = layers[0]
    shape = (first.self_attn.embed_dim, first.self_attn.num_heads, first.linear1.out_features, first.norm1.eps)
    want = (cfg.hidden_size, cfg.num_attention_heads, cfg.intermediate_size, cfg.layer_norm_eps)
    if shape != want or first.activation_relu_or_gelu != 2:
        raise ConfigError(f"init_transformer: layers (dim, heads, ff_dim, layer_norm_eps) = {shape} must match "
                          f"MiniLM's {want} with activation gelu")
    for i, layer in enumerate(layers):
        copy_bert_layer(layer, bert.encoder.layer[start + i])
