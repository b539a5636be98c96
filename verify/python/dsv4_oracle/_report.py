"""Per-case reports of the engine checks (flashmla_check, deepgemm_check): JSON and Markdown written
whole or not at all, with the environment that produced them."""
import json
import os
import platform
import subprocess
import tempfile


def _git_head(directory):
    try:
        return subprocess.run(["git", "-C", directory, "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def environment(module=None, module_commit_env=None):
    """Where the numbers come from: this repository's commit, the GPU, torch / CUDA, the checked package."""
    env = {"dsv4_oracle_commit": _git_head(os.environ.get("DSV4_REPO", os.getcwd())), "host": platform.node()}
    try:
        import torch

        env["torch"] = torch.__version__
        env["cuda"] = torch.version.cuda
        env["gpu"] = torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
    except ImportError:
        env["torch"] = "not importable"
    if module is not None:
        env[f"{module.__name__}_file"] = getattr(module, "__file__", "?")
        commit = os.environ.get(module_commit_env or "", "")
        env[f"{module.__name__}_commit"] = commit or _git_head(os.path.dirname(os.path.dirname(os.path.abspath(module.__file__))))
    return env


def write_atomic(path, text):
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_reports(out_dir, stem, title, env, cases, columns):
    """out_dir/stem.json (everything) and out_dir/stem.md (one table row per case over `columns`)."""
    write_atomic(os.path.join(out_dir, stem + ".json"), json.dumps({"environment": env, "cases": cases}, indent=1,
                                                                    default=str) + "\n")
    lines = [f"# {title}", "", "| " + " | ".join(f"{k}" for k in env) + " |", "|" + "---|" * len(env),
             "| " + " | ".join(str(v) for v in env.values()) + " |", "",
             "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for case in cases:
        lines.append("| " + " | ".join(_cell(case.get(c, "")) for c in columns) + " |")
    passed = sum(1 for c in cases if c.get("verdict") == "PASS")
    lines += ["", f"{passed} passed, {len(cases) - passed} failed", ""]
    write_atomic(os.path.join(out_dir, stem + ".md"), "\n".join(lines))


def _cell(v):
    if isinstance(v, float):
        return f"{v:.3e}"
    return str(v).replace("|", "/")
