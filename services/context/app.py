"""The context service as a FastStream app: `faststream run services.context.app:app`
(needs REDIS_URL), or `loopline serve context`."""

from services.app import build_app
from services.registry import factory

app, runtime = build_app(["context"], factory)
