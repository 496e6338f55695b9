"""Text processing: tokenisation, word vectors (GloVe), transformer token features (MiniLM)."""
