#!/usr/bin/env python3
"""Checks the relative links of every Markdown file in the repository.

    scripts/check_links.py        exit 0: every link resolves; 1: the broken ones are listed

A link `[text](path)` or `![alt](path)` that is not a URL must name a file or directory that
exists, relative to the file it is in; a `#fragment`, on its own or after a Markdown path,
must name a heading of that file (GitHub's anchors: lower case, punctuation dropped, spaces
to hyphens). Code blocks and code spans are skipped. Needs the Python standard library only.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def markdown_files():
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [f for f in out.splitlines() if os.path.exists(os.path.join(ROOT, f))]


def prose(text, blank=True):
    """The file's lines outside fenced code blocks, with code spans blanked if `blank`."""
    fence = None
    for n, line in enumerate(text.split("\n"), 1):
        m = re.match(r"\s*(```|~~~)", line)
        if m:
            fence = None if fence == m.group(1) else (fence or m.group(1))
            continue
        if fence is None:
            yield n, re.sub(r"`[^`]*`", lambda c: "`" + " " * (len(c.group(0)) - 2) + "`", line) if blank else line


def anchors(path, cache={}):
    if path not in cache:
        seen, found = {}, set()
        with open(path, encoding="utf-8") as f:
            for _, line in prose(f.read(), blank=False):
                m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
                if not m:
                    continue
                slug = re.sub(r"[^\w\- ]", "", m.group(1).replace("`", "").strip().lower())
                slug = slug.replace(" ", "-")
                n = seen.get(slug, 0)
                seen[slug] = n + 1
                found.add(slug if n == 0 else f"{slug}-{n}")
        cache[path] = found
    return cache[path]


def main():
    broken = 0
    files = markdown_files()
    for md in files:
        full = os.path.join(ROOT, md)
        with open(full, encoding="utf-8") as f:
            text = f.read()
        for n, line in prose(text):
            for m in LINK.finditer(line):
                target = m.group(1)
                if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):
                    continue  # http:, https:, mailto:, …
                path, _, frag = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(full), path)) if path else full
                problem = None
                if not os.path.exists(dest):
                    problem = "no such file"
                elif frag and dest.endswith(".md") and frag not in anchors(dest):
                    problem = f"no heading #{frag}"
                if problem:
                    broken += 1
                    print(f"{md}:{n}: {target}: {problem}")
    print(f"{len(files)} Markdown files, {broken} broken link(s)")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
