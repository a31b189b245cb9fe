"""Fails when the C++ reader names a protobuf field by a literal number (run by `make lint`).

    python3 scripts/check_field_numbers.py [ROOT]   # ROOT holds cpp/src/reader (default: this tree)

The .proto is the one source of field numbers: the reader (cpp/src/reader) writes them as the
generated constants (`xdl::proto::Record::kCrc32CFieldNumber`, or a named constant set from one),
as the writer does, never as `case 3:` or `field.number == 16`. A literal there is a number that
the next .proto change leaves behind. What counts as a literal field number: a `case` label that
is an integer, and an integer compared with a `number` (`field.number == 1`, `f.number > 4`).
Comments and string literals are not code. Exit 1 and one line per literal, naming file and line.
"""

import os
import re
import sys

READER = os.path.join("cpp", "src", "reader")
SOURCES = (".cc", ".h")
LITERALS = (
    re.compile(r"\bcase\s+\d+\s*:"),
    re.compile(r"\bnumber\s*(?:==|!=|<=|>=|<|>)\s*\d+\b"),
    re.compile(r"\b\d+\s*(?:==|!=|<=|>=|<|>)\s*[\w.>-]*\bnumber\b"),
)
_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'')


def _code(line):
    """The line without its string literals and its // comment."""
    return _STRING.sub('""', line).split("//", 1)[0]


def literal_field_numbers(root):
    """(path, line number, text) of each literal field number under ROOT/cpp/src/reader."""
    found = []
    for directory, subdirs, files in os.walk(os.path.join(root, READER)):
        subdirs.sort()
        for name in sorted(files):
            if not name.endswith(SOURCES):
                continue
            path = os.path.join(directory, name)
            in_block_comment = False
            with open(path, encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    if in_block_comment:
                        if "*/" not in line:
                            continue
                        line, in_block_comment = line.split("*/", 1)[1], False
                    code = _code(line)
                    if "/*" in code:
                        code, rest = code.split("/*", 1)
                        in_block_comment = "*/" not in rest
                    if any(pattern.search(code) for pattern in LITERALS):
                        found.append((path, number, line.strip()))
    return found


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = literal_field_numbers(root)
    for path, number, text in found:
        print(
            f"{os.path.relpath(path, root)}:{number}: a literal field number ({text}): use the "
            "generated constant (xdl::proto::<Message>::k<Field>FieldNumber)"
        )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
