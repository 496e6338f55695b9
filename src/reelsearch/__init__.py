"""reelsearch: search video with natural language and describe video with sentences.

Joint video-text embeddings after Torabi et al. 2016, Mithun et al. 2018 and Zhao et al. 2020 (SCDE).
"""

__version__ = "0.1.0"
