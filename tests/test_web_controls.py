"""The page's controls in a real browser (headless Chromium, tests/browser.py) against uvicorn over a small index of
dated files in folders: filter controls write the box's own syntax, results sorted by date, dates on the cards, a
photo shown as a photo, thumbnails at the card's size, every moment of a video on its timeline, search by an uploaded
or dropped file, and browsing the catalog folder by folder. Skips with the reason when Chromium or Playwright is
absent."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import httpx
import numpy as np
import torch
from PIL import Image

from browser import chromium_page
from reelsearch.datasets.long_videos import LongVideo, Shot, write_video
from reelsearch.search import Searcher
from reelsearch.service import create_app
from test_search_support import CAPTIONS, ServerThread, dated_library, small_model, taken

torch.set_num_threads(1)
QUERY = CAPTIONS[0]


def five_shots(folder: Path, pictures: Path) -> Path:
    """A 20 s slideshow of five flat pictures far apart in colour, 4 s each: five segments."""
    pictures.mkdir(parents=True, exist_ok=True)
    colours = [(230, 20, 20), (20, 200, 40), (20, 40, 220), (240, 240, 240), (10, 10, 10)]
    for i, colour in enumerate(colours):
        noise = np.random.default_rng(i).normal(0, 6, (120, 160, 3))
        Image.fromarray(np.clip(np.array(colour) + noise, 0, 255).astype(np.uint8)).save(pictures / f"p{i}.jpg")
    video = LongVideo("five", tuple(Shot("photo", f"p{i}", 4.0) for i in range(5)), (160, 120), 10)
    path = write_video(video, folder, pictures, threads=1)
    os.utime(path, (taken(2022, 6, 1), taken(2022, 6, 1)))
    return path


def _ids(page) -> list[str]:
    return page.eval_on_selector_all(".card", "cs => cs.map(c => c.dataset.id)")


def _search_done(page, needle: str) -> None:
    page.wait_for_function("(s) => document.getElementById('status').textContent.includes(s)", arg=needle,
                           timeout=20_000)


def _day(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d")


def test_the_page_controls_in_headless_chromium(tmp_path):
    media = tmp_path / "media"
    paths = [*dated_library(media), five_shots(media / "holiday", tmp_path / "pictures")]
    with Searcher(tmp_path / "index", small_model("moe")) as searcher:
        searcher.index([media], progress=False, cues=())
        ids = {p: searcher.catalog.find(p) for p in paths}
        with ServerThread(create_app(searcher)) as server, \
                chromium_page(tmp_path / "profile", viewport={"width": 1280, "height": 900}) as (page, errors):
            requests: list[str] = []
            page.on("request", lambda req: requests.append(req.url))
            page.goto(server.url + "/", wait_until="networkidle")
            folders = page.eval_on_selector_all("#f-folder option", "os => os.map(o => o.value)")
            assert folders == ["", *(str(media / f) for f in ("My Trips", "holiday", "work", "work/old"))]

            # filter controls write the box's syntax, and the search runs on it
            page.fill("#q", QUERY)
            page.select_option("#f-kind", "image")
            assert page.input_value("#q") == f"{QUERY} kind:image"
            page.wait_for_function("() => document.getElementById('filtered').textContent === 'filtered: kind image'")
            assert _ids(page) == [r.id for r in searcher.search(f"{QUERY} kind:image", 20)]
            page.select_option("#f-folder", str(media / "My Trips"))
            box = f'{QUERY} kind:image folder:"{media / "My Trips"}"'
            assert page.input_value("#q") == box
            page.wait_for_function("() => document.querySelectorAll('.card').length === 1")
            assert _ids(page) == [ids[paths[4]]] == [r.id for r in searcher.search(box, 20)]
            page.select_option("#f-folder", "")
            page.select_option("#f-kind", "")
            page.fill("#f-after", "2021-01-01")
            page.check("#f-speech")
            assert page.input_value("#q") == f"{QUERY} after:2021-01-01 has:speech"
            _search_done(page, "no video passes the filters")  # nothing is said in these files
            page.uncheck("#f-speech")
            page.fill("#f-before", "2023-08-01")
            assert page.input_value("#q") == f"{QUERY} after:2021-01-01 before:2023-08-01"
            page.wait_for_function("() => document.getElementById('filtered').textContent"
                                   " === 'filtered: after 2021-01-01, before 2023-08-01'")
            assert _ids(page) == [r.id for r in searcher.search(f"{QUERY} after:2021-01-01 before:2023-08-01", 20)]
            # a box typed by hand: the controls show what the server read
            page.fill("#q", f"{QUERY} kind:video before:2022 has:text")
            page.click("#go")
            _search_done(page, "no video passes the filters")
            assert page.input_value("#f-kind") == "video" and page.input_value("#f-before") == "2022-01-01"
            assert page.input_value("#f-after") == "" and page.is_checked("#f-text")
            assert not page.is_checked("#f-speech")

            # sort by date: the same results, newest first, each card with its date
            page.fill("#q", QUERY)
            page.click("#go")
            _search_done(page, "results for")
            page.select_option("#sort", "date")
            want = searcher.search(QUERY, 20, sort="date")
            page.wait_for_function("() => location.search.includes('sort=date')")
            page.wait_for_function("(n) => document.querySelectorAll('.card').length === n", arg=len(want))
            assert _ids(page) == [r.id for r in want] and len(want) == len(paths)
            assert page.eval_on_selector_all(".card .taken", "ts => ts.map(t => t.textContent)") == \
                [_day(r.taken_at) for r in want]
            assert [r.taken_at for r in want] == sorted((r.taken_at for r in want), reverse=True)
            page.select_option("#sort", "relevance")
            page.wait_for_function("() => !location.search.includes('sort=')")
            assert _ids(page) == [r.id for r in searcher.search(QUERY, 20)]

            # a photo is a photo: no time badge, no frame strip, no timeline, no moment in its text
            photo = page.locator(f".card[data-id='{ids[paths[1]]}']")
            assert photo.locator(".badge, .strip, .timeline").count() == 0
            assert "0:00" not in photo.inner_text() and _day(taken(2023, 8, 2)) in photo.inner_text()
            clip = page.locator(f".card[data-id='{ids[paths[0]]}']")
            assert clip.locator(".badge").count() == 1 and clip.locator(".strip").count() == 1

            # thumbnails at the card's size: the 640x360 clip's is made from the file, wider than the stored 96 px
            page.wait_for_function("() => [...document.querySelectorAll('.thumb img')]"
                                   ".every(i => i.complete && i.naturalWidth > 0)")
            column = page.evaluate("parseFloat(getComputedStyle(document.getElementById('results'))"
                                   ".gridTemplateColumns)")
            img = clip.locator(".thumb img")
            assert f"size={int(np.ceil(column))}" in img.get_attribute("src")
            assert img.evaluate("i => i.naturalWidth") >= min(column, 640) > 96

            # every moment: the timeline shows the best three; the button shows them all; a click plays from one
            slides = page.locator(f".card[data-id='{ids[paths[5]]}']")
            moments = next(r for r in searcher.search(QUERY, 20, moments=100) if r.id == ids[paths[5]]).moments
            n = len(moments)
            assert n > 3  # segments of the untrained test model's features: 4 or 5 of the five shots
            bars = slides.locator(".timeline .moment")
            assert bars.count() == n and slides.locator(".timeline .moment:visible").count() == 3
            slides.locator(".every").click()
            assert slides.locator(".timeline .moment:visible").count() == n
            assert [float(bars.nth(i).get_attribute("data-start")) for i in range(n)] == [m.start for m in moments]
            bars.nth(n - 1).click()
            page.wait_for_function(
                "(s) => { const v = document.getElementById('video'); return Math.abs(parseFloat(v.dataset.start) - s)"
                " < 1e-6 && v.readyState >= 2 && !v.seeking && v.currentTime >= s - 0.05; }", arg=moments[-1].start,
                timeout=20_000)

            # search by a file: chosen in the file input, then dropped on the page
            page.fill("#q", "")
            page.set_input_files("#upload", str(paths[3]))
            _search_done(page, "files like white-black.mp4")
            assert _ids(page) == [r.id for r in searcher.search(None, 20, like=str(paths[3]))]
            assert page.evaluate("location.search") == ""
            page.evaluate("""async (url) => {
                const blob = await (await fetch(url)).blob();
                const drop = new DataTransfer();
                drop.items.add(new File([blob], 'dropped.png', { type: 'image/png' }));
                document.body.dispatchEvent(new DragEvent('dragenter', { dataTransfer: drop, bubbles: true }));
                window.overlayShown = !document.getElementById('drop').hidden;
                document.body.dispatchEvent(new DragEvent('drop', { dataTransfer: drop, bubbles: true,
                                                                    cancelable: true }));
            }""", f"/videos/{ids[paths[4]]}/media")
            _search_done(page, "files like dropped.png")
            assert page.evaluate("window.overlayShown") and page.locator("#drop").is_hidden()
            want = searcher.search(None, 20, like=str(paths[4]))
            assert _ids(page) == [r.id for r in want] and ids[paths[4]] not in _ids(page)  # itself left out

            # browse: the catalog newest first, a folder of it, by name; the URL keeps the view
            page.click("#browse")
            listing = httpx.get(server.url + "/videos", params={"limit": 48}).json()
            page.wait_for_function("(n) => document.querySelectorAll('.card.library').length === n",
                                   arg=listing["total"])
            assert _ids(page) == [v["id"] for v in listing["videos"]] and page.locator("#browse-bar").is_visible()
            assert _ids(page)[0] == ids[paths[4]]  # stage.png, taken in 2024
            page.select_option("#b-folder", str(media / "holiday"))
            page.wait_for_function("() => document.querySelectorAll('.card.library').length === 3")
            page.select_option("#b-sort", "name")
            page.wait_for_function("() => location.search.includes('sort=name')")
            assert page.eval_on_selector_all(".card .name", "ns => ns.map(n => n.textContent)") == \
                ["Beach photo.jpg", "five.mp4", "red-green-blue.mp4"]
            page.reload(wait_until="networkidle")
            page.wait_for_function("() => document.querySelectorAll('.card.library').length === 3")
            assert page.input_value("#b-folder") == str(media / "holiday") and page.input_value("#b-sort") == "name"
            page.locator(".card.library").nth(0).click()  # the photo: a still
            page.wait_for_function("() => { const s = document.getElementById('still');"
                                   " return !s.hidden && s.complete && s.naturalWidth === 800; }")
            assert not errors, errors
            outside = [u for u in requests if not u.startswith((server.url, "data:", "blob:"))]
            assert not outside, outside
