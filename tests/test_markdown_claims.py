"""No markdown cell states a measured comparison as fixed text (issue 30, Deliver 5).

Every sentence of every markdown cell in ``notebooks/*.ipynb`` (and the fixed text ``course.write_summary`` puts
into SUMMARY.md) that compares things (faster, largest, more than, grows, matters, 3x, ...) must be listed in
``tests/markdown_general.yaml``, reviewed, as one of:

* ``kind: general``: general knowledge, not this run's measurement; ``source:`` names where it comes from: a
  reference of docs/references.md by its number (``004``), or ``definition: ...`` (what follows from how the
  thing works), ``vendor: ...`` (a vendor's figure) or ``docs: ...`` (a library's documentation);
* ``kind: printed``: the sentence only points at a comparison that code words from this run's numbers;
  ``source:`` is that function's dotted name (``tutorial_lib.text.claims.workers_scaling``), which must exist;
* ``kind: measured``: a comparison of this run's numbers typed into markdown, which must not be there at all;
  the entry is a known violation (issue 30), and ``test_no_measured_comparison_is_fixed_text`` fails while any
  is listed;
* ``kind: unsourced``: a general statement whose source is not known yet: also a known violation, until it names
  its source (then ``general``) or goes.

An entry whose sentence no longer exists fails too (a stale list): entries match by a normalised sentence prefix.
To see the flagged sentences that are not listed yet, in YAML form ready to review and paste (``stale``: the
entries whose sentence is gone; ``update``: rewrite the YAML without the stale entries and with the new sentences
as ``TODO`` entries, which fail until a reviewer sets their kind and source):

    PYTHONPATH=$PWD python tests/test_markdown_claims.py list
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
LISTED = Path(__file__).with_name("markdown_general.yaml")
SUMMARY = "SUMMARY.md"
KINDS = ("general", "printed", "measured", "unsourced")
SOURCE_PREFIXES = ("definition:", "vendor:", "docs:")
ABBREVIATIONS = ("e.g.", "i.e.", "cf.", "vs.", "et al.")
PREFIX_CHARS = 120  # an entry holds the sentence's first characters, normalised

# Words that compare: a sentence with one of them says something is more, less, first or last.
COMPARATIVE = re.compile(
    r"\b(?:faster|fastest|slower|slowest|quicker|larger|largest|smaller|smallest|bigger|biggest|higher|highest|"
    r"lower|lowest|better|best|worse|worst|cheaper|costlier|more than|less than|fewer than|"
    r"as (?:fast|slow|large|small|much|many) as|(?:the|matters?|costs?|helps?|hurts?) most|most of|the least|"
    r"beats?|beaten|wins?|won|outperforms?|dominates?|dominated|exceeds?|grows?|growing|rises?|doubles?|"
    r"drops?(?! (?:those|them|it)\b)|falls?(?! back)|halves (?:the|its)|matters(?: little)?|"
    r"costs? (?:more|less)|speeds? (?:\w+ )?up|slows? (?:\w+ )?down|twice|half as|times (?:faster|slower|more|less)|"
    r"flatter|steeper|bends?|scales? (?:worse|better)|near linear|barely|far apart|on top of each other|"
    r"(?:explains?|changes?|costs?|helps?|hurts?) little|gets? ahead|(?:does|do|should) not match|matches|"
    r"the same (?:accuracy|speed|weights|loss|throughput|time|results?) as|compared (?:with|to)|"
    r"orders? of magnitude|differs? by|a (?:quarter|third|dozen) (?:of|or more))\b"
    r"|\b\d+(?:\.\d+)?x\b|\d+(?:\.\d+)?\s?×", re.I)


def normalise(text: str) -> str:
    """Lower case, markdown emphasis and code marks dropped, whitespace collapsed."""
    text = re.sub(r"[*`]|(?<!\w)_|_(?!\w)", "", text)
    return re.sub(r"\s+", " ", text).strip().lower()


def sentences(markdown: str) -> list[str]:
    """The sentences of a markdown text: fenced code and tables left out, each heading, list item and quote its
    own unit, units split after ``.``, ``!`` or ``?`` before a capital letter or a digit."""
    markdown = re.sub(r"```.*?```", "", markdown, flags=re.S)
    units, current = [], []
    for line in markdown.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("|"):
            units.append(" ".join(current))
            current = []
            continue
        if re.match(r"(#+|[-*>]|\d+\.)\s", stripped):
            units.append(" ".join(current))
            current = [re.sub(r"^(#+|[-*>]|\d+\.)\s+", "", stripped)]
        else:
            current.append(stripped)
    units.append(" ".join(current))
    out: list[str] = []
    for unit in units:
        here: list[str] = []
        for piece in re.split(r"(?<=[.!?])\s+(?=[A-Z0-9(*`\"])", re.sub(r"\s+", " ", unit)):
            if here and here[-1].endswith(ABBREVIATIONS):
                here[-1] += " " + piece  # "e.g. ResNet-50" goes on
            elif piece.strip():
                here.append(piece.strip())
        out += here
    return out


def notebook_sentences() -> dict[str, list[str]]:
    """``{"01": [sentence, ...]}``: the sentences of every markdown cell, per notebook."""
    found = {}
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        found[path.name[:2]] = [s for c in cells if c["cell_type"] == "markdown"
                                for s in sentences("".join(c["source"]) if isinstance(c["source"], list)
                                                   else c["source"])]
    return found


def summary_sentences(tmp: Path) -> list[str]:
    """The fixed text of SUMMARY.md: a summary written for a notebook with one number and one claim, whose own
    lines (the number's row, the claim's sentence, both worded by code) are left out."""
    import os

    from tutorial_lib import course
    from tutorial_lib.text.claims import Claim

    before = os.environ.get(course.SUMMARY_ENV)
    os.environ[course.SUMMARY_ENV] = str(tmp / "summary")
    try:
        course.summarize("01_mixed_precision", {"NUMBER_KEY": 1.0}, claims=[Claim("TOPIC", "VERDICT", "SENTENCE")])
        text = course.write_summary(tmp, {"01_mixed_precision": 1.0}).read_text()
    finally:
        if before is None:
            os.environ.pop(course.SUMMARY_ENV, None)
        else:
            os.environ[course.SUMMARY_ENV] = before
    return [s for s in sentences(text) if "SENTENCE" not in s and "NUMBER_KEY" not in s]


def flagged(texts: dict[str, list[str]]) -> list[tuple[str, str]]:
    """``(notebook, sentence)`` for each sentence with a comparing word."""
    return [(where, s) for where, found in texts.items() for s in found if COMPARATIVE.search(s)]


def load_listed() -> list[dict]:
    """The reviewed entries of tests/markdown_general.yaml."""
    return yaml.safe_load(LISTED.read_text()) or []


def matches(entry: dict, where: str, sentence: str) -> bool:
    return str(entry["notebook"]) == where and normalise(sentence).startswith(normalise(entry["sentence"]))


def unlisted(found: list[tuple[str, str]], listed: list[dict]) -> list[tuple[str, str]]:
    return [(w, s) for w, s in found if not any(matches(e, w, s) for e in listed)]


def stale_entries(texts: dict[str, list[str]], listed: list[dict]) -> list[dict]:
    """The entries whose sentence no longer exists."""
    return [e for e in listed if not any(matches(e, w, s) for w, found in texts.items() for s in found)]


def updated(texts: dict[str, list[str]], listed: list[dict]) -> list[dict]:
    """The list with stale entries dropped and unlisted flagged sentences added (``kind``/``source`` TODO, which
    fail until reviewed), in the order the sentences stand in the notebooks."""
    found = flagged(texts)
    kept = [e for e in listed if e not in stale_entries(texts, listed)]
    entries = kept + yaml.safe_load(as_yaml(unlisted(found, listed)) or "[]")

    def position(entry: dict) -> int:
        return next((i for i, (w, s) in enumerate(found) if matches(entry, w, s)), len(found))

    return sorted(entries, key=position)


def all_texts(tmp: Path) -> dict[str, list[str]]:
    return {**notebook_sentences(), SUMMARY: summary_sentences(tmp)}


def as_yaml(found: list[tuple[str, str]]) -> str:
    """Entries to review, one per sentence (kind and source left for the reviewer: they fail until set)."""
    return yaml.safe_dump([{"notebook": w, "sentence": normalise(s)[:PREFIX_CHARS], "kind": "TODO",
                            "source": "TODO"} for w, s in found], sort_keys=False, allow_unicode=True, width=120)


def reference_numbers() -> set[str]:
    return set(re.findall(r"^\| (\d{3}) \|", (ROOT / "docs" / "references.md").read_text(), re.M))


def source_problem(entry: dict) -> str | None:
    """Why an entry's ``kind``/``source`` is not acceptable, or None."""
    kind, source = entry.get("kind"), str(entry.get("source") or "").strip()
    if kind not in KINDS:
        return f"kind must be one of {', '.join(KINDS)}, not {kind!r}"
    if kind == "general":
        cited = set(re.findall(r"\b\d{3}\b", source)) & reference_numbers()
        if not cited and not source.startswith(SOURCE_PREFIXES):
            return ("source must cite docs/references.md by number (e.g. 004) or start with "
                    f"{', '.join(SOURCE_PREFIXES)}: {source!r}")
    if kind == "printed":
        module, _, name = source.rpartition(".")
        try:
            if not callable(getattr(importlib.import_module(module), name, None)):
                return f"source {source!r} names no function"
        except ImportError:
            return f"source {source!r} names no module"
    return None


