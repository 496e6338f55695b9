"""Every reader on small crafted files in the original formats, and the error each malformed file raises."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from reelsearch.datasets import FORMATS, format_options, load_dataset, parse_data_spec
from reelsearch.datasets.lsmdc import movie_of, parse_stamp
from reelsearch.errors import DataFormatError, ReelsearchError


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def error_of(fmt: str, root: Path, **options) -> DataFormatError:
    with pytest.raises(DataFormatError) as exc:
        load_dataset(fmt, root, **options)
    return exc.value


def assert_names(err: DataFormatError, file_name: str, line: int | None, *words: str) -> None:
    msg = str(err)
    assert Path(err.path).name == file_name and file_name in msg, msg
    if line is not None:
        assert err.line == line and f"{file_name}:{line}:" in msg, msg
    for w in words:
        assert w in msg, msg


def second_line(path: Path, needle: str) -> int:
    """1-based line of the second line of ``path`` holding ``needle`` (computed independently of the reader)."""
    return [no for no, line in enumerate(path.read_text().splitlines(), 1) if needle in line][1]


# ---------------------------------------------------------------- Flickr (token format)


def flickr_root(tmp_path: Path, images=("a.jpg", "b.jpg", "c.jpg"), lists=None, tokens=None) -> Path:
    root = tmp_path / "f8k"
    for name in images:
        write(root / "images" / name, b"\xff\xd8jpeg")
    tokens = tokens or "".join(
        f"{im}#{n}\t{im[0]} caption {n} .\n" for im in ("a.jpg", "b.jpg", "c.jpg") for n in range(2)
    )
    write(root / "captions.txt", tokens)
    for split, names in (lists or {"train": ["a.jpg", "b.jpg"], "dev": ["c.jpg"]}).items():
        write(root / f"{split}.txt", "".join(f"{n}\n" for n in names))
    return root


def test_flickr_layout_and_any_split_name(tmp_path):
    root = flickr_root(tmp_path, lists={"train": ["a.jpg"], "dev": ["b.jpg"], "mini": ["c.jpg"]})
    ds = load_dataset("flickr8k", root)
    assert ds.splits() == ["train", "dev", "mini"]
    (a,) = ds.items("train")
    assert a.id == "a" and a.path == root / "images" / "a.jpg" and a.split == "train"
    assert a.captions == ["a caption 0 .", "a caption 1 ."]
    assert ds.info() == {"splits": {s: {"items": 1, "captions": 2} for s in ("train", "dev", "mini")}}


def test_flickr8k_original_file_names(tmp_path):
    root = tmp_path / "orig"
    for name in ("a.jpg", "b.jpg", "c.jpg"):
        write(root / "Flicker8k_Dataset" / name, b"x")
    text = root / "Flickr8k_text"
    write(text / "Flickr8k.token.txt", "a.jpg#0\tone\r\nb.jpg#0\ttwo\nc.jpg#0\tthree\nc.jpg#1\tfour\nzz.jpg.1#0\tx\n")
    write(text / "Flickr8k.lemma.token.txt", "a.jpg#0\tone\n")
    write(text / "CrowdFlowerAnnotations.txt", "a.jpg\tb.jpg#0\t1.0\t3\t0\n")
    write(text / "Flickr_8k.trainImages.txt", "a.jpg\n")
    write(text / "Flickr_8k.devImages.txt", "b.jpg\n")
    write(text / "Flickr_8k.testImages.txt", "c.jpg\n")
    ds = load_dataset("flickr8k", root)
    assert ds.splits() == ["train", "dev", "test"]
    assert [(i.id, i.captions, i.path.parent.name) for i in ds.items()] == [
        ("a", ["one"], "Flicker8k_Dataset"),
        ("b", ["two"], "Flicker8k_Dataset"),
        ("c", ["three", "four"], "Flicker8k_Dataset"),
    ]


def test_flickr30k_token_format(tmp_path):
    root = tmp_path / "f30k"
    write(root / "flickr30k-images" / "1.jpg", b"x")
    write(root / "results_20130124.token", "1.jpg#0\tA man .\n1.jpg#1\tA person .\n")
    write(root / "test.txt", "1.jpg\n")
    ds = load_dataset("flickr30k", root, protocol="official")
    assert ds.info() == {"splits": {"test": {"items": 1, "captions": 2}}}


@pytest.mark.parametrize(
    "tokens, line, words",
    [
        ("a.jpg#0\tok\na.jpg#1 no tab here\n", 2, ["<image>#<n>"]),
        ("a.jpg#0\tok\nb.jpg#0\tok\n\nb.jpg#0\tagain\n", 4, ["duplicate", "b.jpg#0", "line 2"]),
        ("a.jpg#0\tok\nb.jpg#0\t   \n", 2, ["empty caption"]),
        ("a.jpg\tno number\n", 1, ["<image>#<n>"]),
        ("a.jpg#0\tone\u2028line\x85still one\nb.jpg#0\t \n", 2, ["empty caption"]),
    ],
)
def test_flickr_bad_token_rows(tmp_path, tokens, line, words):
    root = flickr_root(tmp_path, tokens=tokens, lists={"train": ["a.jpg"]})
    assert_names(error_of("flickr8k", root), "captions.txt", line, *words)


def test_flickr_listed_image_missing_from_images(tmp_path):
    root = flickr_root(tmp_path, images=("a.jpg", "c.jpg"))
    assert_names(error_of("flickr8k", root), "train.txt", 2, "b.jpg", "not found")


def test_flickr_listed_image_without_captions(tmp_path):
    root = flickr_root(
        tmp_path, lists={"train": ["a.jpg"], "dev": ["c.jpg", "d.jpg"]}, images=("a.jpg", "c.jpg", "d.jpg")
    )
    assert_names(error_of("flickr8k", root), "dev.txt", 2, "d.jpg", "no captions")


def test_flickr_list_repeats_and_overlaps(tmp_path):
    root = flickr_root(tmp_path, lists={"train": ["a.jpg", "b.jpg", "a.jpg"]})
    assert_names(error_of("flickr8k", root), "train.txt", 3, "duplicate", "line 1")
    root = flickr_root(tmp_path / "2", lists={"dev": ["a.jpg"], "train": ["b.jpg", "a.jpg"]})
    err = error_of("flickr8k", root)
    assert err.line == 2 and "also in split list" in str(err)


# ---------------------------------------------------------------- Karpathy JSON


def karpathy(images: list[dict], dataset: str = "coco") -> str:
    return json.dumps({"images": images, "dataset": dataset}, indent=1)


def kimg(name: str, split: str, caps: list[str], filepath: str | None = None) -> dict:
    img = {"filename": name, "split": split, "sentences": [{"raw": c, "tokens": c.lower().split()} for c in caps]}
    if filepath:
        img["filepath"] = filepath
    return img


def test_karpathy_coco_splits_and_media(tmp_path):
    images = [
        kimg("COCO_val2014_000000000001.jpg", "test", ["A cat.", "A small cat ."], "val2014"),
        kimg("COCO_val2014_000000000002.jpg", "val", ["A dog."], "val2014"),
        kimg("COCO_train2014_000000000003.jpg", "train", ["A bus."], "train2014"),
        kimg("COCO_val2014_000000000004.jpg", "restval", ["A car."], "val2014"),
    ]
    images[2]["sentences"] = [{"tokens": ["a", "red", "bus"]}]  # no raw: the tokens are joined
    write(tmp_path / "dataset_coco.json", karpathy(images))
    write(tmp_path / "val2014" / "COCO_val2014_000000000001.jpg", b"x")
    ds = load_dataset("coco", tmp_path)
    assert ds.protocol == "karpathy" and ds.splits() == ["train", "restval", "val", "test"]
    by_id = {i.id: i for i in ds.items()}
    assert by_id["COCO_val2014_000000000001"].path == tmp_path / "val2014" / "COCO_val2014_000000000001.jpg"
    assert by_id["COCO_val2014_000000000001"].captions == ["A cat.", "A small cat ."]
    assert by_id["COCO_val2014_000000000002"].path is None
    assert by_id["COCO_train2014_000000000003"].captions == ["a red bus"]
    # the JSON file itself is also a valid root
    assert load_dataset("coco", tmp_path / "dataset_coco.json").info() == ds.info()


def test_karpathy_flickr30k_and_flickr8k(tmp_path):
    write(tmp_path / "dataset_flickr30k.json", karpathy([kimg("1.jpg", "train", ["x", "y"])], "flickr30k"))
    write(tmp_path / "flickr30k-images" / "1.jpg", b"x")
    (item,) = load_dataset("flickr30k", tmp_path).items()
    assert item.id == "1" and item.path.parent.name == "flickr30k-images" and item.captions == ["x", "y"]
    write(tmp_path / "dataset_flickr8k.json", karpathy([kimg("a.jpg", "test", ["z"])], "flickr8k"))
    ds = load_dataset("flickr8k", tmp_path, protocol="karpathy")
    assert ds.info() == {"splits": {"test": {"items": 1, "captions": 1}}}


def test_karpathy_errors(tmp_path):
    f = write(tmp_path / "dataset_coco.json", '{"images": [\n  {"filename": "a.jpg",\n  "split": }\n]}')
    assert_names(error_of("coco", tmp_path), "dataset_coco.json", 3, "bad JSON")
    write(f, karpathy([kimg("a.jpg", "train", ["x"]), kimg("b.jpg", "train", ["y"]), kimg("a.jpg", "test", ["z"])]))
    err = error_of("coco", tmp_path)
    assert_names(err, "dataset_coco.json", second_line(f, '"filename": "a.jpg"'))
    assert "duplicate image id a" in str(err) and "images[2]" in str(err)
    write(f, karpathy([kimg("a.jpg", "train", ["x"]), kimg("b.jpg", "train", ["y", "  "])]))
    err = error_of("coco", tmp_path)
    assert err.line is not None and "images[1] (b.jpg) sentences[1]: empty caption" in str(err)
    write(f, json.dumps({"annotations": []}))
    assert_names(error_of("coco", tmp_path), "dataset_coco.json", 1, "images")


# ---------------------------------------------------------------- COCO official captions_*.json


def coco_file(images: list[tuple[int, str]], anns: list[tuple[int, int, str]]) -> str:
    return json.dumps(
        {
            "info": {},
            "images": [{"id": i, "file_name": f, "width": 640, "height": 480} for i, f in images],
            "annotations": [{"image_id": i, "id": a, "caption": c} for i, a, c in anns],
        },
        indent=1,
    )


def test_coco_official_files(tmp_path):
    ann = tmp_path / "annotations"
    write(ann / "captions_train2014.json", coco_file([(9, "COCO_train2014_9.jpg")], [(9, 1, "A b."), (9, 2, "C d.")]))
    write(
        ann / "captions_val2014.json",
        coco_file([(5, "COCO_val2014_5.jpg"), (6, "x6.jpg")], [(6, 3, "E."), (5, 4, "F.")]),
    )
    write(tmp_path / "train2014" / "COCO_train2014_9.jpg", b"x")
    ds = load_dataset("coco", tmp_path)
    assert ds.protocol == "official" and ds.splits() == ["train", "val"]
    (tr,) = ds.items("train")
    assert tr.id == "COCO_train2014_9" and tr.captions == ["A b.", "C d."] and tr.meta == {"coco_id": 9}
    assert tr.path == tmp_path / "train2014" / "COCO_train2014_9.jpg"
    assert [(i.id, i.captions, i.path) for i in ds.items("val")] == [
        ("COCO_val2014_5", ["F."], None),
        ("x6", ["E."], None),
    ]


def test_coco_official_errors(tmp_path):
    f = tmp_path / "annotations" / "captions_val2014.json"
    write(f, coco_file([(1, "a.jpg")], [(1, 1, "ok"), (2, 2, "orphan caption")]))
    err = error_of("coco", tmp_path)
    lines = f.read_text().splitlines()
    assert_names(err, "captions_val2014.json", lines.index('   "caption": "orphan caption"') + 1, "unknown image_id 2")
    write(f, coco_file([(1, "a.jpg")], [(1, 1, "ok"), (1, 1, "again")]))
    assert "duplicate annotation id" in str(error_of("coco", tmp_path))
    write(f, coco_file([(1, "a.jpg")], [(1, 1, "ok"), (1, 2, "")]))
    err = error_of("coco", tmp_path)
    assert "annotations[1] (id 2): empty caption" in str(err) and err.line is not None
    with pytest.raises(ReelsearchError, match="official, karpathy"):
        load_dataset("coco", tmp_path, protocol="other")


# ---------------------------------------------------------------- MSR-VTT (crafted)


def msrvtt_json(videos: list[tuple[str, str]], captions: dict[str, list[str]], first_sen: int = 0) -> dict:
    sentences, sen = [], first_sen
    for vid, caps in captions.items():
        for c in caps:
            sentences.append({"caption": c, "video_id": vid, "sen_id": sen})
            sen += 1
    vids = [
        {"video_id": v, "split": s, "category": 1, "url": "u", "start time": 1.0, "end time": 2.0} for v, s in videos
    ]
    return {"info": {}, "videos": vids, "sentences": sentences}


def make_msrvtt(root: Path, zipped: bool = True) -> Path:
    trainval = msrvtt_json(
        [("video0", "train"), ("video1", "train"), ("video2", "validate")],
        {"video0": ["a", "b"], "video1": ["c", "d"], "video2": ["e", "f"]},
    )
    test = msrvtt_json([("video3", "test"), ("video4", "test")], {"video3": ["g", "h"], "video4": ["i", "j"]}, 6)
    if zipped:
        with zipfile.ZipFile(write(root / "train_val_annotation.zip", b""), "w") as zf:
            zf.writestr("readme.txt", "x")
            zf.writestr("train_val_videodatainfo.json", json.dumps(trainval))
        with zipfile.ZipFile(write(root / "test_videodatainfo.json.zip", b""), "w") as zf:
            zf.writestr("test_videodatainfo.json", json.dumps(test))
    else:
        write(root / "annotation" / "train_val_videodatainfo.json", json.dumps(trainval, indent=1))
        write(root / "annotation" / "test_videodatainfo.json", json.dumps(test, indent=1))
    s = root / "splits"
    write(s / "MSRVTT_train.9k.csv", "video_id\nvideo0\nvideo1\nvideo2\n")
    write(s / "MSRVTT_train.7k.csv", "video_id\nvideo0\nvideo1\n")
    write(
        s / "MSRVTT_JSFUSION_test.csv",
        'key,vid_key,video_id,sentence\nret0,msr3,video3,"h, again"\nret1,msr4,video4,i\n',
    )
    write(s / "train_list_miech.txt", "video0\nvideo2\n")
    write(s / "test_list_miech.txt", "video3\n")
    write(root / "videos" / "all" / "video1.mp4", b"x")
    write(root / "TestVideo" / "video3.mp4", b"x")
    return root


@pytest.mark.parametrize("zipped", [True, False])
def test_msrvtt_crafted_protocols(tmp_path, zipped):
    root = make_msrvtt(tmp_path, zipped)
    full = load_dataset("msrvtt", root)
    assert full.info()["splits"] == {
        "train": {"items": 2, "captions": 4},
        "val": {"items": 1, "captions": 2},
        "test": {"items": 2, "captions": 4},
    }
    paths = {i.id: i.path for i in full.items()}
    assert paths == {
        "video0": None,
        "video1": root / "videos/all/video1.mp4",
        "video2": None,
        "video3": root / "TestVideo/video3.mp4",
        "video4": None,
    }
    onek = load_dataset("msrvtt", root, protocol="1k-a")
    assert [(i.id, i.captions) for i in onek.items("test")] == [("video3", ["h, again"]), ("video4", ["i"])]
    assert [i.id for i in onek.items("train")] == ["video0", "video1", "video2"]
    assert [i.id for i in load_dataset("msrvtt", root, protocol="7k").items("train")] == ["video0", "video1"]
    miech = load_dataset("msrvtt", root, protocol="miech")
    assert [(i.id, i.captions) for i in miech.items()] == [
        ("video0", ["a", "b"]),
        ("video2", ["e", "f"]),
        ("video3", ["g", "h"]),
    ]


def test_msrvtt_errors(tmp_path):
    root = make_msrvtt(tmp_path)
    write(root / "splits" / "MSRVTT_train.7k.csv", "video_id\nvideo0\nvideo77\n")
    assert_names(error_of("msrvtt", root, protocol="7k"), "MSRVTT_train.7k.csv", 3, "unknown video 'video77'")
    write(root / "splits" / "test_list_miech.txt", "video3\nvideo0\n")
    assert_names(error_of("msrvtt", root, protocol="miech"), "test_list_miech.txt", 2, "also listed in")
    write(root / "splits" / "MSRVTT_JSFUSION_test.csv", "key,vid_key,video_id,sentence\nret0,msr3,video3,\n")
    assert_names(error_of("msrvtt", root, protocol="1k-a"), "MSRVTT_JSFUSION_test.csv", 2, "empty caption")
    (root / "splits" / "MSRVTT_train.9k.csv").unlink()
    with pytest.raises(DataFormatError, match="MSRVTT_train.9k.csv"):
        load_dataset("msrvtt", root, protocol="9k")
    with zipfile.ZipFile(root / "test_videodatainfo.json.zip", "w") as zf:
        zf.writestr("test_videodatainfo.json", '{"videos": [\n{"video_id": "video3",}\n]}')
    err = error_of("msrvtt", root)
    assert err.path.endswith("test_videodatainfo.json.zip!test_videodatainfo.json") and err.line == 2
    (root / "test_videodatainfo.json.zip").unlink()
    with pytest.raises(DataFormatError, match="test_videodatainfo.json"):
        load_dataset("msrvtt", root)


def test_msrvtt_bad_caption_names_json_line(tmp_path):
    root = make_msrvtt(tmp_path, zipped=False)
    f = root / "annotation" / "test_videodatainfo.json"
    data = json.loads(f.read_text())
    data["sentences"][1]["caption"] = "  "
    write(f, json.dumps(data, indent=1))
    err = error_of("msrvtt", root)
    assert_names(err, "test_videodatainfo.json", f.read_text().splitlines().index('   "caption": "  ",') + 1)
    assert "sentences[1] (sen_id 7): empty caption" in str(err)


# ---------------------------------------------------------------- MSVD (crafted)


def make_msvd(root: Path, captions: str | None = None) -> Path:
    caps = {"v1": [f"one {i}" for i in range(8)], "v2": ["two a", "two b"], "v3": ["three"]}
    write(root / "captions_msvd.json", captions or json.dumps(caps, indent=1))
    write(root / "train_list.txt", "v1\nv2\n")
    write(root / "test_list.txt", "v3\n")
    write(root / "videos" / "v3.avi", b"x")
    return root


def test_msvd_crafted(tmp_path):
    root = make_msvd(tmp_path)
    ds = load_dataset("msvd", root)
    assert ds.splits() == ["train", "test"] and ds.info()["splits"]["train"] == {"items": 2, "captions": 10}
    assert [i.path for i in ds.items()] == [None, None, root / "videos" / "v3.avi"]
    five = load_dataset("msvd", root, protocol="5", seed=7)
    v1, v2, v3 = five.items()
    assert len(v1.captions) == 5 and v1.captions == sorted(v1.captions, key=lambda c: int(c.split()[1]))
    assert v2.captions == ["two a", "two b"] and v3.captions == ["three"]
    assert load_dataset("msvd", root, protocol="5", seed=7).items()[0].captions == v1.captions
    draws = {tuple(load_dataset("msvd", root, protocol="5", seed=s).items()[0].captions) for s in range(6)}
    assert len(draws) > 1
    with pytest.raises(ReelsearchError, match="all, 5"):
        load_dataset("msvd", root, protocol="five")


def test_msvd_errors(tmp_path):
    root = make_msvd(tmp_path, '{\n "v1": ["a"],\n "v2": ["b"],\n "v1": ["c"],\n "v3": ["d"]\n}')
    assert_names(error_of("msvd", root), "captions_msvd.json", 4, "duplicate key 'v1'")
    root = make_msvd(tmp_path / "2", '{\n "v1": ["a"],\n "v2": ["b", ""],\n "v3": ["d"]\n}')
    assert_names(error_of("msvd", root), "captions_msvd.json", 3, "v2: empty caption")
    root = make_msvd(tmp_path / "3")
    write(root / "val_list.txt", "v9\n")
    assert_names(error_of("msvd", root), "val_list.txt", 1, "unknown clip 'v9'")


# ---------------------------------------------------------------- LSMDC (crafted)

ROW = "{clip}\t{a}\t{b}\t{c}\t{d}\t{s}\n"


def lsmdc_row(clip: str, s: str = "SOMEONE walks.", stamps=("00.00.51.926", "00.00.54.557")) -> str:
    return ROW.format(clip=clip, a=stamps[0], b=stamps[1], c=stamps[0], d=stamps[1], s=s)


def test_lsmdc_crafted(tmp_path):
    c1 = "0001_American_Beauty_00.00.51.926-00.00.54.557"
    c2 = "0001_American_Beauty_00.01.00.000-00.01.02.500"
    c3 = "1010_TITANIC_01.02.27.034-01.02.29.034"
    write(tmp_path / "LSMDC16_annos_training.csv", lsmdc_row(c1) + lsmdc_row(c2, "He sits.") + lsmdc_row(c1, "Again."))
    write(tmp_path / "LSMDC16_annos_val.csv", lsmdc_row(c3, "A ship.", ("01.02.27.034", "01.02.29.034")))
    write(tmp_path / "LSMDC16_annos_test.csv", lsmdc_row("0002_X_00.00.01.000-00.00.03.000", "Y."))
    write(
        tmp_path / "LSMDC16_annos_blindtest.csv",
        "0003_Z_00.00.01.000-00.00.03.000\t" + "00.00.01.000\t" * 3 + "00.00.03.000\n",
    )
    write(tmp_path / "clips" / "0001_American_Beauty" / f"{c1}.avi", b"x")
    write(tmp_path / "movies" / "1010_TITANIC.mp4", b"x")
    ds = load_dataset("lsmdc", tmp_path)
    assert ds.splits() == ["train", "val", "test", "blindtest"]
    assert ds.info()["splits"]["train"] == {"items": 2, "captions": 3}
    a, b = ds.items("train")
    assert a.id == c1 and a.captions == ["SOMEONE walks.", "Again."] and a.path.name == f"{c1}.avi"
    assert a.start is None and a.meta["movie"] == "0001_American_Beauty"
    assert b.path is None and b.captions == ["He sits."]
    (v,) = ds.items("val")
    assert v.path == tmp_path / "movies" / "1010_TITANIC.mp4"
    assert v.start == pytest.approx(3747.034) and v.end == pytest.approx(3749.034)
    (blind,) = ds.items("blindtest")
    assert blind.captions == []


def test_lsmdc_helpers():
    assert parse_stamp("01.02.27.034") == pytest.approx(3600 + 120 + 27.034)
    assert parse_stamp("1:02:27") is None
    assert movie_of("0027_The_Big_Lebowski_00.02.47.128-00.02.52.183") == "0027_The_Big_Lebowski"


@pytest.mark.parametrize(
    "bad, words",
    [
        ("0001_A_00.00.01.000-00.00.02.000\t00.00.01.000\tSentence only\n", ["6 tab-separated columns"]),
        (ROW.format(clip="0001_A", a="00.00.01", b="00.00.02.000", c="x", d="y", s="S."), ["'00.00.01'"]),
        (
            ROW.format(clip="0001_A", a="00.00.01.000", b="00.00.02.000", c="00.00.01.000", d="00.00.02.000", s=" "),
            ["empty caption"],
        ),
    ],
)
def test_lsmdc_bad_rows(tmp_path, bad, words):
    write(tmp_path / "LSMDC16_annos_val.csv", lsmdc_row("0001_A_00.00.01.000-00.00.02.000") + bad)
    assert_names(error_of("lsmdc", tmp_path), "LSMDC16_annos_val.csv", 2, *words)


# ---------------------------------------------------------------- JSONL manifest


def test_manifest(tmp_path):
    write(tmp_path / "media" / "a.mp4", b"x")
    absolute = write(tmp_path / "elsewhere" / "b.jpg", b"x")
    lines = [
        {"id": "a", "path": "media/a.mp4", "captions": ["A dog  runs."], "split": "train", "source": "cam1"},
        {"id": "b", "path": str(absolute), "captions": []},
        {"id": 7, "path": None, "features_key": "feat7", "start": 1.5, "end": 4},
    ]
    f = write(tmp_path / "manifest.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n\n")
    ds = load_dataset("manifest", tmp_path)
    assert ds.splits() == ["train", "all"]
    a, b, c = ds.items()
    assert a.path == tmp_path / "media" / "a.mp4" and a.captions == ["A dog runs."] and a.meta == {"source": "cam1"}
    assert b.path == absolute and b.captions == [] and b.split == "all"
    assert c.id == "7" and c.path is None and c.key == "feat7" and (c.start, c.end) == (1.5, 4.0)
    assert load_dataset("manifest", f).info() == {
        "splits": {"train": {"items": 1, "captions": 1}, "all": {"items": 2, "captions": 0}}
    }


@pytest.mark.parametrize(
    "line, words",
    [
        ('{"id": "b", "path": "missing.mp4"}', ["b: media file does not exist", "missing.mp4"]),
        ('{"id": "b", "path": "a.mp4",', ["bad JSON"]),
        ('{"id": "a", "path": "a.mp4"}', ["duplicate id 'a' (first on line 1)"]),
        ('{"id": "b", "path": "a.mp4", "captions": ["ok", " "]}', ["captions[1]: empty caption"]),
        ('{"id": "b"}', ['missing "path"']),
        ('["b", "a.mp4"]', ["expected a JSON object"]),
        ('{"id": "b", "path": "a.mp4", "start": 3, "end": 1}', ["end (1.0) must be after start"]),
    ],
)
def test_manifest_errors(tmp_path, line, words):
    write(tmp_path / "a.mp4", b"x")
    write(tmp_path / "my.jsonl", '{"id": "a", "path": "a.mp4"}\n\n' + line + "\n")
    assert_names(error_of("manifest", tmp_path / "my.jsonl"), "my.jsonl", 3, *words)


# ---------------------------------------------------------------- entry points


def test_load_dataset_validation(tmp_path):
    assert list(FORMATS) == ["flickr8k", "flickr30k", "coco", "msrvtt", "msvd", "lsmdc", "manifest"]
    assert format_options("msvd") == ["protocol", "seed"] and format_options("lsmdc") == []
    with pytest.raises(
        ReelsearchError, match="valid formats: flickr8k, flickr30k, coco, msrvtt, msvd, lsmdc, manifest"
    ):
        load_dataset("kinetics", tmp_path)
    with pytest.raises(ReelsearchError, match="takes no option seed"):
        load_dataset("lsmdc", tmp_path, seed=1)
    with pytest.raises(ReelsearchError, match="does not exist"):
        load_dataset("msvd", tmp_path / "nope")
    with pytest.raises(DataFormatError, match="no LSMDC16 annotation files"):
        load_dataset("lsmdc", tmp_path)


def test_parse_data_spec():
    assert parse_data_spec("msvd:/data/msvd:test") == ("msvd", Path("/data/msvd"), "test")
    assert parse_data_spec("MSRVTT:data/sub/msrvtt") == ("msrvtt", Path("data/sub/msrvtt"), None)
    assert parse_data_spec("manifest:./m.jsonl:") == ("manifest", Path("m.jsonl"), None)
    for bad in ("msvd", "msvd:", "nope:/x", ":/x", "msvd::test"):
        with pytest.raises(ReelsearchError):
            parse_data_spec(bad)
