"""An OpenAI-compatible HTTP endpoint over a Worker: `/v1/completions` (streamed or not) and
`/v1/models`, on Starlette (the `serve` extra; this module is imported only by `refcomp serve` and
its tests, never by `import refcomp`).

Requests are checked here, before they reach the worker, and every mistake a client can make is
answered with OpenAI's status and error body, {"error": {"message", "type", "param", "code"}}: an
unknown model is a 404, a malformed body, a bad parameter or too many tokens a 400. Nothing a
request holds can stop the server. A streamed completion is server-sent events, one per token, then
`data: [DONE]`; a client that goes away cancels its request, whose pages are freed at once.

Text. The served models have no tokenizer of their own here, so text maps to token ids one code
point per token (token t is the character chr(t)): a prompt may be text or token ids, and a
completion's text gives its token ids back exactly.
"""
from __future__ import annotations

import asyncio
import json
import time
import uuid

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from .sampling import Sampling
from .worker import Worker

# parameters this server does not implement: accepted only when absent, null or at the value that
# means "off" ("user" and "stream_options" are always accepted)
UNSUPPORTED = {"logit_bias": {}, "suffix": "", "echo": False, "best_of": 1, "logprobs": None,
               "presence_penalty": 0, "frequency_penalty": 0}


def _is_off(value, off) -> bool:
    """Whether a parameter is null or at its "off" value (true and false are not numbers here)."""
    if value is None:
        return True
    if isinstance(value, bool) or isinstance(off, bool):
        return value is off
    return value == off


class APIError(Exception):
    """A request the endpoint refuses: HTTP status, message, param and code, as OpenAI's API says them."""

    def __init__(self, status: int, message: str, param=None, code=None, kind="invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind

    def response(self) -> JSONResponse:
        body = {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}
        return JSONResponse(body, status_code=self.status)


def encode(text: str, vocab: int) -> list:
    ids = [ord(c) for c in text]
    bad = [t for t in ids if t >= vocab]
    if bad:
        raise APIError(400, f"prompt: the character {chr(bad[0])!r} is token {bad[0]}, outside the model's "
                       f"vocabulary of {vocab} (text maps one code point per token)", "prompt")
    return ids


def decode(ids) -> str:
    return "".join(chr(t) for t in ids)


def _prompts(body: dict, vocab: int) -> list:
    """The request's prompts as token-id lists: a string, token ids, or a list of either."""
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        prompts = [prompt]
    elif (isinstance(prompt, list) and prompt
          and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)):
        prompts = [prompt]
    elif isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
        prompts = prompt
    else:
        raise APIError(400, "prompt must be a string, a list of token ids, or a non-empty list of either",
                       "prompt")
    out = []
    for p in prompts:
        ids = encode(p, vocab) if isinstance(p, str) else p
        if not ids or not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab for t in ids):
            raise APIError(400, f"prompt: each prompt must hold 1 or more token ids in [0, {vocab})",
                           "prompt")
        out.append(list(ids))
    return out


def _number(body, name, default, kind, low, high):
    value = body.get(name, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, kind) or not low <= value <= high:
        raise APIError(400, f"{name} must be a number in [{low}, {high}], got {value!r}", name)
    return value


