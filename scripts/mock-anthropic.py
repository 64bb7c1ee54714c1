#!/usr/bin/env python3
"""A mock of Anthropic's Messages API for StepProof's end-to-end tests (loopback only).

It serves scripted assistant turns over the streaming `POST /v1/messages` endpoint (server-sent
events, as Claude Code 2.1.328 uses it), picking the next turn by the number of assistant
messages already in the request, and appends every request it receives to a JSON Lines file so
tests can assert what the model saw (e.g. the tool_result that carried StepProof's denial).

    mock-anthropic.py --script turns.json --record requests.jsonl [--host 127.0.0.2] [--port 0]

Prints `listening on HOST:PORT` once ready. `turns.json` is a list; each turn is
  {"text": "…"}                                   a final answer (stop_reason end_turn), or
  {"tool": "Bash", "input": {"command": "…"}}     a tool call (stop_reason tool_use),
  {"tools": [{"tool": …, "input": …}, …]}         several tool calls in one turn.
Past the end of the script it answers "done". `@PORT@` anywhere in a turn becomes the mock's
own port (a test can only know it once the mock listens).

A subagent's requests reach the mock too, each conversation counting its own assistant
messages. To script one, give the script as an object instead of a list:
  {"turns": [...], "threads": [{"marker": "SUB-1", "turns": [...]}, ...]}
A request whose first user message contains a thread's marker (e.g. the prompt the main turns
hand to an `Agent` tool call) is answered from that thread's turns (tool ids `toolu_mock_tN_…`);
any other from `turns`.

The object form also takes
  "accept": ["Bearer TOKEN", "x-api-key KEY", …]   only these credentials reach the turns;
                                                   any other gets 401 (authentication_error);
  "token": {"refresh_token": "R", "access_token": "A", "new_refresh_token": "R2",
            "expires_in": 3600}                    `POST /v1/oauth/token` (grant_type
                                                   refresh_token, Claude Code's client id)
                                                   answers A and R2 for R, once: R is then spent.
  "server_settings": {...}                         `GET /api/claude_code/settings` (the
                                                   organisation's server-managed settings)
                                                   answers {"uuid", "checksum", "settings": …}
                                                   to a credential of "accept" (401 otherwise);
                                                   without it, 404 (none configured).
  "models": {"MODEL": {"status": 404, "type": "not_found_error"}, …}
                                                   a Messages request for MODEL (its
                                                   `model`) is answered with that HTTP
                                                   error (`type` in the error body), or,
                                                   with {"turns": [...]}, from those turns
                                                   (tool ids `toolu_mock_mMODEL_…`): per-model
                                                   answers, e.g. a verifier's fallback chain;
                                                   "delay": SECONDS waits that long first;
                                                   "answer_model": NAME answers as NAME (the
                                                   `model` of the message), as an API that
                                                   serves another model than asked would.
With --tls-cert/--tls-key it serves HTTPS (a test CA's certificate for the host).
"""
import argparse
import json
import ssl
import time
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
CLIENT_ID = "9d1c250a-e61b-44d9-88ed-5944d1962f5e"
SPENT = set()
# Turns whose "error" was answered once already (then the turn itself is answered).
ERRORED = set()


def sse(event, data):
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def turn_events(turn, model, index, thread=""):
    msg_id = f"msg_mock_{thread}{index}"
    yield sse("message_start", {"type": "message_start", "message": {
        "id": msg_id, "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": turn.get("input_tokens", 10), "output_tokens": 1}}})
    blocks = []
    if "text" in turn:
        blocks.append(("text", turn["text"]))
    for call in turn.get("tools", []) + ([turn] if "tool" in turn else []):
        blocks.append(("tool", call))
    for i, (kind, value) in enumerate(blocks):
        if kind == "text":
            yield sse("content_block_start", {"type": "content_block_start", "index": i,
                                              "content_block": {"type": "text", "text": ""}})
            yield sse("content_block_delta", {"type": "content_block_delta", "index": i,
                                              "delta": {"type": "text_delta", "text": value}})
        else:
            tool_id = f"toolu_mock_{thread}{index}_{i}"
            yield sse("content_block_start", {"type": "content_block_start", "index": i,
                                              "content_block": {"type": "tool_use", "id": tool_id,
                                                                "name": value["tool"], "input": {}}})
            yield sse("content_block_delta", {"type": "content_block_delta", "index": i,
                                              "delta": {"type": "input_json_delta",
                                                        "partial_json": json.dumps(value.get("input", {}))}})
        yield sse("content_block_stop", {"type": "content_block_stop", "index": i})
    stop = "tool_use" if any(k == "tool" for k, _ in blocks) else "end_turn"
    yield sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                "usage": {"output_tokens": 5, "input_tokens": turn.get("input_tokens", 10)}})
    yield sse("message_stop", {"type": "message_stop"})


