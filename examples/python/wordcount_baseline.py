#!/usr/bin/env python3
"""A single-threaded Python WordCount of a text file, with tokenize.py's rules: the baseline
the Python process-operator example is measured against (benches/RESULTS.md)."""

import collections
import re
import sys

WORD = re.compile(r"[^\W_]+")


def main():
    counts = collections.Counter()
    with open(sys.argv[1], encoding="utf-8", errors="replace") as text:
        for line in text:
            counts.update(word.lower() for word in WORD.findall(line))
    with open(sys.argv[2], "w", encoding="utf-8") as out:
        for word, count in sorted(counts.items()):
            out.write("%s\t%d\n" % (word, count))


if __name__ == "__main__":
    main()
