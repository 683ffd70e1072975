"""The OpenAI-compatible endpoint, tested with the official `openai` client against a live server on
127.0.0.1 (a free port, started and stopped by the fixture): completions streamed and not give the
greedy tokens each prompt gets alone (tests/serving_oracle.py), bad requests get OpenAI's status
and error body and leave the server serving, and many concurrent streams all complete correctly.
The model is the tiny random GPT-2 on the reference backend (text maps one code point per token,
so a completion's text is its token ids)."""
from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

for package in ("starlette", "uvicorn", "openai"):
    pytest.importorskip(package,
                        reason=f"the endpoint tests need {package} (pip install 'refcomp[serve]' openai)")

import openai  # noqa: E402
import uvicorn  # noqa: E402

from refcomp.serving.engine import Engine  # noqa: E402
from refcomp.serving.scheduler import Scheduler  # noqa: E402
from refcomp.serving.server import create_app  # noqa: E402
from refcomp.serving.worker import Worker  # noqa: E402
from serving_oracle import alone, prompt, tiny_model  # noqa: E402

NAME = "tiny-gpt2"
CONCURRENT = int(os.environ.get("REFCOMP_SERVING_STREAMS", "200"))
REPO = Path(__file__).resolve().parent.parent


class LiveServer:
    """uvicorn on a thread, on a socket bound to a free loopback port; `stop` ends it and the worker."""

    def __init__(self, app, worker):
        self.worker = worker
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=5))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "the server did not start"
            time.sleep(0.02)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def stop(self):
        self.server.should_exit = True
        self.thread.join(15)
        self.worker.close()
        self.sock.close()
        assert not self.thread.is_alive()


@pytest.fixture(scope="module")
def live():
    engine = Engine(tiny_model(), pages=512, page_size=4, backend="numpy", prefill_chunk=16)
    worker = Worker(Scheduler(engine, step_tokens=256, prefix_cache=True))
    server = LiveServer(create_app(worker, NAME), worker)
    yield server
    server.stop()


@pytest.fixture
def client(live):
    return openai.OpenAI(base_url=live.url, api_key="unused", max_retries=0, timeout=60)


def ids(text: str) -> list:
    return [ord(c) for c in text]


def post(live, raw: bytes):
    """POST raw bytes to /v1/completions; (status, parsed body)."""
    request = urllib.request.Request(live.url + "/completions", data=raw,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_models_lists_the_served_model(client):
    assert [m.id for m in client.models.list().data] == [NAME]
    assert client.models.retrieve(NAME).owned_by == "refcomp"


def test_completions_streamed_and_not_give_the_tokens_alone(client):
    p = prompt(7, 3)
    want = alone(tuple(p), 8)
    done = client.completions.create(model=NAME, prompt=p, max_tokens=8, temperature=0)
    assert ids(done.choices[0].text) == want and done.choices[0].finish_reason == "length"
    assert done.usage.prompt_tokens == 7 and done.usage.completion_tokens == 8
    chunks = list(client.completions.create(model=NAME, prompt=p, max_tokens=8, temperature=0, stream=True))
    assert ids("".join(c.choices[0].text for c in chunks)) == want
    assert chunks[-1].choices[0].finish_reason == "length" and len(chunks) == 8
    # several prompts, text among them: a choice per prompt, by index
    text = "".join(chr(t) for t in prompt(5, 1))
    both = client.completions.create(model=NAME, prompt=[text, prompt(3, 2)], max_tokens=4, temperature=0)
    by_index = {c.index: ids(c.text) for c in both.choices}
    assert by_index == {0: alone(tuple(prompt(5, 1)), 4), 1: alone(tuple(prompt(3, 2)), 4)}


def _error(e):
    body = e.response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    return e.status_code, body["error"]


def test_bad_requests_get_openais_errors_and_the_server_keeps_serving(client, live):
    with pytest.raises(openai.NotFoundError) as e:
        client.completions.create(model="gpt-4", prompt=[1], max_tokens=2)
    status, error = _error(e.value)
    assert status == 404 and error["code"] == "model_not_found" and "gpt-4" in error["message"]
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=NAME, prompt=[1, 2, 3], max_tokens=200)
    status, error = _error(e.value)
    assert (status, error["code"], error["param"]) == (400, "context_length_exceeded", "max_tokens")
    assert "maximum context length is 96 tokens" in error["message"] and "203" in error["message"]
    for bad, param in (({"prompt": [1, 64]}, "prompt"), ({"prompt": []}, "prompt"),
                       ({"prompt": [1], "temperature": -1}, "temperature"), ({"prompt": [1], "n": 2}, "n"),
                       ({"prompt": [1], "logprobs": 1}, "logprobs"), ({"prompt": [1], "echo": True}, "echo"),
                       ({"prompt": [1], "best_of": 2}, "best_of")):
        with pytest.raises(openai.BadRequestError) as e:
            client.completions.create(model=NAME, max_tokens=2, **bad)
        assert _error(e.value)[1]["param"] == param
    status, body = post(live, b'{"model": "tiny-gpt2", "prompt": [1,')
    assert status == 400 and body["error"]["type"] == "invalid_request_error"
    assert "could not parse the JSON body" in body["error"]["message"]
    for extra, param in (({"top_k": 1.5}, "top_k"), ({"top_k": -5}, "top_k"),
                         ({"repetition_penalty": 0}, "repetition_penalty")):  # vLLM's extensions
        request = {"model": NAME, "prompt": [1], "max_tokens": 2, **extra}
        status, body = post(live, json.dumps(request).encode())
        assert status == 400 and body["error"]["param"] == param
    status, body = post(live, b"[" * 100_000 + b"]" * 100_000)  # nested past the parser's recursion
    assert status == 400 and "could not parse the JSON body" in body["error"]["message"]
    status, body = post(live, b'["not", "an", "object"]')
    assert status == 400 and set(body["error"]) == {"message", "type", "param", "code"}
    ok = client.completions.create(model=NAME, prompt=[1], max_tokens=1, temperature=0, echo=False, best_of=1,
                                   presence_penalty=0.0, logit_bias={}, user="someone")  # "off" values pass
    assert ids(ok.choices[0].text) == alone((1,), 1)
    status, body = post(live, b'{"prompt": [1]}')
    assert status == 400 and body["error"]["param"] == "model"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4")
    # vLLM's top_k is read: the one most likely token, whatever the temperature, is the greedy choice
    one = client.completions.create(model=NAME, prompt=[4, 5], max_tokens=3, temperature=1.5,
                                    extra_body={"top_k": 1, "seed": 7})
    assert ids(one.choices[0].text) == alone((4, 5), 3)
    # still serving, every page back
    done = client.completions.create(model=NAME, prompt=[4, 5], max_tokens=3, temperature=0)
    assert ids(done.choices[0].text) == alone((4, 5), 3)


