"""The project's own HTTP/1.1 server (uvloop + httptools), free of Django and of the apps: it is handed an
application factory and speaks to what it returns through webserver.interface only."""
from .interface import JSON_HEADERS, Application, Request, Response, error_response, wsgi_path
from .server import main

__all__ = ["JSON_HEADERS", "Application", "Request", "Response", "error_response", "main", "wsgi_path"]
