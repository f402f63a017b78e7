"""The manifest's JSON Schema, generated from the same pydantic models that validate it."""

from __future__ import annotations

import re
from typing import Any

from datum.providers.specs import SPECS


def manifest_schema() -> dict[str, Any]:
    """A draft 2020-12 schema: ``resources`` is a list of one-key objects ``Type[name]: {attributes}``."""
    defs: dict[str, Any] = {}
    patterns: dict[str, Any] = {}
    for type_name in sorted(SPECS):
        spec = SPECS[type_name]
        schema = spec.model_json_schema(ref_template="#/$defs/{model}")
        defs.update(schema.pop("$defs", {}))
        if spec.namevar and spec.namevar in schema.get("required", []):
            # The name fills the namevar, so a manifest may leave it out.
            schema["required"] = [r for r in schema["required"] if r != spec.namevar]
        schema["title"] = type_name
        defs[type_name] = schema
        patterns[f"^{re.escape(type_name)}\\[.+\\]$"] = {
            "anyOf": [{"$ref": f"#/$defs/{type_name}"}, {"type": "null"}]
        }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://datum.dev/schemas/manifest.json",
        "title": "Datum host manifest",
        "type": "object",
        "additionalProperties": False,
        "required": ["resources"],
        "properties": {
            "resources": {
                "type": "array",
                "items": {
                    "type": "object",
                    "minProperties": 1,
                    "maxProperties": 1,
                    "patternProperties": patterns,
                    "additionalProperties": False,
                },
            }
        },
        "$defs": defs,
    }
