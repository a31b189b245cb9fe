"""scripts/check_field_numbers.py (run by `make lint`): the C++ reader names protobuf fields by
their generated constants only; the committed fixture, a reader naming two fields by number,
fails the check, naming both lines, while its comment, string and constant pass."""

import os
import subprocess
import sys

from conftest import REPO

CHECK = os.path.join(REPO, "scripts", "check_field_numbers.py")
FIXTURE = os.path.join(REPO, "tests", "python", "fixtures", "literal_field_number")


def check(root):
    return subprocess.run([sys.executable, CHECK, root], capture_output=True, text=True)


def test_the_reader_names_no_field_by_a_literal_number():
    result = check(REPO)
    assert result.returncode == 0, result.stdout


def test_a_literal_field_number_in_the_reader_fails_the_check():
    result = check(FIXTURE)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert [line.split(": ")[0] for line in lines] == [
        "cpp/src/reader/literal_field.cc:8",
        "cpp/src/reader/literal_field.cc:11",
    ], result.stdout
    assert "(if (field.number == 3) return;)" in lines[0]
    assert "(case 4:)" in lines[1]
