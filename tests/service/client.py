"""What the service tests share: a keep-alive JSON client of a served app."""

import http.client
import json
from urllib.parse import urlsplit


class Client:
    """One keep-alive connection to a service: (status, JSON answer) of each request."""

    def __init__(self, service, token: str | None = "") -> None:
        """``service``: an :class:`~mlxe.service.server.HttpService`; ``token``: "" for its own, None for none."""
        parts = urlsplit(service.url)
        self.connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        token = service.token if token == "" else token
        self.headers = {"Content-Type": "application/json"}
        if token is not None:
            self.headers["Authorization"] = f"Bearer {token}"

    def __call__(self, method: str, path: str, body: object = None) -> tuple[int, dict]:
        data = body if isinstance(body, (str, bytes)) or body is None else json.dumps(body)
        self.connection.request(method, path, data, self.headers)
        response = self.connection.getresponse()
        return response.status, json.loads(response.read())
