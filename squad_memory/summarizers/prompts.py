"""The prompts of :class:`~squad_memory.summarizers.llm.LLMSummarizer`. A template is a
``str.format`` string with ``{previous}`` (the previous summary, or "(none yet)"),
``{messages}`` (only those being folded in, one ``role: text`` line each, tools in brackets),
``{max_chars}`` (the reply's limit) and optionally ``{max_tokens}`` (``SUMMARY_TOKENS``).
"""

from __future__ import annotations

from squad_memory.exceptions import ConfigurationError

DEFAULT_SYSTEM = (
    "You maintain the running summary of a conversation between a user and an AI assistant. "
    "The summary replaces the older messages in the assistant's memory, so it must keep "
    "everything the assistant needs to continue the conversation."
)

DEFAULT_PROMPT = """Update the running summary with the new messages.

<previous_summary>
{previous}
</previous_summary>

<new_messages>
{messages}
</new_messages>

Write the updated summary. Keep facts, names, numbers, dates, decisions, the user's goals and \
preferences, open questions and tool results that still matter; drop greetings and small talk. \
Merge the previous summary in rather than appending to it. Write plain text in the \
conversation's language, at most {max_chars} characters. Reply with the summary only."""


#: Appended to a prompt whose template has no ``{max_tokens}`` when a token budget is set.
TOKEN_BUDGET = "\nKeep the summary within {max_tokens} tokens."


def check_template(template: str) -> str:
    """Return ``template`` if it formats with its fields, else say what is wrong."""
    try:
        template.format(previous="", messages="", max_chars=0, max_tokens=0)
    except (KeyError, IndexError, ValueError) as exc:
        raise ConfigurationError(
            f"The summarizer prompt must be a str.format template using only {{previous}}, "
            f"{{messages}}, {{max_chars}} and {{max_tokens}} (double other braces): {exc!r}"
        ) from exc
    if "{messages}" not in template:
        raise ConfigurationError("The summarizer prompt must contain {messages}.")
    return template
