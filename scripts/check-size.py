#!/usr/bin/python3
"""Counts what the project's size rules measure: source files over 600 lines and functions over
80 lines.

Files: *.cc, *.h, *.cu and *.py under the module folders (FOLDERS below, which include tests/,
bench/ and tools/), as git lists them (tracked, and untracked ones it does not ignore; every
file below them outside a git checkout). Lines as `wc -l` counts them.

Functions:
  C++    from the signature line (the first line of the declaration, after any template<...>
         header) to the matching closing brace. Comments, string and character literals (raw
         strings too) are blanked first, so their braces do not count. A function is a body at
         namespace or class scope (TEST(...) bodies included); lambdas and local classes count
         inside the function that holds them. Brace initializers (a constructor's `x_{0}`, a
         variable's `= {...}`) are not bodies.
  Python from `def` (decorators not counted) to the last line of its body (ast end_lineno);
         nested functions and methods are counted on their own as well.

Usage: scripts/check-size.py [--report] [--repo DIR] [--max-file-lines N] [--max-function-lines N]
  Prints every file and function over the limits, one a line ("path: N lines",
  "path:LINE name: N lines"); --report prints the 10 longest files and functions as well (over
  the limits or not). Exit 1 when anything is over, 0 otherwise; 2 on bad usage.
"""
import argparse
import ast
import os
import re
import subprocess
import sys

FOLDERS = ["common", "vps", "plan", "comm", "exec", "sim", "edm", "train", "ckpt", "python", "job",
           "tools", "testing", "bench", "tests", "fuzz", "examples"]
SUFFIXES = (".cc", ".h", ".cu", ".py")


