"""The HTTP API: FastAPI app, response schemas, Cedar authorization, metrics and the web page."""