# --------------------------------------------------------------------------- the checks
def test_sentence_splitting_and_flagging():
    text = ("## Heading\n\nOne process is faster here. The model, e.g. ResNet-50, trains\nat 3x the speed.\n\n"
            "- a list item that grows\n- another one, as in Goyal et al.\n\n```\ncode that is faster\n```\n"
            "| a | faster |\nNext paragraph.\n")
    assert sentences(text) == ["Heading", "One process is faster here.",
                               "The model, e.g. ResNet-50, trains at 3x the speed.", "a list item that grows",
                               "another one, as in Goyal et al.", "Next paragraph."]
    hits = [s for _, s in flagged({"x": sentences(text)})]
    assert hits == ["One process is faster here.", "The model, e.g. ResNet-50, trains at 3x the speed.",
                    "a list item that grows"]
    assert normalise("**The** `bucket_cap_mb`  knob") == "the bucket_cap_mb knob"


def test_entries_match_by_notebook_and_normalised_prefix():
    entry = {"notebook": "02", "sentence": "decoding the jpeg is the largest part"}
    found = [("02", "Decoding the **JPEG** is the largest part of preparing an image."),
             ("01", "Decoding the JPEG is the largest part of preparing an image."),
             ("02", "Augmenting is the largest part of preparing an image.")]
    assert unlisted(found, [entry]) == found[1:]


