"""Pluggable LLMs behind one ``complete(prompt) -> str``: ``grammar`` (the offline deterministic
operator, [R]), ``openai`` (any OpenAI-compatible endpoint), ``hf`` (a local model folder or
SmolLM2 from ``icml26_shared.data``; never a hub download) and ``replay`` (a recorded call log).
``LoggedLLM`` counts and logs every call and stops exactly at the call budget."""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path

from icml26_shared import UserError

from . import grammar as G
from .tasks import get_task

OPERATORS_MH = ("init_mh", "crossover_mh", "mutate_mh")


class BudgetExhausted(Exception):
    """Raised instead of making a call beyond the budget."""


class EndpointError(Exception):
    """The LLM endpoint failed after its retries (auth, not found, unreachable, 429/5xx/timeouts
    that outlasted ``--max-retries``): the run stops, its call log is written, ``--resume``
    continues it. Never budgeted."""


def _endpoint_problem(exc, base_url: str | None, model: str, api_key_env: str) -> str:
    """One line for an openai exception."""
    import openai

    where = base_url or "the OpenAI API"
    if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)):
        return f"{where} refused the key in {api_key_env} (HTTP {exc.status_code})"
    if isinstance(exc, openai.NotFoundError):
        return f"{where}: model {model!r} or the URL was not found (HTTP 404)"
    if isinstance(exc, openai.APITimeoutError):
        return f"{where} timed out (after the retries of --max-retries)"
    if isinstance(exc, openai.APIConnectionError):
        return f"cannot connect to {where} ({type(exc.__cause__ or exc).__name__})"
    if isinstance(exc, openai.APIStatusError):
        return f"{where} answered HTTP {exc.status_code} (after the retries of --max-retries)"
    return f"{where}: {type(exc).__name__}: {str(exc)[:200]}"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# ---------------------------------------------------------------- prompts

INSTRUCTIONS = {
    "init_mh": "Write a new task-agnostic metaheuristic in the ALGORITHM / PURPOSE / INPUT / OUTPUT template.",
    "crossover_mh": "Combine the phases of the parent metaheuristics into a better task-agnostic one.",
    "mutate_mh": "Change one phase or mechanism of the metaheuristic.",
    "instantiate": "Implement the metaheuristic as a complete solver for the task's interface.",
    "refine": "Improve the program: follow the metaheuristic more closely, fix errors, tune parameters.",
    "keyfn": "Rewrite only the program's key function (insertion / ordering criterion).",
    "transfer": "Transplant components of the other task's elite program into this task's program.",
    "eoh_init": "Write a new heuristic solver for the task's interface (first a one-sentence thought).",
    "e1": "Write a solver whose idea differs from all the parents.",
    "e2": "Find the backbone idea the parents share and write a new solver built on it.",
    "m1": "Modify the parent's structure to improve it.",
    "m2": "Change the parent's parameters only.",
    "m3": "Simplify the parent: remove components that do not help.",
}


def build_prompt(op: str, task: str | None, *, mhs: tuple[str, ...] = (), programs: tuple[str, ...] = (),
                 donor_task: str | None = None, scores: str = "") -> str:
    parts = ["You design heuristics for combinatorial optimisation.", f"OPERATOR: {op}"]
    if task:
        t = get_task(task)
        parts += [f"TASK: {task}", f"DESCRIPTION: {t.description}", "INTERFACE:", t.interface]
    parts.append(f"INSTRUCTION: {INSTRUCTIONS[op]}")
    if scores:
        parts.append(f"SCORES (higher is better): {scores}")
    for k, m in enumerate(mhs):
        parts += [f"--- METAHEURISTIC {k + 1} ---", m]
    if donor_task:
        parts.append(f"DONOR_TASK: {donor_task}")
    for k, p in enumerate(programs):
        parts += [f"--- PROGRAM {k + 1} ---", p]
    fmt = ("Reply with the metaheuristic text only, starting with 'ALGORITHM'." if op in OPERATORS_MH
           else "Reply with one complete Python program in a ```python block.")
    parts.append(fmt)
    return "\n".join(parts) + "\n"


def parse_program(reply: str, task: str) -> str | None:
    """The program in a reply, or None when the reply holds no usable program."""
    m = re.search(r"```(?:python)?\n(.*?)```", reply, re.S)
    src = m.group(1) if m else reply
    if f"class {get_task(task).solver_class}" not in src:
        return None
    try:
        compile(src, "<reply>", "exec")
    except (SyntaxError, ValueError):
        return None
    return src


def parse_mh(reply: str) -> str | None:
    i = reply.find("ALGORITHM")
    return reply[i:].strip() + "\n" if i >= 0 else None


# ---------------------------------------------------------------- clients


