#!/usr/bin/env bash
# Checks the Markdown docs against the tree:
# 1. links: every [text](path) and [text](path#anchor) in README.md, docs/, bench/results/ and the
#    module READMEs names a file or folder that exists, and an #anchor is a heading of that file
#    (GitHub's rule: lower case, punctuation dropped, spaces to '-'); web links are not fetched;
# 2. commands: every `dynatrain SUBCOMMAND --flag` in README.md and docs/cli.md is a subcommand
#    whose --help lists that flag (needs the built CLI: DYNATRAIN, default build/dynatrain;
#    skipped with a note when it is missing).
# Usage: scripts/check-docs.sh [FILE.md ...]   (default: the files above). Exit 1 on a mismatch.
set -euo pipefail
if (($# == 0)); then
  cd "$(dirname "$0")/.."
  set -- README.md docs/*.md bench/results/*.md */README.md tests/*/README.md fuzz/*/README.md
fi
dt=${DYNATRAIN:-build/dynatrain}
python3 - "$dt" "$@" <<'PY'
import os, re, sys

def anchors(path):
    out, fence = set(), False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            fence = not fence
        elif not fence and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            slug = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
            n, s = 1, slug
            while s in out:
                s, n = f"{slug}-{n}", n + 1
            out.add(s)
    return out

dt, files = sys.argv[1], sys.argv[2:]
bad = 0
link = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
for md in files:
    fence = False
    for no, line in enumerate(open(md, encoding="utf-8"), 1):
        if line.startswith("```"):
            fence = not fence
            continue
        if fence:
            continue
        for target in link.findall(line):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            full = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
            if not os.path.exists(full):
                print(f"{md}:{no}: {target}: no such file"); bad += 1
            elif anchor and full.endswith(".md") and anchor not in anchors(full):
                print(f"{md}:{no}: {target}: no heading '#{anchor}' in {full}"); bad += 1
print(f"links: {bad} broken" if bad else "links: ok")

# Commands: `dynatrain SUB ...` lines (continuations joined) and the flags on them.
import subprocess
helps, wrong = {}, 0
def help_of(sub):
    if sub not in helps:
        r = subprocess.run([dt, sub, "--help"], capture_output=True, text=True)
        helps[sub] = r.stdout if r.returncode == 0 else None
    return helps[sub]
if not os.access(dt, os.X_OK):
    print(f"commands: skipped ({dt} not built)")
else:
    for md in [f for f in files if os.path.basename(f) == "README.md" and os.path.dirname(f) in ("", ".") or f.endswith("cli.md")]:
        text = re.sub(r"\\\n\s*", " ", open(md, encoding="utf-8").read())
        for no, line in enumerate(text.split("\n"), 1):
            for m in re.finditer(r"dynatrain (plan|simulate|run-transition|train|request|export)\b([^`|]*)", line):
                h = help_of(m.group(1))
                if h is None:
                    print(f"{md}: dynatrain {m.group(1)}: no such subcommand"); wrong += 1
                    continue
                for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", m.group(2)):
                    if not re.search(r"(^|[\s,])" + re.escape(flag) + r"\b", h):
                        print(f"{md}: dynatrain {m.group(1)} {flag}: not in --help"); wrong += 1
    print(f"commands: {wrong} unknown" if wrong else "commands: ok")
sys.exit(1 if bad or wrong else 0)
PY
