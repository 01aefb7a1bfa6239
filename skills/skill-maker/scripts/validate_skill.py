#!/usr/bin/env python3
"""Validate a skill directory (skill-maker skill).

Usage: validate_skill.py --path DIR

Checks the rules of the Agent Skills format as Silas installs them: SKILL.md
with front matter, `name` format matching the directory, `description`
length and intent, declared scripts present. Stdlib only: the front matter
keys checked here are plain `key: value` lines.
"""
import argparse
import os
import re
import sys

NAME_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$")
PROCESS_HEAVY = re.compile(r"\b(first|then|next|finally|step \d)\b", re.IGNORECASE)


def front_matter(text):
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return None
    try:
        end = lines[1:].index("---") + 1
    except ValueError:
        return None
    return lines[1:end]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--path", required=True)
    args = parser.parse_args()
    problems = []
    skill_md = os.path.join(args.path, "SKILL.md")
    if not os.path.isfile(skill_md):
        print(f"SKILL.md missing in {args.path}")
        return 1
    with open(skill_md, encoding="utf-8") as f:
        fm = front_matter(f.read())
    if fm is None:
        print("SKILL.md must start with a --- front matter block")
        return 1
    fields = {}
    scripts = []
    for line in fm:
        m = re.match(r"^([a-z_]+):\s*(.*)$", line)
        if m:
            fields[m.group(1)] = m.group(2).strip().strip('"')
        s = re.match(r"^\s+(scripts/[^:]+):\s*$", line)
        if s:
            scripts.append(s.group(1))
    name = fields.get("name", "")
    desc = fields.get("description", "")
    if not NAME_RE.match(name):
        problems.append(f"name {name!r} must be lowercase letters, digits and hyphens (max 64)")
    if name != os.path.basename(os.path.normpath(args.path)):
        problems.append(f"name {name!r} must equal the directory name")
    if not 24 <= len(desc) <= 1024:
        problems.append(f"description must be 24 to 1024 characters (has {len(desc)})")
    if len(PROCESS_HEAVY.findall(desc)) >= 2:
        problems.append("description reads like process steps; say when to use the skill")
    for script in scripts:
        if not os.path.isfile(os.path.join(args.path, script)):
            problems.append(f"declared script {script} is missing")
    for p in problems:
        print(p)
    if not problems:
        print(f"skill {name} is valid")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
