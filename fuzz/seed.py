#!/usr/bin/env python3
"""Seeds the fuzz corpora from the vendored recorded cases (tests/conformance/cases).

    fuzz/seed.py            writes fuzz/corpus/<target>/ seeds (kept with what the fuzzers found)
    fuzz/seed.py --dict     rewrites fuzz/dict/request.dict (JSON tokens and field names)

The request targets get each recorded request; body_readers gets it behind a first byte
(the piece size the arriving reader is fed in); config gets each case's config.
"""
import hashlib
import json
import pathlib
import re
import sys

HERE = pathlib.Path(__file__).resolve().parent
CASES = HERE.parent / "tests" / "conformance" / "cases"
TOKENS = ["{", "}", "[", "]", ":", ",", '"', "null", "true", "false", "-0", "1e999", "-1e999", "0.5",
          "18446744073709551616", "\\ud800", "\\udc00", "\\u0000", '\\"', "\\\\"]


def cases():
    for path in sorted(CASES.glob("*.json")):
        yield json.loads(path.read_text())


def write(target, data):
    folder = HERE / "corpus" / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / hashlib.sha1(data).hexdigest()).write_bytes(data)


def dictionary():
    names = set()
    for case in cases():
        names.update(re.findall(r'"([A-Za-z_][A-Za-z_ 0-9]*)":', json.dumps(case)))
    lines = ["# JSON tokens (awkward numbers and escapes included) and the field names of recorded",
             "# requests, for the fuzzers' mutations (libFuzzer's format; made by fuzz/seed.py --dict)."]
    for token in TOKENS + [f'"{n}"' for n in sorted(names)]:
        lines.append('"' + token.replace("\\", "\\\\").replace('"', '\\"') + '"')
    (HERE / "dict" / "request.dict").write_text("\n".join(lines) + "\n")


def main():
    if "--dict" in sys.argv:
        dictionary()
        return
    for i, case in enumerate(cases()):
        body = json.dumps(case["request"], separators=(",", ":")).encode()
        write("request_path", body)
        write("body_readers", bytes([i * 37 % 256]) + body)
        if "config" in case:
            write("config", json.dumps(case["config"]).encode())


if __name__ == "__main__":
    main()