def test_update_drops_stale_entries_and_adds_new_sentences_to_review():
    texts = {"01": ["Y grows with the batch.", "Nothing to see.", "X is faster than Z."]}
    kept = {"notebook": "01", "sentence": "x is faster than z", "kind": "general", "source": "004"}
    gone = {"notebook": "01", "sentence": "w is slower", "kind": "general", "source": "004"}
    assert stale_entries(texts, [kept, gone]) == [gone]
    assert updated(texts, [kept, gone]) == [
        {"notebook": "01", "sentence": "y grows with the batch.", "kind": "TODO", "source": "TODO"}, kept]


def test_every_comparing_sentence_is_listed(tmp_path):
    missing = unlisted(flagged(all_texts(tmp_path)), load_listed())
    assert not missing, ("markdown sentences that compare and are not in tests/markdown_general.yaml (word the "
                         "comparison from the numbers in code, or list it as general with its source; "
                         "`python tests/test_markdown_claims.py list` prints them):\n" + as_yaml(missing))


def test_no_listed_sentence_is_stale(tmp_path):
    stale = stale_entries(all_texts(tmp_path), load_listed())
    assert not stale, "entries of tests/markdown_general.yaml whose sentence is gone: remove them (`update`)\n" + \
        yaml.safe_dump(stale, sort_keys=False, width=120)


def test_every_entry_names_its_kind_and_source():
    problems = [f"{e.get('notebook')}: {e.get('sentence', '')[:60]}...: {why}" for e in load_listed()
                if (why := source_problem(e))]
    assert not problems, "\n".join(problems)
    for entry in load_listed():
        assert set(entry) == {"notebook", "sentence", "kind", "source"}, entry
        assert len(normalise(entry["sentence"])) >= min(40, len(entry["sentence"])), entry


def test_source_check_rejects_what_names_nothing():
    assert source_problem({"kind": "general", "source": "004 (Goyal et al. 2017)"}) is None
    assert source_problem({"kind": "general", "source": "definition: a ring sends 2(p-1)/p"}) is None
    assert "references.md" in source_problem({"kind": "general", "source": "everyone knows"})
    assert "references.md" in source_problem({"kind": "general", "source": "999"})
    assert source_problem({"kind": "printed", "source": "tutorial_lib.text.claims.workers_scaling"}) is None
    assert "names no function" in source_problem({"kind": "printed", "source": "tutorial_lib.text.claims.nothing"})
    assert "kind must be" in source_problem({"kind": "TODO", "source": "TODO"})


def test_no_measured_comparison_is_fixed_text():
    pending = [f"{e['notebook']} ({e['kind']}): {e['sentence']}" for e in load_listed()
               if e["kind"] in ("measured", "unsourced")]
    assert not pending, ("markdown states these comparisons as fixed text, of this run's numbers (measured) or "
                         "without a source (unsourced):\n" + "\n".join(pending))


def main(argv: list[str]) -> int:
    """``list``: the flagged sentences not yet in the YAML; ``all``: every flagged sentence; ``stale``: the entries
    whose sentence is gone (each printed as YAML); ``update``: rewrite the YAML without the stale entries and with
    the unlisted sentences added as TODO entries to review."""
    import tempfile

    if argv not in (["list"], ["all"], ["stale"], ["update"]):
        print("usage: python tests/test_markdown_claims.py list|all|stale|update", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        texts = all_texts(Path(tmp))
    listed = load_listed()
    if argv == ["update"]:
        header = "".join(line for line in LISTED.read_text().splitlines(keepends=True) if line.startswith("#"))
        entries = updated(texts, listed)
        LISTED.write_text(header + yaml.safe_dump(entries, sort_keys=False, allow_unicode=True, width=120))
        todo = sum(e["kind"] == "TODO" for e in entries)
        print(f"{LISTED.name}: {len(entries)} entries, {len(listed) + todo - len(entries)} stale removed, {todo} "
              "to review (kind and source TODO)")
        return 0
    found = {"list": lambda: unlisted(flagged(texts), listed), "all": lambda: flagged(texts)}.get(argv[0])
    if found is None:
        stale = stale_entries(texts, listed)
        print(yaml.safe_dump(stale, sort_keys=False, width=120) if stale else "# no stale entry\n", end="")
        return 0
    found = found()
    print(as_yaml(found) if found else "# every flagged sentence is listed\n", end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
