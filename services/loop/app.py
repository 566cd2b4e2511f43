"""The loop service as a FastStream app: `faststream run services.loop.app:app`
(needs REDIS_URL), or `loopline serve loop`."""

from services.app import build_app
from services.registry import factory

app, runtime = build_app(["loop"], factory)
