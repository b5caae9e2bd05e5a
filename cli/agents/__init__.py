"""What agents reach: the operations (argument models) shared by the MCP server and the HTTP API, the
two servers, and the guards in front of them.
"""

__all__: list[str] = []
