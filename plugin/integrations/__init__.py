"""Adapters for the RAG frameworks and agents people already run, each an optional extra:

- :mod:`hybridsag.integrations.langchain`: a LangChain ``BaseRetriever``
  (``pip install 'hybridsag[langchain]'``);
- :mod:`hybridsag.integrations.llamaindex`: a LlamaIndex ``BaseRetriever``
  (``pip install 'hybridsag[llamaindex]'``);
- :mod:`hybridsag.integrations.mcp_server`: ``hybridsag mcp``, an MCP server over stdio
  (``pip install 'hybridsag[mcp]'``).

Each imports its framework inside its own module, so ``import hybridsag`` (and this package)
never imports LangChain, LlamaIndex or MCP; importing an adapter whose extra is missing raises
:class:`ExtraMissingError` naming the ``pip install`` to run. What they share (a search in
process or over the HTTP service, result metadata, errors) is :mod:`hybridsag.integrations.backend`.
"""

from hybridsag.integrations.backend import ExtraMissingError, QueryValueError, result_metadata

__all__ = ["ExtraMissingError", "QueryValueError", "result_metadata"]
