"""A corpus of real texts of mixed lengths, from files every Debian machine has.

    python3 corpus.py OUT.jsonl [COUNT [MIN_WORDS]]
    python3 corpus.py OUT.jsonl --documents [COUNT]

Sources, read in sorted order: the licences in /usr/share/common-licenses, the copyright files
and Debian changelogs in /usr/share/doc, and the docstrings of Python's standard library. Each
is cut into paragraphs (blank-line separated), whitespace collapsed; paragraphs of at least
MIN_WORDS words (default 20: shorter ones are mostly changelog headers and signatures) and at
most 4000 characters are kept, duplicates dropped, and COUNT of them (default 1000) picked with
a fixed seed. The texts are people's writing, never a model's output. Writes one JSON line per text,
`{"text": ...}`, and prints how many texts and characters it wrote.

With --documents, the texts are whole files instead: the licences and copyright files of
DOC_CHARS characters (as they are, line breaks included), COUNT of them (default 100), picked
the same way: documents far longer than a model takes, as users embed them, truncated.
"""

import ast
import gzip
import json
import pathlib
import random
import sys
import sysconfig


MIN_WORDS = 20
DOC_CHARS = range(8_000, 100_001)


def paragraphs(text):
    """The paragraphs of `text`, whitespace collapsed."""
    out = []
    for block in text.replace("\r", "").split("\n\n"):
        p = " ".join(block.split())
        if len(p.split()) >= MIN_WORDS and len(p) <= 4000:
            out.append(p)
    return out


def read(path):
    """A text file's contents (gzip-compressed ones too), or '' if it cannot be read."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
                return f.read()
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def docstrings(path):
    """The module, class and function docstrings of a Python file."""
    try:
        tree = ast.parse(read(path))
    except (SyntaxError, ValueError):
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc:
                out.extend(paragraphs(doc))
    return out


def main():
    out = pathlib.Path(sys.argv[1])
    documents = sys.argv[2:3] == ["--documents"]
    args = sys.argv[3:] if documents else sys.argv[2:]
    count = int(args[0]) if args else (100 if documents else 1000)
    global MIN_WORDS
    MIN_WORDS = int(args[1]) if len(args) > 1 else MIN_WORDS
    doc = pathlib.Path("/usr/share/doc")
    licences = [f for f in sorted(pathlib.Path("/usr/share/common-licenses").glob("*")) if f.is_file()]
    texts = []
    if documents:
        for f in licences + sorted(doc.glob("*/copyright")):
            text = read(f).replace("\r", "")
            if len(text) in DOC_CHARS:
                texts.append(text)
    else:
        for f in licences + sorted(doc.glob("*/copyright")) + sorted(doc.glob("*/changelog.Debian.gz")):
            texts.extend(paragraphs(read(f)))
        stdlib = pathlib.Path(sysconfig.get_paths()["stdlib"])
        for f in sorted(stdlib.glob("*.py")):
            texts.extend(docstrings(f))
    unique = list(dict.fromkeys(texts))
    what = "documents" if documents else "paragraphs"
    if len(unique) < count:
        sys.exit(f"corpus.py: only {len(unique)} distinct {what} found, {count} asked for")
    picked = random.Random(0).sample(unique, count)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as f:
        for t in picked:
            f.write(json.dumps({"text": t}) + "\n")
    print(f"corpus.py: {len(picked)} texts, {sum(map(len, picked))} characters in {out}")


if __name__ == "__main__":
    main()