class GrammarLLM:
    """Deterministic offline operator: reads the genomes/configs in the prompt, edits them with
    the grammar's operator named on the OPERATOR line, and writes real text / Python back."""

    name = "grammar"

    def __init__(self, seed: int = 0):
        self.seed, self.counter = int(seed), 0

    def complete(self, prompt: str) -> str:
        self.counter += 1
        rng = G.seeded(self.seed, self.counter, prompt)
        op = re.search(r"^OPERATOR: (\S+)", prompt, re.M).group(1)
        m = re.search(r"^TASK: (\S+)", prompt, re.M)
        task = m.group(1) if m else None
        if task is not None:
            G.require_components([task])
        mhs, cfgs = G.parse_genomes(prompt), G.parse_configs(prompt)
        mh_or_random = mhs[0] if mhs else G.random_mh(rng)
        if op == "init_mh":
            return G.render_mh(G.random_mh(rng))
        if op == "crossover_mh":
            return G.render_mh(G.crossover_mh(mhs[0], mhs[-1], rng) if mhs else G.random_mh(rng))
        if op == "mutate_mh":
            return G.render_mh(G.mutate_mh(mh_or_random, rng))
        if op == "instantiate":
            cfg = G.instantiate(task, mh_or_random, rng, cfgs[0] if cfgs else None)
        elif op == "refine":
            cfg = G.refine(task, cfgs[0], mh_or_random, rng) if cfgs else G.random_config(task, rng)
        elif op == "keyfn":
            cfg = G.rewrite_key(task, cfgs[0], rng)
        elif op == "transfer":
            donor = re.search(r"^DONOR_TASK: (\S+)", prompt, re.M).group(1)
            cfg = G.transfer(task, cfgs[0], donor, cfgs[1], rng)
        elif op == "eoh_init":
            cfg = G.random_config(task, rng)
        elif op == "e1":
            cfg = G.eoh_e1(task, cfgs, rng)
        elif op == "e2":
            cfg = G.eoh_e2(task, cfgs, rng)
        else:
            cfg = {"m1": G.eoh_m1, "m2": G.eoh_m2, "m3": G.eoh_m3}[op](task, cfgs[0], rng)
        return "```python\n" + G.render_program(task, cfg, f"{op} (grammar operator)") + "```\n"


class OpenAILLM:
    """Any OpenAI-compatible chat endpoint; the key is read from the variable ``api_key_env``
    and is never written anywhere. 429, 5xx, timeouts and dropped connections are retried by the
    openai client with exponential backoff (``max_retries``); what outlasts them, and 401 / 403 /
    404, raises :class:`EndpointError` (the run stops; nothing is budgeted)."""

    def __init__(self, model: str, base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 temperature: float = 1.0, timeout: float = 120.0, max_tokens: int | None = None,
                 max_retries: int = 3):
        key = os.environ.get(api_key_env)
        if not key:
            raise UserError(f"the API key variable {api_key_env} is not set (--api-key-env names it)")
        import openai

        self.name = f"openai:{model}"
        self.model, self.temperature, self.max_tokens = model, temperature, max_tokens
        self.base_url, self.api_key_env = base_url, api_key_env
        self.client = openai.OpenAI(base_url=base_url, api_key=key, timeout=timeout, max_retries=max_retries)

    def _create(self, prompt: str, max_tokens: int | None, client=None):
        import openai

        kw = {} if max_tokens is None else {"max_tokens": max_tokens}
        try:
            return (client or self.client).chat.completions.create(
                model=self.model, temperature=self.temperature,
                messages=[{"role": "user", "content": prompt}], **kw)
        except openai.APIError as exc:
            raise EndpointError(_endpoint_problem(exc, self.base_url, self.model, self.api_key_env)) from None

    def check(self, timeout: float = 15.0) -> None:
        """A minimal request before the run (one token, at most one retry): a refused key, an
        unknown model or URL, or no server is one line (UserError, exit 2) before anything is
        written."""
        try:
            self._create("Reply with OK.", 1, self.client.with_options(
                timeout=timeout, max_retries=min(self.client.max_retries, 1)))
        except EndpointError as exc:
            raise UserError(f"LLM endpoint check failed: {exc}") from None

    def complete(self, prompt: str) -> str:
        r = self._create(prompt, self.max_tokens)
        return (r.choices[0].message.content or "") if r.choices else ""


