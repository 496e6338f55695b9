"""Hub checkpoints known to run as ``--model hf:NAME`` (``reelsearch models`` lists them): their family, size,
license and the retrieval numbers their papers publish. The numbers are cited, not measured here (no hub weights
can be fetched where reelsearch is developed); a checkpoint not listed runs too when it is a ``CLIPModel`` or a
``SiglipModel`` in the Hugging Face layout."""

from __future__ import annotations

from dataclasses import dataclass

CLIP_PAPER = "Radford et al. 2021, Learning Transferable Visual Models From Natural Language Supervision, Table 13"


@dataclass(frozen=True)
class KnownCheckpoint:
    """A hub checkpoint: ``params`` in millions (about), ``published``: zero-shot retrieval R@1 as its paper gives
    it ({benchmark: "image->text / text->image"}), ``source`` the paper and table."""

    name: str
    family: str
    params: int
    license: str
    languages: str = "English"
    published: tuple[tuple[str, str], ...] = ()
    source: str = ""


KNOWN = (
    KnownCheckpoint("openai/clip-vit-base-patch32", "clip", 151, "MIT"),
    KnownCheckpoint("openai/clip-vit-base-patch16", "clip", 150, "MIT"),
    KnownCheckpoint("openai/clip-vit-large-patch14", "clip", 428, "MIT"),
    KnownCheckpoint("openai/clip-vit-large-patch14-336", "clip", 428, "MIT",
                    published=(("Flickr30k 1k test", "88.0 / 68.7"), ("MSCOCO 5k test", "58.4 / 37.8")),
                    source=CLIP_PAPER),
    KnownCheckpoint("google/siglip-base-patch16-224", "siglip", 203, "Apache-2.0"),
    KnownCheckpoint("google/siglip-so400m-patch14-384", "siglip", 878, "Apache-2.0"),
    KnownCheckpoint("google/siglip-base-patch16-256-multilingual", "siglip", 371, "Apache-2.0",
                    languages="multilingual"),
)


def known_table() -> list[str]:
    """The known checkpoints as ``reelsearch models`` prints them, one or two lines each."""
    width = max(len(k.name) for k in KNOWN)
    lines = []
    for k in KNOWN:
        lines.append(f"  hf:{k.name:<{width}}  {k.family:<6}  ~{k.params}M params  {k.license:<10}  {k.languages}")
        if k.published:
            numbers = "; ".join(f"{bench} R@1 {value}" for bench, value in k.published)
            lines.append(f"    published zero-shot (image->text / text->image): {numbers} ({k.source})")
    return lines
