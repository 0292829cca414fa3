"""Where :class:`~squad_memory.summarizers.llm.LLMSummarizer` sends its prompt.

A backend has ``label`` and ``complete(system, prompt) -> str``. Three ship:

- :class:`OpenAIBackend`: any OpenAI-compatible chat-completions endpoint
  (OpenAI, Azure OpenAI's v1 endpoint, vLLM, Ollama, LM Studio), with the
  official ``openai`` package (``pip install 'squad-memory[openai]'``);
- :class:`AnthropicBackend`: Anthropic's Messages API with the official
  ``anthropic`` package (``pip install 'squad-memory[anthropic]'``);
- :class:`AgentBackend`: any agent-squad ``Agent``, so the agents and
  credentials already configured do the summarizing.

Every failure becomes a :class:`~squad_memory.exceptions.SummarizerError`
subclass: :class:`SummarizerTimeout`, :class:`SummarizerRateLimited`,
:class:`SummarizerBackendError` or :class:`SummarizerBadReply`.
"""

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

__all__ = ["AgentBackend", "AnthropicBackend", "Backend", "OpenAIBackend", "translate_error"]


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


class _SDKBackend:
    """Shared by the OpenAI and Anthropic backends: a lazily built client, errors translated."""

    sdk_name = ""
    client_class = ""

    def __init__(
        self,
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
        self.model, self.base_url, self.api_key = model, base_url, api_key
        self.timeout, self.max_retries = timeout, max_retries
        self.max_tokens, self.temperature = max_tokens, temperature
        self._client = client
        where = f" at {base_url}" if base_url else ""
        self.label = f"{self.sdk_name}:{model}{where}"

    @property
    def client(self) -> Any:
        if self._client is None:
            factory = getattr(_sdk(self.sdk_name), self.client_class)
            try:
                self._client = factory(
                    base_url=self.base_url,
                    api_key=self.api_key,
                    timeout=self.timeout,
                    max_retries=self.max_retries,
                )
            except Exception as exc:  # the SDKs raise their base error for a missing key
                raise SummarizerBackendError(
                    f"Cannot build the {self.sdk_name} client: {exc} Set "
                    f"SQUAD_MEMORY['LLM']['API_KEY'] (any string for a local server)."
                ) from exc
        return self._client

    def complete(self, system: str, prompt: str) -> str:
        sdk = _sdk(self.sdk_name)
        client = self.client
        try:
            reply = self._request(client, system, prompt)
        except sdk.APIError as exc:
            raise translate_error(exc, sdk, self.label, self.timeout) from exc
        return _non_empty(self._text(reply), self.label)

    def _options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"model": self.model}
        if self.temperature is not None:
            options["temperature"] = self.temperature
        if self.max_tokens is not None:
            options["max_tokens"] = self.max_tokens
        return options

    def _request(self, client: Any, system: str, prompt: str) -> Any:
        raise NotImplementedError

    def _text(self, reply: Any) -> Any:
        raise NotImplementedError


class OpenAIBackend(_SDKBackend):
    """An OpenAI-compatible chat-completions endpoint, through the ``openai`` package."""

    sdk_name, client_class = "openai", "OpenAI"

    def _request(self, client: Any, system: str, prompt: str) -> Any:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
        return client.chat.completions.create(messages=messages, **self._options())

    def _text(self, reply: Any) -> Any:
        try:
            return reply.choices[0].message.content
        except (AttributeError, IndexError, KeyError, TypeError):
            raise SummarizerBadReply(
                f"{self.label} replied without choices[0].message.content: {str(reply)[:300]!r}"
            ) from None


class AnthropicBackend(_SDKBackend):
    """Anthropic's Messages API, through the ``anthropic`` package."""

    sdk_name, client_class = "anthropic", "Anthropic"

    def _options(self) -> dict[str, Any]:
        options = super()._options()
        options.pop("temperature", None)  # current Messages API models choose their own
        options.setdefault("max_tokens", 1024)  # required by the Messages API
        return options

    def _request(self, client: Any, system: str, prompt: str) -> Any:
        messages = [{"role": "user", "content": prompt}]
        return client.messages.create(system=system, messages=messages, **self._options())

    def _text(self, reply: Any) -> Any:
        try:
            return "".join(b.text for b in reply.content if getattr(b, "type", None) == "text")
        except (AttributeError, TypeError):
            raise SummarizerBadReply(
                f"{self.label} replied without text content blocks: {str(reply)[:300]!r}"
            ) from None


class AgentBackend:
    """Any agent-squad ``Agent``: the prompt goes to ``agent.process_request``.

    Args:
        agent: the agent (its own system prompt and credentials apply; the
            summarizer's instructions travel in the request text).
        timeout: seconds to wait for the answer; None waits as long as the agent does.
        user_id, session_id: passed to ``process_request``. The chat history
            passed is empty, and nothing is saved to any storage.
    """

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
