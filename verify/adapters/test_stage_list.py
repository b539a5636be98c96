#!/usr/bin/env python3
"""The DeepSeek capture adapter writes exactly the datasets of the project's registry and injects
only the oracle's bugs: its CAPTURED_STAGES and PRE_QUANT_DATASETS (read from the source, so
neither torch nor DeepSeek's code is needed) equal the names `dsv4-verify stages --json` lists, in
the same order, and every name of bug_injection.INJECTABLE_BUGS is one of `dsv4-verify mutations
--json`.

    python3 verify/adapters/test_stage_list.py PATH/TO/dsv4-verify
"""
import ast
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def constant(file: str, name: str) -> list:
    with open(os.path.join(HERE, file)) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"{file} defines no {name}")


def same_list(what: str, adapter: list, registry: list) -> bool:
    if adapter == registry:
        print(f"adapter and registry list the same {len(registry)} {what}")
        return True
    print(f"adapter {what} differ from the registry's", file=sys.stderr)
    print(f"  only in the adapter:  {sorted(set(adapter) - set(registry))}", file=sys.stderr)
    print(f"  only in the registry: {sorted(set(registry) - set(adapter))}", file=sys.stderr)
    if set(adapter) == set(registry):
        print("  (same names, different order)", file=sys.stderr)
    return False


def run_json(binary: str, *args) -> list:
    return json.loads(subprocess.run([binary, *args], check=True, capture_output=True, text=True).stdout)


def main(argv) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    rows = run_json(argv[1], "stages", "--json")
    ok = same_list("stages", constant("deepseek_capture.py", "CAPTURED_STAGES"),
                   [r["name"] for r in rows if "pre_quant_of" not in r])
    ok &= same_list("pre-quantization datasets", constant("deepseek_capture.py", "PRE_QUANT_DATASETS"),
                    [r["name"] for r in rows if "pre_quant_of" in r])
    oracle = {m["name"] for m in run_json(argv[1], "mutations", "--json")}
    injectable = constant("bug_injection.py", "INJECTABLE_BUGS")
    unknown = [n for n in injectable if n not in oracle]
    if unknown or len(set(injectable)) != len(injectable):
        print(f"bug_injection.INJECTABLE_BUGS names bugs the oracle lacks (or twice): {unknown}", file=sys.stderr)
        ok = False
    else:
        print(f"the adapter injects {len(injectable)} of the oracle's {len(oracle)} mutations")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
