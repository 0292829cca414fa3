"""Where :class:`~squad_memory.summarizers.llm.LLMSummarizer` sends its prompt: an object
with ``label`` and ``complete(system, prompt) -> str`` whose every failure is a
:class:`~squad_memory.exceptions.SummarizerError` subclass."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import AsyncIterable
from types import ModuleType
from typing import Any, Protocol

from asgiref.sync import async_to_sync

from squad_memory.exceptions import (
    ConfigurationError,
    SummarizerBackendError,
    SummarizerBadReply,
    SummarizerRateLimited,
    SummarizerTimeout,
)

__all__ = ["AgentBackend", "Backend", "SDKBackend", "translate_error"]


class Backend(Protocol):
    """What an LLM summarizer needs from a model: one prompt in, one text out."""

    label: str

    def complete(self, system: str, prompt: str) -> str: ...


def _sdk(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise ConfigurationError(
            f"The {name!r} package is needed by this summarizer backend: "
            f"pip install 'squad-memory[{name}]'."
        ) from exc


def translate_error(
    exc: Exception, sdk: ModuleType, label: str, timeout: float | None
) -> Exception:
    """The squad_memory exception for an ``openai`` or ``anthropic`` SDK error."""
    if isinstance(exc, sdk.APITimeoutError):
        return SummarizerTimeout(
            f"{label} did not answer within {timeout} s; the compression will be retried. "
            f"Raise SQUAD_MEMORY['LLM']['TIMEOUT'] if this keeps happening."
        )
    if isinstance(exc, sdk.RateLimitError):
        retry = exc.response.headers.get("retry-after") or "unknown"
        return SummarizerRateLimited(
            f"{label} answered HTTP 429 (rate limit or quota; retry-after: {retry}); "
            f"the compression will be retried later: {exc.message}"
        )
    if isinstance(exc, sdk.APIStatusError):
        return SummarizerBackendError(
            f"{label} answered HTTP {exc.status_code}: {exc.message}. Check the model name, "
            f"the API key and the endpoint; a 5xx is retried later."
        )
    if isinstance(exc, sdk.APIResponseValidationError):
        return SummarizerBadReply(f"{label} sent a reply the SDK could not read: {exc.message}")
    if isinstance(exc, sdk.APIConnectionError):
        return SummarizerBackendError(
            f"Cannot reach {label}: {exc.message}. Check SQUAD_MEMORY['LLM']['BASE_URL']."
        )
    return SummarizerBackendError(f"{label} failed: {type(exc).__name__}: {exc}")


class SDKBackend:
    """An ``openai`` client (any OpenAI-compatible endpoint: OpenAI, Azure OpenAI's v1, vLLM,
    Ollama, LM Studio) or an ``anthropic`` one, built on first use. ``temperature`` goes to
    OpenAI-compatible endpoints only; Anthropic always gets a ``max_tokens`` (it needs one)."""

    def __init__(
        self,
        vendor: str,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 2,
        max_tokens: int | None = 1024,
        temperature: float | None = 0.2,
        client: Any = None,
    ) -> None:
        if not model:
            raise ConfigurationError(
                "An LLM summarizer needs a model name: set SQUAD_MEMORY['LLM']['MODEL'] "
                "or pass model=..."
            )
        self.vendor, self.model, self.base_url, self.api_key = vendor, model, base_url, api_key
        self.timeout, self.max_retries = timeout, max_retries
        self.max_tokens, self.temperature = max_tokens, temperature
        self._client = client
        self.label = f"{vendor}:{model}" + (f" at {base_url}" if base_url else "")

    @property
    def client(self) -> Any:
        if self._client is None:
            sdk = _sdk(self.vendor)
            factory = sdk.OpenAI if self.vendor == "openai" else sdk.Anthropic
            try:
                self._client = factory(
                    base_url=self.base_url,
                    api_key=self.api_key,
                    timeout=self.timeout,
                    max_retries=self.max_retries,
                )
            except Exception as exc:  # the SDKs raise their base error for a missing key
                raise SummarizerBackendError(
                    f"Cannot build the {self.vendor} client: {exc} Set "
                    f"SQUAD_MEMORY['LLM']['API_KEY'] (any string for a local server)."
                ) from exc
        return self._client

    def complete(self, system: str, prompt: str) -> str:
        sdk, client = _sdk(self.vendor), self.client
        user = [{"role": "user", "content": prompt}]
        try:
            if self.vendor == "openai":
                reply = client.chat.completions.create(
                    messages=[{"role": "system", "content": system}, *user], **self._options()
                )
            else:
                reply = client.messages.create(system=system, messages=user, **self._options())
        except sdk.APIError as exc:
            raise translate_error(exc, sdk, self.label, self.timeout) from exc
        return _non_empty(self._text(reply), self.label)

    def _options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"model": self.model}
        if self.temperature is not None and self.vendor == "openai":
            options["temperature"] = self.temperature
        if self.max_tokens is not None or self.vendor == "anthropic":
            options["max_tokens"] = self.max_tokens or 1024
        return options

    def _text(self, reply: Any) -> Any:
        try:
            if self.vendor == "openai":
                return reply.choices[0].message.content
            return "".join(b.text for b in reply.content if getattr(b, "type", None) == "text")
        except (AttributeError, IndexError, KeyError, TypeError):
            raise SummarizerBadReply(
                f"{self.label} replied without a text answer: {str(reply)[:300]!r}"
            ) from None


class AgentBackend:
    """Any agent-squad ``Agent``: the prompt goes to ``agent.process_request``, with an
    empty chat history and nothing saved to any storage (the agent's own system prompt
    and credentials apply; the summarizer's instructions travel in the request text).
    ``timeout`` None waits as long as the agent does."""

    def __init__(
        self,
        agent: Any,
        *,
        timeout: float | None = 60.0,
        user_id: str = "squad_memory",
        session_id: str = "summarizer",
    ) -> None:
        self.agent, self.timeout = agent, timeout
        self.user_id, self.session_id = user_id, session_id
        self.label = f"agent:{getattr(agent, 'id', type(agent).__name__)}"

    def complete(self, system: str, prompt: str) -> str:
        return async_to_sync(self.acomplete)(system, prompt)

    async def acomplete(self, system: str, prompt: str) -> str:
        """The same as :meth:`complete`, from async code."""
        try:
            reply = await asyncio.wait_for(self._ask(f"{system}\n\n{prompt}"), self.timeout)
        except TimeoutError as exc:
            raise SummarizerTimeout(
                f"{self.label} did not answer within {self.timeout} s; "
                f"the compression will be retried."
            ) from exc
        except SummarizerBadReply:
            raise
        except Exception as exc:
            raise SummarizerBackendError(
                f"{self.label} failed: {type(exc).__name__}: {exc}"
            ) from exc
        return _non_empty(reply, self.label)

    async def _ask(self, text: str) -> Any:
        reply = await self.agent.process_request(text, self.user_id, self.session_id, [], None)
        if isinstance(reply, AsyncIterable):
            return "".join([_chunk_text(chunk) async for chunk in reply])
        content = getattr(reply, "content", None)
        if not content or not isinstance(content[0], dict):
            raise SummarizerBadReply(f"{self.label} answered without a text block: {reply!r}")
        return content[0].get("text")


def _chunk_text(chunk: Any) -> str:
    text = getattr(chunk, "text", chunk)
    return text if isinstance(text, str) else ""


def _non_empty(text: Any, label: str) -> str:
    if not isinstance(text, str) or not text.strip():
        raise SummarizerBadReply(f"{label} answered with an empty summary ({text!r}).")
    return text.strip()
