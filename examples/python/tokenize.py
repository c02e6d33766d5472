#!/usr/bin/env python3
"""WordCount's tokenize step as a Python function: each text line in, (word, 1) per word out,
with the built-in `tokenize` operator's rules (maximal runs of letters and digits, lower-cased).
Run by a `process` vertex; see README.md, "Shipping code with a job"."""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flint_stream  # noqa: E402  (shipped beside this file, or found through sys.path)

# Letters and digits of any script, as Rust's char::is_alphanumeric (close to str.isalnum).
WORD = re.compile(r"[^\W_]+")


def tokenize(line):
    return [word.lower() for word in WORD.findall(line)]


def main():
    for _input, _key, value in flint_stream.records():
        if isinstance(value, str):
            for word in tokenize(value):
                flint_stream.emit(word, 1)
    flint_stream.flush()


if __name__ == "__main__":
    main()
