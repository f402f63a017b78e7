"""The manifest's JSON Schema, generated from the same pydantic models that validate it."""

from __future__ import annotations

import re
from typing import Any

from datum.providers.registry import Unloadable, provider, refused, types


def manifest_schema(broken: dict[str, str] | None = None) -> dict[str, Any]:
    """A draft 2020-12 schema: ``resources`` is a list of one-key objects ``Type[name]: {attributes}``.

    Every declared resource type is in it, plugins' included; a type whose plugin cannot
    be loaded is left out and, when ``broken`` is given, put there with why.
    """
    defs: dict[str, Any] = {}
    patterns: dict[str, Any] = {}
    if broken is not None:
        broken.update(refused())  # a name another distribution also declares (``datum.core.owners``)
    for type_name in sorted(types()):
        try:
            prov = provider(type_name)
            spec = prov.spec_model()
        except Exception as exc:  # noqa: BLE001 - a broken plugin is reported, never fatal
            if broken is not None:
                broken[type_name] = str(exc) if isinstance(exc, Unloadable) else f"{type_name}: {exc}"
            continue
        schema = spec.model_json_schema(ref_template="#/$defs/{model}")
        defs.update(schema.pop("$defs", {}))
        if prov.namevar and prov.namevar in schema.get("required", []):
            # The name fills the namevar, so a manifest may leave it out.
            schema["required"] = [r for r in schema["required"] if r != prov.namevar]
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
