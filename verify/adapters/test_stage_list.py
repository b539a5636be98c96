#!/usr/bin/env python3
"""The DeepSeek capture adapter writes exactly the stages of the project's registry: its
CAPTURED_STAGES (read from the source, so neither torch nor DeepSeek's code is needed) equals the
names `dsv4-verify stages --json` lists, in the same order.

    python3 verify/adapters/test_stage_list.py PATH/TO/dsv4-verify
"""
import ast
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def adapter_stages() -> list:
    with open(os.path.join(HERE, "deepseek_capture.py")) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "CAPTURED_STAGES" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise AssertionError("deepseek_capture.py defines no CAPTURED_STAGES")


def main(argv) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    registry = [row["name"] for row in json.loads(subprocess.run([argv[1], "stages", "--json"], check=True,
                                                                 capture_output=True, text=True).stdout)]
    adapter = adapter_stages()
    if adapter != registry:
        print("adapter CAPTURED_STAGES differs from the stage registry", file=sys.stderr)
        print(f"  only in the adapter:  {sorted(set(adapter) - set(registry))}", file=sys.stderr)
        print(f"  only in the registry: {sorted(set(registry) - set(adapter))}", file=sys.stderr)
        if set(adapter) == set(registry):
            print("  (same names, different order)", file=sys.stderr)
        return 1
    print(f"adapter and registry list the same {len(registry)} stages")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