class Service:
    """The app's state: the model's name and limits, and the worker that runs its requests."""

    def __init__(self, worker: Worker, model_name: str):
        self.worker, self.name, self.created = worker, model_name, int(time.time())
        engine = worker.scheduler.engine
        self.spec, self.pool = engine.model.spec, engine.pool

    def model_card(self) -> dict:
        return {"id": self.name, "object": "model", "created": self.created, "owned_by": "refcomp"}

    def check(self, body) -> tuple:
        """(prompts, max_tokens, Scheduler.add settings, stream) from a request body, or an APIError."""
        if not isinstance(body, dict):
            raise APIError(400, "the request body must be a JSON object")
        model = body.get("model")
        if not isinstance(model, str):
            raise APIError(400, "you must provide a model parameter", "model")
        if model != self.name:
            raise APIError(404, f"The model `{model}` does not exist or you do not have access to it.",
                           "model", "model_not_found")
        for name, off in UNSUPPORTED.items():
            if not _is_off(body.get(name), off):
                raise APIError(400, f"{name} is not supported by this server", name)
        if body.get("n", 1) not in (None, 1):
            raise APIError(400, "n must be 1 (one completion per prompt)", "n")
        if body.get("stop") not in (None, [], ""):
            raise APIError(400, "stop sequences are not supported by this server", "stop")
        prompts = _prompts(body, self.spec.vocab)
        max_tokens = _number(body, "max_tokens", 16, int, 0, 2 ** 31 - 1)
        for ids in prompts:
            total = len(ids) + max_tokens
            if total > self.spec.max_positions:
                raise APIError(400, f"This model's maximum context length is {self.spec.max_positions} "
                               f"tokens, however you requested {total} tokens ({len(ids)} in your prompt; "
                               f"{max_tokens} for the completion). Please reduce your prompt; or completion "
                               f"length.",
                               "max_tokens", "context_length_exceeded")
            if -(-total // self.pool.page_size) > self.pool.num_pages:
                raise APIError(400, f"{total} tokens need more than the server's KV pool of "
                               f"{self.pool.num_pages * self.pool.page_size} tokens", "max_tokens",
                               "context_length_exceeded")
        candidates = self.worker.scheduler.engine.candidates
        top_k = _number(body, "top_k", 0, int, -1, candidates)  # vLLM's extensions: -1 and 0 are off
        sampling = Sampling(
            float(_number(body, "temperature", 1.0, (int, float), 0, 2)),
            top_k=max(top_k, 0),
            top_p=float(_number(body, "top_p", 1.0, (int, float), 1e-9, 1)),
            repetition_penalty=float(_number(body, "repetition_penalty", 1.0, (int, float), 1e-9, 1e9)),
            seed=int(_number(body, "seed", 0, int, -2 ** 63, 2 ** 64 - 1)) % 2 ** 24,  # the generator's range
        )
        stream = body.get("stream") or False
        if not isinstance(stream, bool):
            raise APIError(400, "stream must be a boolean", "stream")
        return prompts, max_tokens, {"sampling": sampling, "ignore_eos": False}, stream

    def submit(self, prompt, max_tokens, settings):
        """Queue one prompt; (handle, an asyncio queue of (token, finish reason, error) events)."""
        loop, events = asyncio.get_running_loop(), asyncio.Queue()

        def listener(token, finish, error):
            loop.call_soon_threadsafe(events.put_nowait, (token, finish, error))

        return self.worker.submit(prompt, max_tokens, listener, **settings), events


def create_app(worker: Worker, model_name: str) -> Starlette:
    """The Starlette app serving `worker`'s model under `model_name`."""
    service = Service(worker, model_name)

    async def models(request: Request):
        return JSONResponse({"object": "list", "data": [service.model_card()]})

    async def model(request: Request):
        if request.path_params["model"] != service.name:
            name = request.path_params["model"]
            return APIError(404, f"The model `{name}` does not exist or you do not have access to it.",
                            "model", "model_not_found").response()
        return JSONResponse(service.model_card())

    async def completions(request: Request):
        try:
            try:
                body = json.loads(await request.body())
            except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nested past reason
                raise APIError(400, "We could not parse the JSON body of your request. (HINT: This likely "
                               "means you aren't using your HTTP library correctly. The OpenAI API expects "
                               "a JSON payload, but what was sent was not valid JSON.)") from None
            prompts, max_tokens, settings, stream = service.check(body)
        except APIError as e:
            return e.response()
        head = {"id": f"cmpl-{uuid.uuid4().hex[:24]}", "object": "text_completion",
                "created": int(time.time()), "model": service.name}
        jobs = [service.submit(p, max_tokens, settings) for p in prompts]
        if stream:
            return StreamingResponse(_stream(service, head, jobs), media_type="text/event-stream")
        return await _complete(service, head, jobs, prompts)

    return Starlette(routes=[
        Route("/v1/models", models),
        Route("/v1/models/{model:path}", model),
        Route("/v1/completions", completions, methods=["POST"]),
    ])


async def _complete(service, head, jobs, prompts):
    choices, used = [], 0
    try:
        for index, (handle, events) in enumerate(jobs):
            tokens, finish = [], None
            while finish is None:
                token, finish, error = await events.get()
                if error is not None:
                    return APIError(500, f"the request failed: {error}", kind="server_error").response()
                if token is not None:
                    tokens.append(token)
            used += len(tokens)
            choices.append({"text": decode(tokens), "index": index, "logprobs": None,
                            "finish_reason": finish})
    finally:  # a client gone mid-request (the task is cancelled) frees its pages
        for handle, _ in jobs:
            service.worker.cancel(handle)
    prompt_tokens = sum(len(p) for p in prompts)
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": used, "total_tokens": prompt_tokens + used}
    return JSONResponse({**head, "choices": choices, "usage": usage})


async def _stream(service, head, jobs):
    """Server-sent events: a chunk per token of any prompt as it comes, then [DONE]."""
    merged = asyncio.Queue()

    async def pump(index, events):
        while True:
            event = await events.get()
            await merged.put((index, *event))
            if event[1] is not None or event[2] is not None:
                return

    pumps = [asyncio.create_task(pump(i, events)) for i, (_, events) in enumerate(jobs)]
    try:
        live = len(jobs)
        while live:
            index, token, finish, error = await merged.get()
            if error is not None:
                body = {"error": {"message": f"the request failed: {error}", "type": "server_error",
                                  "param": None, "code": None}}
                yield f"data: {json.dumps(body)}\n\n"
                return
            text = decode([token]) if token is not None else ""
            choice = {"text": text, "index": index, "logprobs": None, "finish_reason": finish}
            yield f"data: {json.dumps({**head, 'choices': [choice]})}\n\n"
            live -= finish is not None
        yield "data: [DONE]\n\n"
    finally:
        for task in pumps:
            task.cancel()
        for handle, _ in jobs:
            service.worker.cancel(handle)
