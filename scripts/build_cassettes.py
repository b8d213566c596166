"""Build test cassettes from SillyTavern capture fixtures.

    python scripts/build_cassettes.py FIXTURES_DIR tests/cassettes/st-1.12.6

FIXTURES_DIR is a folder of captures from a real ST (the team's `fixtures/sillytavern/`):
`requests.jsonl` (streaming run) and `nonstream/requests.jsonl`, each line one request ST
sent upstream, with the reply text the fake LLM gave. Each becomes a cassette in which ST's
request goes upstream unchanged (no memory) and the answer is the fake LLM's reply, as
OpenAI SSE events or a JSON completion. The output is committed, so tests never need the
fixtures folder.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

KEEP_HEADERS = ("Content-Type", "Authorization", "Accept", "User-Agent", "Accept-Encoding")


def sse(reply: str, model: str) -> list[dict[str, Any]]:
    base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": model}

    def event(delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return "data: " + json.dumps({**base, "choices": [choice]}) + "\n\n"

    texts = [event({"role": "assistant", "content": ""})]
    words = reply.split(" ")
    for i in range(0, len(words), 4):
        piece = " ".join(words[i : i + 4]) + (" " if i + 4 < len(words) else "")
        texts.append(event({"content": piece}))
    texts += [event({}, "stop"), "data: [DONE]\n\n"]
    return [{"t": round(0.02 * i, 4), "text": text} for i, text in enumerate(texts)]


def cassette(line: dict[str, Any], run: str) -> dict[str, Any]:
    headers = [[k, v] for k, v in line["headers"].items() if k in KEEP_HEADERS]
    body = line.get("body")
    part = {"method": line["method"], "path": line["path"], "query": line["query"]}
    request = {**part, "headers": headers, "body": body}
    upstream = {**part, "path": line["path"].removeprefix("/v1"), "headers": headers}
    upstream["body"] = body
    if line["path"].endswith("/models"):
        status, out_headers = line["status"], [["Content-Type", "application/json"]]
        models = {"object": "list", "data": [{"id": "fake-model", "object": "model"}]}
        chunks = [{"t": 0.0, "text": json.dumps(models)}]
    elif line.get("stream"):
        status, out_headers = line["status"], [["Content-Type", "text/event-stream"]]
        chunks = sse(line["reply"], body["model"])
    else:
        status, out_headers = line["status"], [["Content-Type", "application/json"]]
        message = {"role": "assistant", "content": line["reply"]}
        answer = {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        }
        chunks = [{"t": 0.0, "text": json.dumps(answer)}]
    return {
        "format": "recap-proxy-cassette/1",
        "recorded_at": "captured from SillyTavern 1.12.6 (ba6f7b7a9)",
        "meta": {"source": f"st-fixtures/{run}", "step": line["step"], "seq": line["seq"]},
        "request": request,
        "upstream_request": upstream,
        "response": {"status": status, "reason": "OK", "headers": out_headers, "chunks": chunks},
    }


def main() -> None:
    fixtures, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    for run, path in (
        ("stream", fixtures / "requests.jsonl"),
        ("nonstream", fixtures / "nonstream" / "requests.jsonl"),
    ):
        for raw in path.read_text(encoding="utf-8").splitlines():
            line = json.loads(raw)
            name = f"{run}-{line['seq']:02d}-{line['step']}.json"
            data = json.dumps(cassette(line, run), indent=2, ensure_ascii=False)
            (out / name).write_text(data + "\n", encoding="utf-8")
            print(out / name)


if __name__ == "__main__":
    main()
