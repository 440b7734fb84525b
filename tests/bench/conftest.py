# The service benchmark measures the same tiny server that the server tests talk to.
from tests.server.conftest import server

__all__ = ["server"]
