"""The web page's templates (Jinja2) and static files; rendered by ``datum.api.routes.ui``."""
