"""``LLMSummarizer``: an incremental summary written by a language model, sent only the previous
summary and the messages being folded in (cut as :mod:`.base` cuts), so its cost does not grow with
the conversation. :func:`summarize` is the one ``SQUAD_MEMORY["LLM"]`` describes."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from squad_memory.conf import app_settings
from squad_memory.exceptions import ConfigurationError
from squad_memory.summarizers import prompts
from squad_memory.summarizers.backends import AgentBackend, Backend, SDKBackend
from squad_memory.summarizers.base import (
    SUMMARY_PREFIX,
    make_summary,
    max_summary_chars,
    split,
    transcript,
)

__all__ = ["LLMSummarizer", "from_settings", "llm_settings", "summarize"]


#: Options of :class:`LLMSummarizer` itself (the others go to the backend).
_OWN = ("prompt", "system", "max_chars", "summary_tokens")


class LLMSummarizer:
    """A summarizer that asks ``backend`` (:mod:`.backends`) to update the running summary:
    ``prompt`` is a template (:mod:`.prompts`); a reply over ``max_chars`` (at most
    ``MAX_SUMMARY_CHARS``) is cut and says so; ``block_chars`` caps one content block in the
    prompt; ``summary_tokens`` is put in the prompt and sent as ``max_tokens``."""

    def __init__(
        self,
        backend: Backend,
        *,
        prompt: str | None = None,
        system: str | None = None,
        max_chars: int | None = None,
        block_chars: int = 2000,
        summary_tokens: int | None = None,
    ) -> None:
        self.backend = backend
        self.prompt = prompts.check_template(prompt or prompts.DEFAULT_PROMPT)
        self.system = system or prompts.DEFAULT_SYSTEM
        if max_chars is not None and max_chars < 100:
            raise ConfigurationError(f"max_chars must be at least 100, got {max_chars}.")
        self.max_chars, self.block_chars = max_chars, block_chars
        if summary_tokens is not None and summary_tokens < 1:
            raise ConfigurationError(f"summary_tokens must be positive, got {summary_tokens}.")
        self.summary_tokens = summary_tokens
        if summary_tokens is not None and hasattr(backend, "max_tokens"):
            backend.max_tokens = summary_tokens  # the reply cannot exceed the budget

    @classmethod
    def openai(cls, model: str, **options: Any) -> LLMSummarizer:
        """An OpenAI-compatible endpoint; ``options`` go to :class:`.SDKBackend` or here."""
        own = {k: options.pop(k) for k in _OWN if k in options}
        return cls(SDKBackend("openai", model, **options), **own)

    @classmethod
    def anthropic(cls, model: str, **options: Any) -> LLMSummarizer:
        """Anthropic's Messages API; ``options`` go to :class:`.SDKBackend` or here."""
        own = {k: options.pop(k) for k in _OWN if k in options}
        return cls(SDKBackend("anthropic", model, **options), **own)

    @classmethod
    def agent(cls, agent: Any, **options: Any) -> LLMSummarizer:
        """An agent-squad ``Agent``; ``options`` go to :class:`.AgentBackend` or here."""
        own = {k: options.pop(k) for k in _OWN if k in options}
        return cls(AgentBackend(agent, **options), **own)

    def __repr__(self) -> str:
        return f"LLMSummarizer({self.backend.label})"

    def __call__(self, history: list[Any], keep_last: int) -> list[Any]:
        """Fold the previous summary and the older messages into a new summary message."""
        part = split(history, keep_last)
        if not part.fold:
            return list(history)
        limit = max_summary_chars(self.max_chars)
        text = self.backend.complete(self.system, self.render(part.previous, part.fold, limit))
        return [make_summary(_strip_prefix(text), limit), *part.recent]

    def render(self, previous: str | None, fold: list[Any], limit: int) -> str:
        """The prompt for one compression: the previous summary and the new messages only."""
        text = self.prompt.format(
            previous=previous or "(none yet)",
            messages=transcript(fold, self.block_chars),
            max_chars=max(limit - len(SUMMARY_PREFIX) - 1, 1),
            max_tokens=self.summary_tokens or "",
        )
        if self.summary_tokens is not None and "{max_tokens}" not in self.prompt:
            text += prompts.TOKEN_BUDGET.format(max_tokens=self.summary_tokens)
        return text


def _strip_prefix(text: str) -> str:
    # A model that imitates the previous summary may repeat the marker.
    text = text.strip()
    return text[len(SUMMARY_PREFIX) :].lstrip(" :") if text.startswith(SUMMARY_PREFIX) else text


def llm_settings() -> dict[str, Any]:
    """``SQUAD_MEMORY["LLM"]`` merged over its defaults."""
    try:
        return app_settings.llm
    except ImproperlyConfigured as exc:
        raise ConfigurationError(str(exc)) from exc


def from_settings(**overrides: Any) -> LLMSummarizer:
    """An :class:`LLMSummarizer` as ``SQUAD_MEMORY["LLM"]`` describes (keys upper-case)."""
    conf = {**llm_settings(), **{k.upper(): v for k, v in overrides.items()}}
    name = conf["BACKEND"]
    if name == "agent":
        backend: Backend = AgentBackend(_agent(conf.get("AGENT")), timeout=conf["TIMEOUT"])
    elif name in ("openai", "anthropic"):
        backend = SDKBackend(
            name,
            conf["MODEL"],
            base_url=conf["BASE_URL"],
            api_key=conf["API_KEY"],
            timeout=float(conf["TIMEOUT"]),
            max_retries=int(conf["MAX_RETRIES"]),
            max_tokens=conf["MAX_TOKENS"],
            temperature=conf["TEMPERATURE"],
        )
    else:
        raise ConfigurationError(
            f"SQUAD_MEMORY['LLM']['BACKEND'] must be 'openai', 'anthropic' or 'agent'; "
            f"got {name!r}."
        )
    return LLMSummarizer(
        backend,
        prompt=conf["PROMPT"],
        system=conf.get("SYSTEM"),
        summary_tokens=conf.get("SUMMARY_TOKENS"),
    )


def _agent(path: Any) -> Any:
    if not isinstance(path, str):
        raise ConfigurationError(
            "SQUAD_MEMORY['LLM']['AGENT'] must be the dotted path of an agent-squad Agent "
            "or of a function returning one."
        )
    target = import_string(path)
    return target if hasattr(target, "process_request") else target()


_cache: dict[str, LLMSummarizer] = {}


def summarize(history: list[Any], keep_last: int) -> list[Any]:
    """The summarizer ``SQUAD_MEMORY["LLM"]`` describes (built once per configuration)."""
    key = repr(sorted(llm_settings().items()))
    if key not in _cache:
        _cache.clear()
        _cache[key] = from_settings()
    return _cache[key](history, keep_last)
