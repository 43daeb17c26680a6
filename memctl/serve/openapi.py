"""The OpenAPI 3.1 description `GET /openapi.json` serves, built from the operations' schemas."""

from __future__ import annotations

from memctl import __version__
from memctl.serve.operations import OPERATIONS

_ERROR = {"type": "object", "properties": {"error": {"type": "string"}, "status": {"type": "integer"}},
          "required": ["error", "status"]}
_ANSWERS = {"400": "bad arguments", "401": "no key, or not a valid one", "403": "the key's scope or namespace "
            "does not allow it", "404": "no such entry or operation", "408": "the body did not arrive within [serve] request_timeout", "409": "the fact was forgotten before",
            "413": "body over [serve] max_body_bytes", "429": "over [serve] rate_per_minute",
            "503": "the memory is busy", "504": "over [serve] request_timeout"}


def describe(base_url: str = "") -> dict:
    paths = {f"/v1/{name}": {"post": _post(op)} for name, op in OPERATIONS.items()}
    paths["/health"] = {"get": {"summary": "Whether the server is up (no key needed).", "security": [],
                                "responses": {"200": {"description": "up", "content": _json({"type": "object"})}}}}
    document = {
        "openapi": "3.1.0",
        "info": {"title": "memctl serve", "version": __version__,
                 "description": "A layered long-term memory for agents. Every /v1 call is a POST of a JSON object "
                                "and answers a JSON object; errors answer {\"error\", \"status\"}."},
        "paths": paths,
        "components": {"securitySchemes": {"key": {"type": "http", "scheme": "bearer",
                                                   "description": "`memctl keys add NAME --scope read|write|admin`"}},
                       "schemas": {"Error": _ERROR}},
        "security": [{"key": []}],
    }
    if base_url:
        document["servers"] = [{"url": base_url}]
    return document


def _post(op) -> dict:
    schema = {key: value for key, value in op.schema.items() if key != "description"}
    responses = {"200": {"description": "done", "content": _json({"type": "object"})}}
    responses.update({code: {"description": text, "content": _json({"$ref": "#/components/schemas/Error"})}
                      for code, text in _ANSWERS.items()})
    return {"operationId": op.name, "summary": op.schema["description"],
            "description": f"Needs a key of scope {op.scope} or above.",
            "requestBody": {"required": True, "content": _json(schema)}, "responses": responses}


def _json(schema: dict) -> dict:
    return {"application/json": {"schema": schema}}
