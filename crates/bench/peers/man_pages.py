"""Labelled training data from the manual pages a Debian machine has (/usr/share/man).

    python3 man_pages.py OUT_DIR [PER_SECTION [TEST_PER_SECTION]]

Each page's NAME line ("ls - list directory contents") is a text, and the section it is filed
under (1 commands, 2 system calls, 3 library functions, 5 file formats, 7 overviews, 8
administration) its label; its DESCRIPTION's first paragraph is the text that line summarises.
Pages are read in sorted order; `.so` redirections, pages without a NAME line and repeated NAME
lines are skipped; per section, PER_SECTION pages (default 130) for training and
TEST_PER_SECTION (default 50) held out are drawn with a fixed seed, so no page is in both.
The texts are people's writing, never a model's output. Writes, in OUT_DIR:

- sections-train.jsonl, sections-test.jsonl: `{"text": NAME line, "label": section}` (a
  classifier's task: `switchyard train --task classify --labels 1,2,3,5,7,8`);
- pairs-train.jsonl, pairs-test.jsonl: `{"anchor": NAME line, "positive": first paragraph of
  DESCRIPTION}` for the same pages that have one (an embedding model's task).
"""

import gzip
import json
import pathlib
import random
import re
import sys

SECTIONS = ["1", "2", "3", "5", "7", "8"]


def text_of(line):
    """A roff line as plain text: escapes and font changes dropped, `\\-` a hyphen."""
    line = line.replace("\\-", "-").replace("\\(em", "-").replace("\\(en", "-")
    line = re.sub(r"\\f[BIRP]|\\f\(..|\\f\[[^]]*\]", "", line)
    line = re.sub(r"\\[&|^~ 0]", " ", line)
    line = re.sub(r"\\\*\(..|\\\*.|\\\(..|\\.", "", line)
    if line.startswith("."):
        # A macro line: keep the words of font macros (.B word, .BR a b), drop the rest.
        parts = line.split(None, 1)
        if parts[0] in (".B", ".I", ".BR", ".IR", ".RB", ".RI", ".BI", ".IB", ".SM") and len(parts) > 1:
            return parts[1].replace('"', "")
        return ""
    return line


def sections_of(lines):
    """The text of each `.SH` section of a page, by its upper-cased title."""
    out, title, body = {}, None, []
    for line in lines:
        m = re.match(r'^\.S[Hh]\s+"?([^"]*)"?', line)
        if m:
            if title is not None:
                out.setdefault(title, body)
            title, body = m.group(1).strip().upper(), []
        elif title is not None:
            body.append(line)
    if title is not None:
        out.setdefault(title, body)
    return out


def first_paragraph(body):
    words = []
    for line in body:
        if re.match(r"^\.(PP|P|LP|TP|IP|SS|sp|br)\b", line) or not line.strip():
            if len(words) >= 8:
                break
            continue
        words.extend(text_of(line).split())
    return " ".join(words)


def page(path):
    """A page's (NAME line, first DESCRIPTION paragraph), or None."""
    try:
        raw = gzip.open(path, "rt", encoding="utf-8", errors="replace").read()
    except (OSError, EOFError):
        return None
    if raw.lstrip().startswith(".so "):
        return None
    secs = sections_of(raw.splitlines())
    name_body = secs.get("NAME") or secs.get("NOM") or []
    name = " ".join(" ".join(text_of(l).split()) for l in name_body if text_of(l).strip())
    name = " ".join(name.split())
    if " - " not in name or len(name) > 300:
        return None
    return name, first_paragraph(secs.get("DESCRIPTION", []))


def main():
    out = pathlib.Path(sys.argv[1])
    per = int(sys.argv[2]) if len(sys.argv) > 2 else 130
    test = int(sys.argv[3]) if len(sys.argv) > 3 else 50
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(20261202)
    train, held = [], []
    for s in SECTIONS:
        seen, pages = set(), []
        for path in sorted(pathlib.Path(f"/usr/share/man/man{s}").glob("*.gz")):
            p = page(path)
            if p is None or p[0] in seen:
                continue
            seen.add(p[0])
            pages.append((s, p[0], p[1]))
        if len(pages) < per + test:
            sys.exit(f"man{s} has {len(pages)} usable pages, fewer than {per} + {test}")
        rng.shuffle(pages)
        held += pages[:test]
        train += pages[test: test + per]
    rng.shuffle(train)
    for name, rows in (("train", train), ("test", held)):
        with open(out / f"sections-{name}.jsonl", "w", encoding="utf-8") as f:
            for s, text, _ in rows:
                f.write(json.dumps({"text": text, "label": s}, ensure_ascii=False) + "\n")
        with open(out / f"pairs-{name}.jsonl", "w", encoding="utf-8") as f:
            n = 0
            for _, text, desc in rows:
                if len(desc.split()) >= 8:
                    f.write(json.dumps({"anchor": text, "positive": desc}, ensure_ascii=False) + "\n")
                    n += 1
        print(f"{name}: {len(rows)} pages, {n} with a description")


if __name__ == "__main__":
    main()