def source_files(repo):
    try:
        out = subprocess.run(["git", "-C", repo, "ls-files", "-co", "--exclude-standard", "--"] + FOLDERS,
                             check=True, capture_output=True, text=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        out = []
        for top in FOLDERS:
            for root, _, names in os.walk(os.path.join(repo, top)):
                out += [os.path.relpath(os.path.join(root, n), repo) for n in names]
    return sorted(p for p in set(out) if p.endswith(SUFFIXES) and os.path.isfile(os.path.join(repo, p)))


# ---- C++ ----

def blank_cpp(text):
    """The text with comments and string / char literals replaced by spaces (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")) \
                or (c in "uUL8" and re.match(r'(u8|u|U|L)R"', text[i:i + 4])):
            start = text.find('R"', i)
            paren = text.find("(", start)
            delim = text[start + 2:paren]
            j = text.find(")" + delim + '"', paren)
            j = n if j < 0 else j + len(delim) + 2
        elif c in "\"'" and not (c == "'" and i > 0 and text[i - 1].isalnum() and text[i - 2:i - 1].isalnum()
                                and re.match(r"[0-9a-fA-F]", text[i + 1:i + 2] or " ")):
            # (a ' between digits is a C++14 digit separator, not a character literal)
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
        else:
            out.append(c)
            i += 1
            continue
        out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
        i = j
    return "".join(out)


def strip_preprocessor(text):
    """Preprocessor lines (with their continuations) blanked: `#define X {` has no body."""
    lines, cont = text.split("\n"), False
    for k, line in enumerate(lines):
        if cont or line.lstrip().startswith("#"):
            cont = line.rstrip().endswith("\\")
            lines[k] = ""
    return "\n".join(lines)


FUNC_TAIL = re.compile(r"\)\s*(?:(?:const|noexcept(?:\s*\([^()]*\))?|override|final|mutable|volatile|&&|&|try)\s*"
                       r"|->\s*[\w:<>,\s*&()]+?\s*)*$")
CLASS_HEAD = re.compile(r"\b(?:class|struct|union)\b(?:\s+\w+\s*\([^()]*\))*[^()]*$")
NAME = re.compile(r"(~?\w+|operator\s*[^\s(]+)\s*\($")


def matching(text, i):
    """Index of the brace closing the one at i."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(text) - 1


def function_name(head):
    """The declared name: the identifier before the parameter list's '('."""
    depth, k = 0, len(head)
    # The parameter list: the last top-level parenthesised group before a ':' init list or the tail.
    init = re.search(r"\)\s*:(?!:)", head)
    end = init.start() + 1 if init else len(head)
    for k in range(end - 1, -1, -1):
        if head[k] == ")":
            depth += 1
        elif head[k] == "(":
            depth -= 1
            if depth == 0:
                m = NAME.search(head[:k + 1])
                return m.group(1) if m else "?"
    return "?"


def cpp_functions(text):
    """(first line, last line, name) of every function body at namespace or class scope."""
    text = strip_preprocessor(blank_cpp(text))
    found, i, n = [], 0, len(text)
    stmt_start = 0  # where the current declaration's text starts
    while i < n:
        c = text[i]
        if c == ";" or c == "}":
            stmt_start = i + 1
        elif c == ":" and text[stmt_start:i].strip() in ("public", "private", "protected"):
            stmt_start = i + 1  # an access specifier ends nothing but starts the next declaration
        elif c == "{":
            head = " ".join(text[stmt_start:i].split())
            head_nt = re.sub(r"^(?:template\s*<[^{}]*?>\s*)+", "", head)
            if re.search(r"\bnamespace\b|^extern\s*$", head) or (CLASS_HEAD.search(head_nt) and "=" not in head_nt):
                stmt_start = i + 1  # a scope: its contents are declarations too
            elif re.search(r"\benum\b", head):
                i = matching(text, i)
                stmt_start = i + 1
            elif FUNC_TAIL.search(head) or (re.search(r"\)\s*:(?!:)", head) and re.search(r"[)}]\s*$", head)):
                end = matching(text, i)
                lead = len(text[stmt_start:i]) - len(text[stmt_start:i].lstrip())
                first = text.count("\n", 0, stmt_start + lead)
                # Skip a template<...> header's lines: the signature starts after it.
                tmpl = re.match(r"\s*(?:template\s*<[^{}]*?>\s*)+", text[stmt_start:i])
                if tmpl:
                    first = text.count("\n", 0, stmt_start + len(tmpl.group(0)))
                found.append((first + 1, text.count("\n", 0, end) + 1, function_name(head_nt)))
                i = end
                stmt_start = i + 1
            elif re.search(r"\)\s*:(?!:)", head):
                i = matching(text, i)  # a member's brace initializer inside a constructor's init list
            else:
                i = matching(text, i)  # a brace initializer or an aggregate
                stmt_start = i + 1
        i += 1
    return found


# ---- Python ----

def py_functions(text):
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    return [(node.lineno, node.end_lineno, node.name) for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def main():
    ap = argparse.ArgumentParser(description="Files over --max-file-lines and functions over --max-function-lines.")
    ap.add_argument("--report", action="store_true", help="also print the 10 longest files and functions")
    ap.add_argument("--repo", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--max-file-lines", type=int, default=600)
    ap.add_argument("--max-function-lines", type=int, default=80)
    args = ap.parse_args()
    files, funcs = [], []
    for path in source_files(args.repo):
        with open(os.path.join(args.repo, path), encoding="utf-8", errors="replace") as f:
            text = f.read()
        files.append((text.count("\n"), path))
        found = py_functions(text) if path.endswith(".py") else cpp_functions(text)
        funcs += [(last - first + 1, path, first, name) for first, last, name in found]
    files.sort(key=lambda t: (-t[0], t[1]))
    funcs.sort(key=lambda t: (-t[0], t[1], t[2]))
    long_files = [f for f in files if f[0] > args.max_file_lines]
    long_funcs = [f for f in funcs if f[0] > args.max_function_lines]
    for lines, path in long_files:
        print(f"{path}: {lines} lines (over {args.max_file_lines})")
    for lines, path, first, name in long_funcs:
        print(f"{path}:{first} {name}: {lines} lines (over {args.max_function_lines})")
    print(f"{len(files)} files, {len(funcs)} functions: {len(long_files)} files over {args.max_file_lines} lines, "
          f"{len(long_funcs)} functions over {args.max_function_lines} lines")
    if args.report:
        print("longest files:")
        for lines, path in files[:10]:
            print(f"  {lines:6d}  {path}")
        print("longest functions:")
        for lines, path, first, name in funcs[:10]:
            print(f"  {lines:6d}  {path}:{first} {name}")
    return 1 if long_files or long_funcs else 0


if __name__ == "__main__":
    sys.exit(main())
