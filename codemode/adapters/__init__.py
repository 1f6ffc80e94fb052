"""Adapters that give an agent framework a ready ``run_code`` tool plus the direct tools.

Each is a thin module over `HostTools` (which wraps an open `Host`):

- `codemode.adapters.openai`: Chat Completions and Responses tool definitions and results;
- `codemode.adapters.anthropic`: Messages API tool definitions and ``tool_result`` blocks;
- `codemode.adapters.pydantic_ai`: a pydantic-ai toolset (``pip install 'codemode[pydantic-ai]'``);
- `codemode.adapters.langchain`: LangChain tools (``pip install 'codemode[langchain]'``).

The first two need no package: they speak the APIs' JSON (dicts, or the SDKs' objects).
"""

from codemode.adapters._host_tools import HostTools, ToolOutput, ToolSpec

__all__ = ["HostTools", "ToolOutput", "ToolSpec"]
