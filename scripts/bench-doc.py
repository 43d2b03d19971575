#!/usr/bin/env python3
"""Put a benchmark's table into its results document.

Usage: bench-doc.py NAME DOC TABLE ELAPSED_S COMMAND

Replaces the block between `<!-- NAME:begin -->` and `<!-- NAME:end -->`
in DOC (created with a `# NAME` heading if missing) with the
table, when and where it was measured, and the command that measured it.
Shared by scripts/bench-liu.sh and scripts/bench-bbos.sh.
"""
import datetime
import os
import re
import subprocess
import sys


def main() -> None:
    name, doc, table, elapsed, command = sys.argv[1:6]
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    rev = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    block = f"""{begin}
Measured {now} in {elapsed} s on {os.cpu_count()} CPUs, sluice {rev}, with

```sh
{command}
```

{table}
{end}"""
    if os.path.exists(doc):
        text = open(doc).read()
    else:
        text = f"# {name}\n\n{begin}\n{end}\n"
    text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: block, text, flags=re.S)
    with open(doc, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
