"""scripts/check's freshness of generated docs (scripts/generated.py): the architecture
picture against its Graphviz source, and each generated section of a page and its plots
(docs/benchmarks.md's, docs/cold-start.md's, docs/sync.md's, docs/operations.md's)
against its committed run's JSON; by content, whatever the files' times."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from scripts.benchmarks import cold_start, page, types_paging
from scripts.generated import PAGES, stale, stale_pictures

PICTURE = ("architecture.dot", "architecture.png", "architecture.png.sha256")


def _docs(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in (*PICTURE, *(generated.page for generated in PAGES)):
        shutil.copy2(page.DOCS / name, docs / name)
    shutil.copytree(page.DOCS / page.FOLDER, docs / page.FOLDER)
    return docs


def test_the_committed_docs_are_fresh_whatever_their_files_times(tmp_path: Path) -> None:
    docs = _docs(tmp_path)
    # A clone's checkout gives every file its own time: the picture older than its source.
    os.utime(docs / "architecture.png", (0, 0))
    os.utime(docs / page.FOLDER / "operations.png", (0, 0))
    assert stale(docs) == []


def test_the_picture_is_stale_when_its_source_or_itself_changes(tmp_path: Path) -> None:
    docs = _docs(tmp_path)
    source, picture = docs / "architecture.dot", docs / "architecture.png"
    committed = source.read_text()
    source.write_text(committed.replace("Lambda: api", "Lambda: graphql"))
    expected = f"{picture} was not drawn from {source} as it is: run scripts/draw"
    assert stale_pictures(docs) == [expected]
    source.write_text(committed)
    picture.write_bytes(picture.read_bytes() + b"\0")  # edited by hand
    assert len(stale_pictures(docs)) == 1
    picture.unlink()
    assert "missing" in stale_pictures(docs)[0]


def test_the_benchmarks_page_is_stale_when_its_run_or_its_section_changes(
    tmp_path: Path,
) -> None:
    docs = _docs(tmp_path)
    saved_path = docs / page.FOLDER / page.JSON_NAME
    committed = saved_path.read_text()
    saved = json.loads(committed)
    saved["rows"][0]["p50_ms"] *= 2  # a new run's JSON, the page and plots not redrawn
    saved_path.write_text(json.dumps(saved, indent=2) + "\n")
    problems = page.stale(docs)
    assert len(problems) == 2, problems
    assert "generated section" in problems[0] and "plots" in problems[1]

    saved_path.write_text(committed)
    text = (docs / page.PAGE).read_text()
    figure = f"| {saved['rows'][0]['raw_p50_ms']:.2f} |"
    assert figure in text
    (docs / page.PAGE).write_text(text.replace(figure, "| 1.00 |", 1))  # typed by hand
    (problem,) = page.stale(docs)
    assert "generated section" in problem


def test_the_cold_start_page_is_stale_when_its_run_changes(tmp_path: Path) -> None:
    docs = _docs(tmp_path)
    saved_path = docs / page.FOLDER / cold_start.JSON_NAME
    saved = json.loads(saved_path.read_text())
    saved["bundles"]["shipped"]["HTTP: import"]["min_ms"] *= 2  # not rendered again
    saved_path.write_text(json.dumps(saved, indent=2) + "\n")
    problems = stale(docs)
    assert len(problems) == 2, problems
    assert "cold-start.md: its generated section" in problems[0]
    assert "cold-start.sha256: the plots" in problems[1]
    assert "python -m scripts.benchmarks.cold_start" in problems[0]


def test_the_figures_of_a_sync_of_chosen_types_are_stale_when_typed_by_hand(
    tmp_path: Path,
) -> None:
    docs = _docs(tmp_path)
    text = (docs / types_paging.PAGE.page).read_text()
    row = next(line for line in text.splitlines() if "| types, pages of 100 |" in line)
    (docs / types_paging.PAGE.page).write_text(text.replace(row, row[:-8] + "| 1.20 |"))
    (problem,) = stale(docs)
    assert "sync.md: its generated section" in problem