def test_a_client_gone_mid_stream_frees_its_pages(client, live):
    scheduler = live.worker.scheduler
    stream = client.completions.create(model=NAME, prompt=prompt(9, 4), max_tokens=60, temperature=0,
                                       stream=True)
    next(iter(stream))
    stream.close()
    deadline = time.monotonic() + 20
    while not scheduler.idle:
        assert time.monotonic() < deadline, "the request of a closed stream kept running"
        time.sleep(0.05)
    finished = [r for r in scheduler.requests.values() if r.finish_reason == "cancelled"]
    assert finished and len(finished[-1].out) < 60
    assert scheduler.pool.sequences() == []


def _concurrent_streams(live, count):
    async def one(client, i):
        p = prompt(1 + i % 9, i % 5)
        stream = await client.completions.create(model=NAME, prompt=p, max_tokens=4 + i % 3, temperature=0,
                                                 stream=True)
        text, finish = "", None
        async for chunk in stream:
            text += chunk.choices[0].text
            finish = chunk.choices[0].finish_reason or finish
        return p, 4 + i % 3, ids(text), finish

    async def main():
        async with openai.AsyncOpenAI(base_url=live.url, api_key="unused", max_retries=0,
                                      timeout=120) as client:
            return await asyncio.gather(*(one(client, i) for i in range(count)))

    live.worker.scheduler.stats["largest_step"] = 0
    results = asyncio.run(main())
    for p, new, got, finish in results:
        assert got == alone(tuple(p), new) and finish == "length"
    scheduler = live.worker.scheduler
    assert scheduler.pool.sequences() == []
    assert scheduler.pool.free_pages + scheduler.cache.pages == scheduler.pool.num_pages


def test_concurrent_streams_all_complete_and_are_correct(live):
    """The issue's 200 concurrent streaming requests (REFCOMP_SERVING_STREAMS=...), batched together."""
    _concurrent_streams(live, CONCURRENT)
    assert live.worker.scheduler.stats["largest_step"] > 16


def test_refcomp_serve_runs_and_stops(tmp_path):
    """The command itself: a subprocess on port 0 says where it listens, answers, and stops on SIGINT."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    argv = [sys.executable, "-m", "refcomp", "serve", "random-gpt2", "--backend", "numpy", "--port", "0",
            "--vocab", "64", "--layers", "1", "--d-model", "16", "--heads", "2", "--pages", "32",
            "--page-size", "4"]
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        line = proc.stdout.readline()
        assert "serving random-gpt2 on http://127.0.0.1:" in line, line + proc.stderr.read()
        url = line.split(" on ")[1].split()[0]
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=30)
        assert [m.id for m in client.models.list().data] == ["random-gpt2"]
        done = client.completions.create(model="random-gpt2", prompt=[1, 2], max_tokens=3)
        assert len(done.choices[0].text) == 3
    finally:
        proc.send_signal(2)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert proc.returncode in (0, 130)


def test_refcomp_serve_refuses_a_missing_model(capsys):
    from refcomp.cli import main
    assert main(["serve", "no/such/dir", "--backend", "numpy"]) == 2
    assert "neither random-gpt2 nor a directory" in capsys.readouterr().err
