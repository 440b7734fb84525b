"""HTTP errors as every /v1 endpoint answers them: a status, a stable code and a message, in the
OpenAI error shape (`{"error": {"message", "type", "code"}}`)."""

from __future__ import annotations

from starlette.responses import JSONResponse


class HttpError(Exception):
    """A request the server refuses: 4xx for the client's mistakes, 5xx for its own."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.status, self.code, self.message = status, code, message

    def response(self) -> JSONResponse:
        return error_response(self.status, self.message, self.code)


# Codes a client should simply send again, and after how many seconds (Retry-After). engine_full:
# the request already waited server.slot_wait_s in line for a slot; slots free as turns end.
RETRY_AFTER_S = {"engine_full": 1}


def error_response(status: int, message: str, code: str) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    retry = RETRY_AFTER_S.get(code)
    headers = None if retry is None else {"Retry-After": str(retry)}
    return JSONResponse({"error": {"message": message, "type": kind, "code": code}}, status, headers)
