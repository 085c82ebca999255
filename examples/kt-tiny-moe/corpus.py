"""The training text: the King James Version of the Bible from Debian's `bible-kjv` package (public domain).

`bible -f Gen1:1-Rev22:21` prints one verse per line as "<Book><chapter>:<verse> <text>". Each chapter becomes
one document: its verses, one per line. Every 20th chapter (index 10, 30, 50, ... in canonical order) is held
out, so the held-out text covers the whole book rather than its last pages.
"""
import hashlib
import re
import shutil
import subprocess

BIBLE_RANGE = "Gen1:1-Rev22:21"
VERSE_LINE = re.compile(r"^(\d?[A-Za-z]+)(\d+):(\d+) (.+)$")
EXPECTED_VERSES = 31102
EXPECTED_CHAPTERS = 1189
HELD_OUT_PERIOD = 20
HELD_OUT_OFFSET = 10


def read_kjv():
    """Returns (chapters, sha256 of the raw dump), chapters being a list of (reference, text) in canonical
    order; text is the chapter's verses, one per line, each ending in a newline."""
    exe = shutil.which("bible")
    if exe is None:
        raise SystemExit("the `bible` program is missing: apt-get install -y bible-kjv")
    raw = subprocess.run([exe, "-f", BIBLE_RANGE], check=True, capture_output=True).stdout
    text = raw.decode("ascii")  # the KJV dump is plain ASCII; anything else means a different package
    chapters = []
    current, verses, n_verses = None, [], 0
    for line in text.splitlines():
        m = VERSE_LINE.match(line)
        if not m:
            raise SystemExit(f"unexpected line in the KJV dump: {line!r}")
        ref = f"{m.group(1)} {m.group(2)}"
        if ref != current:
            if current is not None:
                chapters.append((current, "".join(v + "\n" for v in verses)))
            current, verses = ref, []
        verses.append(m.group(4).strip())
        n_verses += 1
    chapters.append((current, "".join(v + "\n" for v in verses)))
    if n_verses != EXPECTED_VERSES or len(chapters) != EXPECTED_CHAPTERS:
        raise SystemExit(f"KJV dump has {n_verses} verses in {len(chapters)} chapters, expected "
                         f"{EXPECTED_VERSES} in {EXPECTED_CHAPTERS}")
    return chapters, hashlib.sha256(raw).hexdigest()


def split(chapters):
    """(training chapters, held-out chapters)."""
    held = [c for i, c in enumerate(chapters) if i % HELD_OUT_PERIOD == HELD_OUT_OFFSET]
    train = [c for i, c in enumerate(chapters) if i % HELD_OUT_PERIOD != HELD_OUT_OFFSET]
    return train, held