class HFLLM:
    """A local causal LM folder (or ``smollm2``) with transformers; greedy decoding.

    CPU speed (measured on the shared 2-core machine): with torch's default two intra-op threads
    competing with other jobs, one 64-token SmolLM2-135M call took 155 s (0.4 token/s); with one
    thread it is ~0.15-0.3 s per token, plus ~2-7 s to prefill the ~450-token prompt. So on CPU
    ``threads`` defaults to 1, decoding runs under ``torch.inference_mode`` with the KV cache, and
    generation stops as soon as the reply's code block is closed (``StopAtFence``)."""

    def __init__(self, model: str, max_new_tokens: int = 384, device: str | None = None,
                 threads: int | None = None, temperature: float = 0.0):
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer

        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()

        if model == "smollm2":
            from icml26_shared.data import smollm2_hf_dir

            path = smollm2_hf_dir()
        else:
            path = Path(model)
            if not (path / "config.json").is_file():
                raise UserError(f"--model {model}: not a local model folder (no config.json); "
                                "mths never downloads models")
        self.torch = torch
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if self.device == "cpu":
            torch.set_num_threads(threads or 1)
        dtype = torch.bfloat16 if self.device == "cuda" else torch.float32
        self.tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=dtype).to(self.device)
        self.model.eval()
        self.name = f"hf:{Path(path).name}"
        self.max_new_tokens, self.temperature = max_new_tokens, temperature
        self.generated_tokens = 0
        # a base model without a chat template gets the plain prompt (decided once, at load)
        self.chat = bool(getattr(self.tok, "chat_template", None))

    def complete(self, prompt: str) -> str:
        from transformers import StoppingCriteria, StoppingCriteriaList

        if self.chat:
            enc = self.tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                               return_tensors="pt", return_dict=True)
        else:
            enc = self.tok(prompt, return_tensors="pt")
        enc = {k: v.to(self.device) for k, v in enc.items()}
        start, tok, torch = enc["input_ids"].shape[1], self.tok, self.torch

        class StopAtFence(StoppingCriteria):  # the reply's ```python block is closed: stop
            def __call__(self, ids, scores, **kw):
                text = tok.decode(ids[0, start:], skip_special_tokens=True)
                done = text.count("```") >= 2 or (text.startswith("ALGORITHM") and "END ALGORITHM" in text)
                return torch.full((ids.shape[0],), done, dtype=torch.bool, device=ids.device)

        with self.torch.inference_mode():
            sample = {"do_sample": True, "temperature": self.temperature} if self.temperature > 0 else \
                {"do_sample": False}
            out = self.model.generate(**enc, max_new_tokens=self.max_new_tokens, **sample,
                                      use_cache=True, pad_token_id=self.tok.eos_token_id,
                                      stopping_criteria=StoppingCriteriaList([StopAtFence()]))
        self.generated_tokens += int(out.shape[1] - start)
        return self.tok.decode(out[0, start:], skip_special_tokens=True)


class ReplayLLM:
    """Answers from a recorded call log, in order; a prompt that differs from the record means
    the run diverged (different code or settings) and is an error."""

    def __init__(self, records: list[dict], then=None):
        self.records, self.k, self.then = records, 0, then
        self.name = records[0]["model"] if records else "replay"  # replayed logs read like the record

    def complete(self, prompt: str) -> str:
        if self.k >= len(self.records):
            if self.then is not None:
                return self.then.complete(prompt)
            raise UserError(f"replay: the log holds {len(self.records)} calls; the run asked for more")
        rec = self.records[self.k]
        if rec["prompt_sha"] != sha(prompt):
            raise UserError(f"replay diverged at call {self.k + 1} ({rec['operator']}): the prompt differs")
        self.k += 1
        return rec["reply"]


def read_log(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"no call log at {path}")
    try:
        return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    except ValueError as exc:
        raise UserError(f"{path}: corrupt call log ({exc})") from None


class LoggedLLM:
    """Counts, logs and budgets every call (the log holds prompts and replies, never keys)."""

    def __init__(self, client, budget: int):
        if budget <= 0:
            raise UserError("--budget-calls must be a positive integer")
        self.client, self.budget, self.calls, self.log = client, int(budget), 0, []
        self.seconds = 0.0
        self.failures: list[dict] = []  # transport failures: logged, never budgeted

    @property
    def left(self) -> int:
        return self.budget - self.calls

    def __call__(self, prompt: str, operator: str, task: str | None) -> str:
        if self.calls >= self.budget:
            raise BudgetExhausted
        t0 = time.perf_counter()
        try:
            reply = self.client.complete(prompt)
        except EndpointError as exc:
            self.failures.append({"after_call": self.calls, "operator": operator, "task": task, "error": str(exc)})
            raise
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        self.log.append({"call": self.calls, "operator": operator, "task": task, "model": self.client.name,
                         "prompt_sha": sha(prompt), "prompt": prompt, "reply": reply})
        return reply


def make_llm(kind: str, *, seed: int = 0, model: str | None = None, base_url: str | None = None,
             api_key_env: str = "OPENAI_API_KEY", replay_log: str | Path | None = None,
             temperature: float | None = None, max_tokens: int | None = None, max_retries: int = 3,
             check: bool = True):
    if kind == "grammar":
        return GrammarLLM(seed)
    if kind == "openai":
        if not model:
            raise UserError("--llm openai needs --model NAME")
        llm = OpenAILLM(model, base_url, api_key_env, 1.0 if temperature is None else temperature,
                        max_tokens=max_tokens, max_retries=max_retries)
        if check:
            llm.check()
        return llm
    if kind == "hf":
        return HFLLM(model or "smollm2", 384 if max_tokens is None else max_tokens,
                     temperature=0.0 if temperature is None else temperature)
    if kind == "replay":
        if not replay_log:
            raise UserError("--llm replay needs --model PATH/TO/calls.jsonl")
        return ReplayLLM(read_log(replay_log))
    raise UserError(f"unknown --llm {kind!r} (grammar, openai, hf, replay)")
