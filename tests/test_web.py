"""End to end in a real browser: headless Chromium (Debian's /usr/bin/chromium, driven by Playwright) against uvicorn
serving a real index: type a query, see result cards, click one, the video plays from the best moment.

Needs `apt-get install -y chromium` and the `playwright` Python package (tests/browser.py). Skips with the reason
when either is absent.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

from browser import chromium_page
from reelsearch.datasets.long_videos import LongVideo, Shot, write_video
from reelsearch.search import Searcher
from reelsearch.service import create_app
from test_search_support import ServerThread, make_media, small_model

DOCS_SCREENSHOT = Path(__file__).resolve().parents[1] / "docs" / "img" / "search-page.png"

torch.set_num_threads(1)


def shapes_slideshow(folder: Path, images: Path) -> Path:
    """An 18 s H.264 slideshow of three drawn pictures (stripes, a checkerboard, dots), 6 s each: three segments."""
    images.mkdir(parents=True, exist_ok=True)
    h, w = 120, 160
    stripes = np.zeros((h, w, 3), np.uint8)
    stripes[..., 0] = 200
    stripes[(np.arange(h) % 16) < 4] = 255
    board = (np.indices((h, w)).sum(0) // 20 % 2 * 255).astype(np.uint8)
    dots = Image.new("RGB", (w, h), (20, 20, 90))
    for i in range(6):
        ImageDraw.Draw(dots).ellipse((10 + 22 * i, 20 + 10 * i, 40 + 22 * i, 50 + 10 * i), fill=(250, 240, 60))
    Image.fromarray(stripes).save(images / "stripes.jpg")
    Image.fromarray(np.stack([board * 0, board, board // 2], -1)).save(images / "board.jpg")
    dots.save(images / "dots.jpg")
    video = LongVideo("shapes", tuple(Shot("photo", p, 6.0) for p in ("stripes", "board", "dots")), (w, h), 10)
    return write_video(video, folder, images, threads=1)


def test_search_page_in_headless_chromium(tmp_path):
    paths = [*make_media(tmp_path / "media"), shapes_slideshow(tmp_path / "media", tmp_path / "pictures")]
    with Searcher(tmp_path / "index", small_model("moe")) as searcher:
        searcher.index([tmp_path / "media"], progress=False, cues=())
        want = searcher.search("a red car drives on the road", 20, frames=False)
        with ServerThread(create_app(searcher)) as server, \
                chromium_page(tmp_path / "profile", viewport={"width": 1280, "height": 860}) as (page, errors):
            requests: list[str] = []
            page.on("request", lambda req: requests.append(req.url))
            page.goto(server.url + "/", wait_until="networkidle")
            page.fill("#q", "a red car drives on the road")
            page.click("#go")
            page.wait_for_selector(".card", timeout=20_000)
            cards = page.locator(".card")
            assert cards.count() == len(paths) == len(want)
            ids = [cards.nth(i).get_attribute("data-id") for i in range(cards.count())]
            assert ids == [r.id for r in want]  # the API's order
            first = cards.nth(0)
            # plain words on the card (a mixture's internal expert names and the raw score only under "numbers")
            assert "matched: picture" in first.inner_text() and f"{want[0].score:.4f}" not in first.inner_text()
            assert not any(name in first.locator(".score").inner_text() for name in want[0].experts)
            first.locator(".numbers summary").click()
            numbers = first.locator(".numbers").inner_text()
            assert f"{want[0].score:.4f}" in numbers and "ranking score" in numbers
            assert all(f"picture expert {name}" in numbers for name in want[0].experts)
            strips = page.locator(".card .strip")  # a frame strip per video; a photo has one frame, no strip
            assert strips.count() == sum(p.suffix == ".mp4" for p in paths)
            page.wait_for_function(  # every thumbnail of the grid loaded from the service
                "() => [...document.querySelectorAll('.thumb img')].every(i => i.complete && i.naturalWidth > 0)")

            # click a card: the player opens and starts at the result's best moment
            clip = next(i for i, r in enumerate(want) if r.path.endswith("red-green-blue.mp4"))
            moment = want[clip].moment
            cards.nth(clip).click()
            _wait_started(page, moment)
            t = page.evaluate("document.getElementById('video').currentTime")
            assert moment - 0.05 <= t <= moment + 1.0, (t, moment)

            # click a frame of its similarity strip: playback jumps to that frame's time
            frame = cards.nth(clip).locator(".strip .frame").nth(2)  # one frame a second: 0, 1, 2 s
            target = float(frame.get_attribute("data-t"))
            assert target == pytest.approx(2.0, abs=0.06)
            frame.click()
            _wait_started(page, target)
            t = page.evaluate("document.getElementById('video').currentTime")
            assert target - 0.05 <= t <= target + 1.0, (t, target)

            # a video's best moments on a timeline under its thumbnail, as long as the video; a click plays from one
            slides = next(i for i, r in enumerate(want) if r.path.endswith("shapes.mp4"))
            moments = want[slides].moments
            bars = cards.nth(slides).locator(".timeline .moment")
            assert bars.count() == len(moments) >= 2
            assert [float(bars.nth(i).get_attribute("data-start")) for i in range(bars.count())] == \
                [m.start for m in moments]
            assert "best" in bars.nth(0).get_attribute("class")
            box, line = bars.nth(1).bounding_box(), cards.nth(slides).locator(".timeline").bounding_box()
            assert box["x"] - line["x"] == pytest.approx(line["width"] * moments[1].start / want[slides].duration,
                                                         abs=2)
            bars.nth(1).click()
            _wait_started(page, moments[1].start)
            shot = tmp_path / "search-page.png"
            page.evaluate("document.getElementById('video').pause()")
            page.screenshot(path=str(shot), full_page=True)

            # an image result is shown as a still (keyboard: focus its card and press Enter)
            image = next(i for i, r in enumerate(want) if r.path.endswith(".png"))
            cards.nth(image).focus()
            page.keyboard.press("Enter")
            page.wait_for_function("() => { const s = document.getElementById('still');"
                                   " return !s.hidden && s.complete && s.naturalWidth === 80; }")
            assert page.locator("#video").is_hidden()

            # "more like this" on the clip's card: the videos like it, in the API's order, the clip left out
            liked = want[clip].id
            like = searcher.search(None, 20, frames=False, like=liked)
            cards.nth(clip).locator(".more-like").click()
            page.wait_for_function("(n) => document.getElementById('status').textContent.includes('videos like')"
                                   " && document.querySelectorAll('.card').length === n", arg=len(like))
            ids = [cards.nth(i).get_attribute("data-id") for i in range(cards.count())]
            assert ids == [r.id for r in like] and liked not in ids and len(ids) == len(paths) - 1
            assert page.evaluate("location.search") == f"?like={liked}&k=20"

            # filters in the box: only what passes them, in the API's order, and how the box was read; a malformed
            # filter is the API's message, inline
            boxed = searcher.search("a red car drives on the road kind:image", 20, frames=False)
            page.fill("#q", "a red car drives on the road kind:image")
            page.click("#go")
            page.wait_for_function("() => !document.getElementById('filtered').hidden")
            ids = [cards.nth(i).get_attribute("data-id") for i in range(cards.count())]
            assert ids == [r.id for r in boxed] and len(ids) == sum(p.suffix in (".png", ".jpg") for p in paths)
            assert page.locator("#filtered").inner_text() == "filtered: kind image"
            page.fill("#q", "a red car after:2023-13")
            page.click("#go")
            page.wait_for_function("() => document.getElementById('status').textContent.includes('not a date')")
            assert page.locator("#status").inner_text().startswith("error: after:2023-13: not a date")
            assert page.locator("#filtered").is_hidden()

            # the API docs render from local files too
            page.goto(server.url + "/docs", wait_until="networkidle")
            page.wait_for_selector("#operations-default-search_search_get", timeout=20_000)
            assert not errors, errors
            outside = [u for u in requests if not u.startswith((server.url, "data:", "blob:"))]
            assert not outside, outside  # no CDN, nothing outside the service
    assert shot.stat().st_size > 10_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("REELSEARCH_UPDATE_SCREENSHOT"):  # refresh docs/img/search-page.png on request only
        DOCS_SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, DOCS_SCREENSHOT)


def _wait_started(page, start: float) -> None:
    page.wait_for_function(
        "(s) => { const v = document.getElementById('video');"
        " return Math.abs(parseFloat(v.dataset.start) - s) < 1e-6 && v.readyState >= 2 && !v.seeking"
        " && v.currentTime >= s - 0.05; }", arg=start, timeout=20_000)


def test_page_sends_the_api_key_and_shows_any_file_name(tmp_path):
    """A server with an API key and a clip whose name is not UTF-8 (with quotes, spaces and a newline): the page
    asks for the key, then searches (X-API-Key), loads thumbnails and plays the clip (the key's cookie), and shows
    the name's display form."""
    from test_search_support import CLIPS, write_clip

    key = "page-test-key-0123456789"
    raw = b'a "red" clip \xff\n.mp4'
    (tmp_path / "media").mkdir()
    write_clip(Path(os.fsdecode(bytes(tmp_path / "media") + b"/" + raw)), CLIPS["red-green-blue.mp4"])
    with Searcher(tmp_path / "index", small_model("cosine")) as searcher:
        searcher.index([tmp_path / "media"], progress=False, cues=())
        with ServerThread(create_app(searcher, api_key=key)) as server, \
                chromium_page(tmp_path / "profile") as (page, errors):
            statuses: dict[str, int] = {}
            page.on("response", lambda r: statuses.__setitem__(r.url.split("?")[0], r.status))
            page.goto(server.url + "/?q=a+red+car", wait_until="networkidle")
            page.wait_for_selector("#key-form:not([hidden])", timeout=20_000)  # 401: the page asks
            assert statuses[server.url + "/health"] == 401
            page.fill("#key", key)
            page.click("#use-key")
            page.wait_for_selector(".card", timeout=20_000)
            assert page.locator(".card .name").text_content() == raw.decode("utf-8", "replace")
            page.wait_for_function("() => [...document.querySelectorAll('.thumb img')]"
                                   ".every(i => i.complete && i.naturalWidth > 0)")
            page.locator(".card").nth(0).click()
            _wait_started(page, float(page.locator(".card").nth(0).get_attribute("data-moment")))
            media = [u for u in statuses if u.endswith("/media")]
            assert media and all(statuses[u] in (200, 206) for u in media)
            assert not errors, errors
