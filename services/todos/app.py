"""The todos service as a FastStream app: `faststream run services.todos.app:app`
(needs REDIS_URL), or `loopline serve todos`."""

from services.app import build_app
from services.registry import factory

app, runtime = build_app(["todos"], factory)