def pick_thread(script, messages):
    """The turns for this conversation: a thread whose marker is in its first user message."""
    if isinstance(script, list):
        return script, ""
    first = next((m for m in messages if m.get("role") == "user"), None)
    text = json.dumps(first.get("content")) if first else ""
    for n, thread in enumerate(script.get("threads", [])):
        if thread["marker"] in text:
            return thread["turns"], f"t{n}_"
    return script.get("turns", []), ""


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply_json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_HEAD(self):
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def credential_accepted(self, accept):
        auth = self.headers.get("authorization")
        key = self.headers.get("x-api-key")
        return auth in accept or (key is not None and f"x-api-key {key}" in accept)

    def do_GET(self):
        self.record(None)
        config = self.server.script if isinstance(self.server.script, dict) else {}
        if self.path.split("?")[0] == "/api/claude_code/settings":
            settings = config.get("server_settings")
            accept = config.get("accept")
            if accept is not None and not self.credential_accepted(accept):
                self.reply_json(401, {"type": "error", "error": {"type": "authentication_error",
                                                                 "message": "invalid credential"}})
            elif settings is None:
                self.reply_json(404, {"type": "error", "error": {"type": "not_found_error",
                                                                 "message": "no settings"}})
            else:
                self.reply_json(200, {"uuid": "mock-settings", "checksum": "mock-checksum",
                                      "settings": settings})
            return
        self.reply_json(200, {})

    def record(self, body):
        entry = {"method": self.command, "path": self.path, "t_ms": time.time() * 1000,
                 "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body}
        with LOCK, open(self.server.record_path, "a") as f:
            f.write(json.dumps(entry) + "\n")

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"unparsed": raw.decode(errors="replace")}
        self.record(body)
        config = self.server.script if isinstance(self.server.script, dict) else {}
        if self.path.startswith("/v1/oauth/token"):
            token = config.get("token", {})
            with LOCK:
                good = (body.get("grant_type") == "refresh_token"
                        and body.get("client_id") == CLIENT_ID
                        and body.get("refresh_token") == token.get("refresh_token")
                        and body.get("refresh_token") not in SPENT)
                if good:
                    SPENT.add(body.get("refresh_token"))
            if not good:
                self.reply_json(400, {"error": "invalid_grant"})
                return
            self.reply_json(200, {"token_type": "Bearer", "access_token": token["access_token"],
                                  "refresh_token": token.get("new_refresh_token"),
                                  "expires_in": token.get("expires_in", 3600),
                                  "scope": body.get("scope", "")})
            return
        accept = config.get("accept")
        if accept is not None and self.path.startswith("/v1/messages"):
            if not self.credential_accepted(accept):
                self.reply_json(401, {"type": "error", "error": {"type": "authentication_error",
                                                                 "message": "invalid credential"}})
                return
        if not self.path.startswith("/v1/messages") or "count_tokens" in self.path:
            self.reply_json(200, {"input_tokens": 10} if "count_tokens" in self.path else {})
            return
        messages = body.get("messages", [])
        index = sum(1 for m in messages if m.get("role") == "assistant")
        script, thread = pick_thread(self.server.script, messages)
        per_model = config.get("models", {}).get(body.get("model"))
        if per_model is not None and "status" in per_model:
            self.reply_json(per_model["status"], {"type": "error", "error": {
                "type": per_model.get("type", "api_error"),
                "message": f"mock: model {body.get('model')} answers {per_model['status']}"}})
            return
        if per_model is not None:
            script, thread = per_model.get("turns", []), f"m{body.get('model')}_"
            time.sleep(per_model.get("delay", 0))
        turn = script[index] if index < len(script) else {"text": "done"}
        last = json.dumps(messages[-1].get("content")) if messages else ""
        if "summary" in config and "Respond with TEXT ONLY" in last:
            # Claude Code's compaction: its summary request is answered with the script's.
            turn, thread = {"text": config["summary"]}, "summary_"
        elif "error" in turn:
            with LOCK:
                first = (thread, index) not in ERRORED
                ERRORED.add((thread, index))
            if first:
                err = turn["error"]
                self.reply_json(err.get("status", 400), {"type": "error", "error": {
                    "type": err.get("type", "invalid_request_error"), "message": err["message"]}})
                return
        port = str(self.server.server_address[1])
        turn = json.loads(json.dumps(turn).replace("@PORT@", port))
        model = body.get("model", "claude-mock")
        if per_model is not None and "answer_model" in per_model:
            model = per_model["answer_model"]
        if not body.get("stream"):
            content = [{"type": "text", "text": turn.get("text", "done")}]
            self.reply_json(200, {"id": "msg_mock", "type": "message", "role": "assistant", "model": model,
                                  "content": content, "stop_reason": "end_turn", "stop_sequence": None,
                                  "usage": {"input_tokens": 10, "output_tokens": 5}})
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for chunk in turn_events(turn, model, index, thread):
            self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--script", required=True)
    parser.add_argument("--record", required=True)
    parser.add_argument("--host", default="127.0.0.2")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tls-cert")
    parser.add_argument("--tls-key")
    args = parser.parse_args()
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    if args.tls_cert:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.tls_cert, args.tls_key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    server.daemon_threads = True
    with open(args.script) as f:
        server.script = json.load(f)
    server.record_path = args.record
    print(f"listening on {args.host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
