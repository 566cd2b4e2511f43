"""The todos service as a FastStream app: `faststream run services.todos.app:app`
(needs REDIS_URL), or `loopline serve todos`."""

from services.registry import factory
from services.runtime import build_app

app, runtime = build_app(["todos"], factory)
