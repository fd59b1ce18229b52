"""The REST API under /api/v1: thin routers that parse, authorise, call a service, render."""
